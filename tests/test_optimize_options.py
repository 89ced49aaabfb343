"""``ax.optimize`` and ``torch.compile(backend="axon_eg")`` as a user calls them (issue 48, items 3, 7, 9):

- a bad option (``k=0``, ``k=2.5``, ``budget_s=-1``, ``hw="nope"``, ...) is an ``InvalidArgument`` naming it, at
  ``ax.optimize``'s call, before any work, and at the compiled model's first call for torch.compile (the
  earliest the options reach a backend), as that error itself, not dynamo's ``BackendCompilerFailed``;
- a model with data-dependent control flow is refused by ``ax.optimize`` in one line naming the construct,
  the file and the line, with none of torch's logging;
- a model on the meta device gives meta tensors of the eager shapes and dtypes, and runs no kernel.
"""

from __future__ import annotations

import os
import subprocess
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import axon_eg as ax  # noqa: E402
from axon_eg import dynamo  # noqa: E402
from axon_eg.errors import InvalidArgument  # noqa: E402

OPTS = {"k": 1, "saturation_s": 0.3}


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 8)

    def forward(self, x):
        return torch.softmax(self.lin(x) * 2.0, dim=-1)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


BAD = [({"k": 0}, "option k must be an integer >= 1, got 0"),
       ({"k": -1}, "option k must be an integer >= 1, got -1"),
       ({"k": 2.5}, "option k must be an integer >= 1, got 2.5"),
       ({"k": True}, "option k must be an integer >= 1, got True"),
       ({"budget_s": -1}, "option budget_s must be a number of seconds > 0, got -1"),
       ({"saturation_s": 0}, "option saturation_s must be a number of seconds > 0, got 0"),
       ({"hw": "nope"}, "option hw 'nope' is not a known hardware file"),
       ({"hw": "trn2"}, "option hw 'trn2' describes trainium hardware; the backend runs Triton kernels"),
       ({"hw": 3}, "option hw must be a target name"),
       ({"precision": "fast"}, "option precision='fast': the fp32 matmul precision is one of ieee, strict, tf32"),
       ({"device": "tpu"}, "option device 'tpu'"),
       ({"device": 0.5}, "option device must be a device such as 'cuda' or 'cpu', got float 0.5"),
       ({"verbose": "yes"}, "option verbose must be True or False, got 'yes'"),
       ({"freeze": 1}, "option freeze must be True or False, got 1"),
       ({"cache_dir": 7}, "option cache_dir must be a directory path, got int 7"),
       ({"region_ops": 0}, "option region_ops must be an integer >= 1, got 0"),
       ({"kk": 3}, "unknown option 'kk'")]


@pytest.mark.parametrize("given, message", BAD, ids=[next(iter(g)) + "=" + repr(next(iter(g.values()))) for g, _ in BAD])
def test_a_bad_option_of_optimize_is_refused_at_the_call(given, message):
    before = len(dynamo.Compiled.made)
    with pytest.raises(InvalidArgument, match="^ax.optimize: " + message.replace("(", r"\(").replace(")", r"\)")):
        ax.optimize(Small().eval(), (torch.randn(4, 16),), **given)
    assert len(dynamo.Compiled.made) == before  # refused before anything was built


def test_a_cache_dir_that_is_a_file_and_a_cuda_device_that_is_not_here_are_refused(tmp_path):
    afile = tmp_path / "file"
    afile.write_text("")
    with pytest.raises(InvalidArgument, match=f"option cache_dir {afile}: is a file, not a directory"):
        ax.optimize(Small().eval(), (torch.randn(4, 16),), cache_dir=str(afile))
    if not torch.cuda.is_available():
        with pytest.raises(InvalidArgument, match="option device 'cuda': this machine has no CUDA device"):
            ax.optimize(Small().eval(), (torch.randn(4, 16),), device="cuda")


@pytest.mark.parametrize("given, message", [({"k": 0}, "option k must be an integer >= 1, got 0"),
                                            ({"budget_s": -1}, "option budget_s must be a number of seconds > 0"),
                                            ({"hw": "nope"}, "option hw 'nope' is not a known hardware file")])
def test_a_bad_option_of_torch_compile_is_the_invalid_argument_itself_at_the_first_call(given, message):
    fast = torch.compile(Small().eval(), backend="axon_eg", options=given)
    with torch.no_grad(), pytest.raises(InvalidArgument, match=r"^torch.compile\(backend='axon_eg'\): " + message):
        fast(torch.randn(4, 16))


SCRIPT_COMPILE = """
import torch

class Small(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x * 2.0, dim=-1)

fast = torch.compile(Small(), backend="axon_eg", options={"k": 0})
with torch.no_grad():
    fast(torch.randn(4, 8))
"""

SCRIPT_DATA_DEPENDENT = """
import torch
import axon_eg as ax

class Gate(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return torch.softmax(x, dim=-1)
        return x * 2.0

try:
    ax.optimize(Gate(), (torch.randn(4, 8),), k=1)
except ax.errors.AxonError as e:
    print(f"{type(e).__name__}: {e}")
"""


def _run(tmp_path, code):
    script = tmp_path / "user_script.py"
    script.write_text(code)
    env = {**os.environ, "TRITON_INTERPRET": "1", "AXON_EG_CACHE": str(tmp_path / "cache"), "AXON_EG_FORCE_CPU": "1"}
    return script, subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                                  timeout=300)


def test_a_bad_torch_compile_option_ends_a_script_with_its_one_line(tmp_path):
    _, proc = _run(tmp_path, SCRIPT_COMPILE)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last == "axon_eg.errors.InvalidArgument: torch.compile(backend='axon_eg'): option k must be an integer >= 1, got 0"
    assert "BackendCompilerFailed" not in proc.stderr and "TORCHDYNAMO_VERBOSE" not in proc.stderr


def test_data_dependent_control_flow_is_one_line_naming_the_construct_file_and_line(tmp_path):
    script, proc = _run(tmp_path, SCRIPT_DATA_DEPENDENT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(said) == 1, said  # none of torch's logging, warnings or graph dumps
    assert said[0].startswith("UnsupportedOperation: ax.optimize: Gate: data-dependent control flow is not supported: "
                              f"forward() at {script}:7 (`if x.sum() > 0:`)"), said


def test_a_meta_model_gives_meta_tensors_through_torch_compile_without_building(tmp_path):
    with torch.device("meta"):
        model = Small().eval()
        x = torch.empty(4, 16)
    fast = torch.compile(model, backend="axon_eg", options={**OPTS, "cache_dir": str(tmp_path)})
    before = len(dynamo.Compiled.made)
    with torch.no_grad():
        want, got = model(x), fast(x)
    assert got.is_meta and got.shape == want.shape and got.dtype == want.dtype
    made = dynamo.Compiled.made[before:]
    assert made and not any(c.versions for c in made)  # nothing was built: phase 1 and 2 did not run


def test_a_meta_model_gives_meta_tensors_through_optimize(tmp_path):
    with torch.device("meta"):
        model = Small().eval()
        x = torch.empty(4, 16)
    fast = ax.optimize(model, (x,), cache_dir=str(tmp_path), **OPTS)
    assert any(r.kernel for r in fast.report), [r.line() for r in fast.report]  # built for the shapes
    with torch.no_grad():
        got = fast(x)
        half = fast(torch.empty(2, 16, device="meta", dtype=torch.float32))
    assert got.is_meta and tuple(got.shape) == (4, 8) and got.dtype == torch.float32
    assert half.is_meta and tuple(half.shape) == (2, 8)
