"""Ctrl-C during phase 1 (saturation, extraction, emission) says so in one line, from the CLI and from a plain
script calling the API, as an interrupt of phase 2 does; and a misspelled dtype in an annotation is refused
with the dtype it was probably meant to be, never taken for a dim."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import axon_eg as ax
from axon_eg.errors import DtypeError
from axon_eg.ir.dtypes import DTYPE_NAMES


def interrupt_when(cmd: list[str], marker: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run ``cmd``, send SIGINT once ``marker`` appears on its stdout, and return what it printed."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "AXON_EG_CACHE": str(tmp_path / "cache"), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    seen = []
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if marker in line:
            time.sleep(0.2)
            proc.send_signal(signal.SIGINT)
            break
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(cmd, proc.returncode, "".join(seen) + out, err)


def test_ctrl_c_in_phase_one_of_the_cli_is_one_line(tmp_path):
    got = interrupt_when([sys.executable, "-m", "axon_eg.cli", "optimize", "rmsnorm", "-k", "4", "--cpu", "--force",
                          "--out", str(tmp_path / "out")], "saturate 0/1", tmp_path)
    lines = [ln for ln in got.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, got.stderr
    assert lines[0].startswith("axon-eg: interrupted (SIGINT) during ") and "of rmsnorm" in lines[0], lines
    assert got.returncode == 130
    assert not (tmp_path / "cache" / "tables").exists() or not any((tmp_path / "cache" / "tables").rglob("*.parquet"))


SCRIPT = """
import axon_eg as ax
from axon_eg import suite

program = suite.get("rmsnorm").bound(small=True)
ax.saturate_and_extract(program, k=4, progress=lambda stage, *rest: print("STAGE", stage, flush=True))
print("NOT INTERRUPTED")
"""


def test_ctrl_c_in_phase_one_of_a_script_is_one_line(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    got = interrupt_when([sys.executable, str(script)], "STAGE saturate", tmp_path)
    lines = [ln for ln in got.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in got.stderr, got.stderr
    assert lines[0].startswith("axon-eg: interrupted (SIGINT) during ") and "of rmsnorm" in lines[0], lines
    assert "NOT INTERRUPTED" not in got.stdout
    assert got.returncode == -signal.SIGINT  # the process ends by the signal, as an uncaught Ctrl-C does


@pytest.mark.parametrize(("typo", "meant"), [("bf61", "bf16"), ("fp23", "fp32"), ("flaot32", "float32"),
                                             ("doubel", "double"), ("fp61", "fp16"), ("flaot", "float")])
def test_a_misspelled_dtype_is_refused_with_the_dtype(typo, meant):
    with pytest.raises(DtypeError, match=rf"'{typo}' is not a dtype: did you mean '{meant}'\?"):
        ax.Tensor["M", typo]


def _swap(text: str, i: int) -> str:
    return text[:i] + text[i + 1] + text[i] + text[i + 2:]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(n for n in DTYPE_NAMES if any(c.isdigit() for c in n))), st.data())
def test_a_transposed_dtype_name_is_never_a_dim(name, data):
    """Two neighbouring letters or two neighbouring digits of a dtype name swapped: the result is a dtype
    (``Tensor`` takes it) or refused as one misspelled; never a dim named like a dtype."""
    spots = [i for i in range(len(name) - 1) if name[i] != name[i + 1] and name[i].isdigit() == name[i + 1].isdigit()]
    if not spots:
        return
    typo = _swap(name, data.draw(st.sampled_from(spots)))
    try:
        spec = ax.Tensor["M", typo]
    except DtypeError as exc:
        assert "did you mean" in str(exc)
    else:
        assert typo in DTYPE_NAMES and len(spec.shape) == 1


@pytest.mark.parametrize("dim", ["M", "N16", "H2", "seq", "flat", "d_model", "batch", "heads", "x1", "K"])
def test_ordinary_dim_names_stay_dims(dim):
    assert [str(d) for d in ax.Tensor["B", dim].shape] == ["B", dim]
