"""``benchmarks/models.py`` end to end on the CPU (small config, the worker and the timing in their CPU forms):
build (phase 1, bundles), measure (rows), build (select, save ModelNew), measure (each variant against
float64), report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "models.py"


def _run(*args: str, path: Path | None = None) -> str:
    env = {**os.environ, "TRITON_INTERPRET": "1", **({"PYTHONPATH": str(path)} if path else {})}
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_the_model_runner_builds_measures_saves_and_reports(tmp_path):
    name = "resnet_basic_stage"
    out = tmp_path / "run"
    first = _run("build", str(out), name, "--config", "small", "--k", "2")
    assert "waiting for rows" in first
    built = json.loads((out / "models" / name / "build.json").read_text())
    assert built["regions"] and all(r["waiting"] for r in built["regions"] if r["bundle"]) and not built["saved"]
    assert built["flops"] > 0 and built["bytes"] > 0 and built["phase1_s"] > 0
    _run("measure", str(out), name, "--cpu")
    hidden = tmp_path / "gpu_box"  # the second build runs where egglog and z3 are not installed
    for package in ("egglog", "z3"):
        (hidden / package).mkdir(parents=True)
        (hidden / package / "__init__.py").write_text(f"raise ImportError('{package} is not installed here')\n")
    _run("build", str(out), name, "--config", "small", "--k", "2", path=hidden)
    built = json.loads((out / "models" / name / "build.json").read_text())
    assert not any(w in (r["why_torch"] or "") for r in built["regions"] for w in ("egglog", "z3", "Import")), built
    assert built["saved"] and (out / "models" / name / "model_new.py").is_file()
    _run("measure", str(out), name, "--cpu")
    timings = json.loads((out / "models" / name / "timings.json").read_text())
    rows = {r["variant"]: r for r in timings["rows"]}
    assert set(rows) == {"eager", "compile", "axon_eg"} and all(r["correct"] for r in rows.values()), rows
    report = _run("report", str(out), "--write", str(tmp_path / "models.md"))
    line = next(ln for ln in report.splitlines() if ln.startswith(f"| {name} |"))
    assert "!" not in line.split("|")[12] and (tmp_path / "models.md").read_text().strip() == report.strip()
