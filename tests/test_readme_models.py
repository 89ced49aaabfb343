"""The README's model examples (``torch.compile(backend="axon_eg")``, ``ax.optimize``, ``ax.from_torch`` with
``result.best``) copied into plain scripts and run as a user on a machine without a GPU runs them: a fresh
process, ``TRITON_INTERPRET`` not set, and ``triton`` imported before axon_eg builds anything (loading a PyTorch
model often imports it). Each script checks its output against the model's own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

MODEL = """
import triton  # imported before axon_eg sets up the interpreter, as a user's other imports may do
import torch
import torch.nn as nn
import axon_eg
import axon_eg as ax


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(12, 20)
        self.norm = nn.LayerNorm(20)

    def forward(self, x):
        return torch.sigmoid(self.norm(self.proj(x))) * 1.5


torch.manual_seed(0)
model = Block().eval()
x = torch.randn(3, 12) + 0.25
"""

CHECK = """
with torch.no_grad():
    want = model(x)
assert y.shape == want.shape, (y.shape, want.shape)
print("AXON_README_MODEL_ERR", float((y - want).abs().max()))
"""


def readme_block(marker: str) -> str:
    """The README's Python block that contains ``marker``."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    found = [b for b in blocks if marker in b]
    assert len(found) == 1, (marker, len(found))
    return found[0]


def run_script(tmp_path: Path, code: str) -> subprocess.CompletedProcess:
    script = tmp_path / "user_script.py"
    script.write_text(code)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(AXON_EG_CACHE=str(tmp_path / "cache"), AXON_EG_FORCE_CPU="1")
    return subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=400)


def small(block: str) -> str:
    """The block at a test's budget: k=1 instead of the README's k=4."""
    return block.replace('"k": 4', '"k": 1').replace("k=4", "k=1")


def compile_script() -> str:
    return MODEL + small(readme_block('backend="axon_eg"')) + CHECK


def optimize_script() -> str:
    return MODEL + small(readme_block("ax.optimize(model, (x,), hw=")) + CHECK


def from_torch_script() -> str:
    program = readme_block("ax.from_torch(module, example_inputs)").splitlines()[0]
    best = next(ln for ln in readme_block("result.best(*torch_tensors)").splitlines() if "result.best(" in ln)
    return MODEL + "\n".join([
        "module, example_inputs = model, (x,)",
        program,
        'result = ax.saturate_and_extract(program, target="triton", hw="h200", k=1)',
        "state = {**dict(model.named_parameters()), **dict(model.named_buffers())}",
        "torch_tensors = [x if s.role == 'input' else state[s.name] for s in program.inputs]",
        "with torch.no_grad():",
        "    " + best.strip(),
        "y = y[0] if isinstance(y, (tuple, list)) else y",
    ]) + "\n" + CHECK


@pytest.mark.slow  # several seconds of subprocesses or the interpreter: make test-slow (CI) runs it
def test_readme_model_blocks_run_on_a_cpu_machine(tmp_path):
    """The three blocks, each in its own fresh process would cost three imports of torch; one script runs them
    in turn (each block's check prints its own line), with ``triton`` imported before any of them."""
    blocks = [compile_script(), optimize_script(), from_torch_script()]
    code = MODEL + "".join(b.replace(MODEL, "", 1) for b in blocks)
    proc = run_script(tmp_path, code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Cannot call @triton.jit'd" not in proc.stderr
    errs = [float(ln.split()[1]) for ln in proc.stdout.splitlines() if ln.startswith("AXON_README_MODEL_ERR")]
    assert len(errs) == 3 and max(errs) <= 1e-4, proc.stdout[-2000:]
