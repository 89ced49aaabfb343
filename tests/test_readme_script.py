"""The README's "Ten lines" example, run the way a user runs it: a file executed with ``python`` (no
``if __name__ == "__main__":`` guard) and the cells of a Jupyter notebook (whose ``__main__`` has no file).
Phase 2 forks its children from a fork server that never imports the caller's ``__main__``, so the
program is printed once and the pipeline measures and selects a correct kernel."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CHECK = """
import json as _json
import numpy as _np
_ref = ax.interpret(small, [t.double().numpy() for t in torch_tensors])
print("AXON_README_CHECK", _json.dumps({"err": float(_np.abs(y.double().numpy() - _ref).max()),
      "scale": float(_np.abs(_ref).max()), "rows": result.table.height, "best": result.best.id}))
"""


def readme_example() -> str:
    """The two Python blocks under "## Ten lines", made runnable: k=2 instead of 8, real tensors for
    ``torch_tensors``, a real filter for ``ax.results().filter(...)``; then a correctness check."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Ten lines"):]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)[:2]
    assert len(blocks) == 2 and "rmsnorm_matmul.bind(M=5, N=3, K=7)" in blocks[0], blocks
    optimize = blocks[1]
    for old, new in [("k=8", "k=2"),
                     ("y = result.best(*torch_tensors)",
                      "import torch\ntorch_tensors = [torch.from_numpy(a).to(torch.bfloat16) "
                      "for a in ax.random_inputs(small, seed=1).values()]\ny = result.best(*torch_tensors)"),
                     ("ax.results().filter(...)", "import polars as pl\nax.results().filter(pl.col(\"status\") == \"ok\")")]:
        assert old in optimize, (old, optimize)
        optimize = optimize.replace(old, new)
    return blocks[0] + optimize + CHECK


def check_output(stdout: str) -> None:
    assert stdout.count("program rmsnorm_matmul(") == 1, stdout  # the user's module ran once
    line = next(ln for ln in stdout.splitlines() if ln.startswith("AXON_README_CHECK"))
    got = json.loads(line.split(" ", 1)[1])
    assert got["rows"] >= 2 and got["best"]  # a baseline and at least one candidate were measured
    assert got["err"] <= 2e-2 * max(1.0, got["scale"]), got  # bf16 output against the float64 reference


@pytest.mark.slow  # several seconds of subprocesses or the interpreter: make test-slow (CI) runs it
def test_readme_example_as_a_plain_script(tmp_path):
    script = tmp_path / "readme_example.py"
    script.write_text(readme_example())
    assert "__main__" not in script.read_text()
    env = {**os.environ, "TRITON_INTERPRET": "1", "AXON_EG_CACHE": str(tmp_path / "cache"), "AXON_EG_FORCE_CPU": "1"}
    proc = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "bootstrapping phase" not in proc.stderr
    check_output(proc.stdout)
    assert "| selected |" in proc.stdout  # result.summary()'s table


@pytest.mark.slow
def test_readme_example_in_a_notebook(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("AXON_EG_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("AXON_EG_FORCE_CPU", "1")
    cells = readme_example().split("\nresult = ax.saturate_and_extract")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cells[0]),
                                         nbformat.v4.new_code_cell("result = ax.saturate_and_extract" + cells[1])])
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in nb.cells for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"], outputs
    check_output("".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream"))
