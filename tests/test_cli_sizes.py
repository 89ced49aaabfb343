"""``axon-eg optimize`` checks the sizes of phase 2 before anything is allocated (issue 48, item 8): a
KernelBench file without ``SMALL_SIZES`` whose inputs would take 32 GiB, or a suite program at its H200 sizes
under the Triton interpreter, is one line naming the program, the sizes, the bytes needed, the memory
available and ``--allow-large``; loading a target allocates no input memory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from axon_eg import loading, validate
from axon_eg.errors import InvalidArgument
from axon_eg.testing.subprocesses import wait

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "TRITON_INTERPRET": "1", "AXON_EG_FORCE_CPU": "1", "COLUMNS": "100"}

HUGE = '''"""A KernelBench problem of 32 GiB of fp32 input, without SMALL_SIZES."""
import torch
import torch.nn as nn

batch_size, dim = 65536, 131072


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''


def start(*args: object) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "axon_eg.cli", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)


def refused(proc: subprocess.Popen, timeout: float = 90) -> str:
    """The one error line of a child that must be refused: exit status 2, no traceback."""
    code, _, err = wait(proc, timeout)
    assert code == 2 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("axon-eg: error: "), err
    return lines[0].removeprefix("axon-eg: error: ")


@pytest.mark.slow  # an end-to-end CLI run (make test's 5 minutes; CI runs it in make test-slow)
def test_sizes_over_the_memory_or_the_interpreter_are_refused_before_phase_1(tmp_path):
    huge = tmp_path / "huge.py"
    huge.write_text(HUGE)
    big = start("optimize", huge, "--cpu", "--cache", tmp_path / "cache", "--out", tmp_path / "a")
    full = start("optimize", "softmax", "--full", "--cpu", "--cache", tmp_path / "cache", "--out", tmp_path / "b")
    line = refused(big)
    assert line.startswith("huge at its own sizes (inputs x [65536, 131072] fp32): its inputs and outputs "
                           "(17,179,869,184 elements) need about 256.0 GiB with the float64 reference, over 80% of the "), line
    assert line.endswith(" GiB of memory available; use smaller sizes (--sizes NAME=INT,... over its module constants) or "
                         "pass --allow-large"), line
    line = refused(full)
    assert line.startswith("softmax at M=8192, N=8192 (inputs x [8192, 8192] bf16): its inputs and outputs (134,217,728 "
                           "elements) need about 1.8 GiB with the float64 reference ("), line
    assert line.endswith("of memory available), over the 4,194,304 elements the Triton interpreter (--cpu) checks in "
                         "reasonable time; use smaller sizes (--sizes NAME=INT,..., or drop --full) or pass --allow-large")
    assert not (tmp_path / "cache").exists() and not (tmp_path / "a").exists()  # before phase 1


def test_allow_large_goes_on_to_the_pipeline(tmp_path, monkeypatch, capsys):
    from axon_eg import cli, pipeline

    class Reached(Exception):
        pass

    def reached(*args, **kwargs):
        raise Reached

    monkeypatch.setattr(pipeline, "saturate_and_extract", reached)
    monkeypatch.setattr(validate, "INTERPRETER_ELEMS", 10)
    argv = ["optimize", "silu", "--cpu", "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "out")]
    assert cli.main(argv) == 2
    assert "silu at M=5, N=7 (inputs x [5, 7] bf16): its inputs and outputs (70 elements)" in capsys.readouterr().err
    with pytest.raises(Reached):
        cli.main([*argv, "--allow-large"])
    with pytest.raises(Reached):  # phase 2 on a Ray cluster: not this machine's memory
        cli.main([*argv, "--ray", "local"])


def test_loading_a_target_allocates_no_input_memory(tmp_path):

    huge = tmp_path / "huge.py"
    huge.write_text(HUGE)
    target = loading.resolve_target(str(huge), small=True)  # 32 GiB of fake input: loads in no time
    assert target.program.inputs[0].shape == (65536, 131072) and target.kind == "kernelbench"
    small = loading.resolve_target(str(ROOT / "benchmarks" / "problems" / "06_RMSNorm.py"), small=True)
    assert small.inputs["x"].shape == (2, 3, 16)  # made when read


def test_the_check_counts_float64_copies_and_compares_with_the_memory():
    # one fp32 input and one fp32 output of 2^20 elements: 4 + 8 and 4 + 16 bytes each
    assert validate.tensor_bytes([(1 << 20, 4)], [(1 << 20, 4)]) == (1 << 21, 32 << 20)
    validate.phase2_size("p", [(1 << 20, 4)], [(1 << 20, 4)], interpreter=None, smaller="-", memory=40 << 20)
    with pytest.raises(InvalidArgument, match=r"^p: its inputs and outputs \(2,097,152 elements\) need about 32.0 MiB "
                                              r"with the float64 reference, over 80% of the 36.0 MiB of memory available; "
                                              r"use smaller sizes \(-\) or pass --allow-large$"):
        validate.phase2_size("p", [(1 << 20, 4)], [(1 << 20, 4)], interpreter=None, smaller="-", memory=36 << 20)
    with pytest.raises(InvalidArgument, match="over the 1,000 elements the Triton interpreter"):
        validate.phase2_size("p", [(1000, 4)], [(1, 4)], interpreter="--cpu", smaller="-", memory=1 << 30, limit=1000)
    assert validate.available_memory() is None or validate.available_memory() > 0
