"""Device retargeting (issue 52): an input written for Intel GPUs (``xpu`` device strings and checks, ``grf_mode``
in its ``triton.Config``s, Intel-only launch keywords, the IPEX import) runs on the device at hand; a CUDA file
taken to XPU and back is the file it was; every change is recorded with its line."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from axon_eg.triton_in.retarget import retarget, vendor_of

CUDA_PIECES = {
    "check": 'DEVICE = "cuda" if torch.cuda.is_available() else "cpu"\n',
    "index": 'DEV = torch.device("cuda:{i}")\n',
    "sync": "def wait():\n    torch.cuda.synchronize()\n",
    "method": "def move(t):\n    return t.cuda()\n",
    "alloc": 'def alloc(n):\n    return torch.empty(n, device="cuda")\n',
    "stream": "def side():\n    return torch.cuda.Stream()\n",
    "launch": "def run(x, out):\n    {kernel}[(1,)](x, out, BLOCK=64, num_warps=4)\n",
}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(sorted(CUDA_PIECES)), min_size=1, max_size=7, unique=True), st.integers(0, 7),
       st.from_regex(r"[a-z][a-z_]{0,8}_kernel", fullmatch=True))
def test_a_cuda_file_taken_to_xpu_and_back_is_the_file_it_was(pieces, index, kernel):
    text = "import torch\n\n" + "\n".join(CUDA_PIECES[p].format(i=index, kernel=kernel) for p in pieces)
    if pieces == ["launch"]:  # no device named: nothing to move
        assert vendor_of(text) is None and retarget(text, "intel").text == text
        return
    assert vendor_of(text) == "nvidia"
    xpu = retarget(text, "intel")
    assert xpu.source == "nvidia" and vendor_of(xpu.text) == "intel"
    assert "cuda" not in xpu.text and xpu.changes
    back = retarget(xpu.text, "nvidia")
    assert back.text == text
    assert len(back.changes) == len(xpu.changes)


INTEL = '''import torch
import triton
import triton.language as tl
import intel_extension_for_pytorch as ipex

DEVICE = "xpu" if torch.xpu.is_available() else "cpu"


@triton.autotune(configs=[triton.Config({"BLOCK": 64, "grf_mode": "large"}, num_warps=8),
                          triton.Config({"grf_mode": "large", "BLOCK": 128}, num_warps=16, grf_mode="256")],
                 key=["n"])
@triton.jit
def double_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n) * 2, mask=offs < n)


def run(x):
    x = x.to("xpu")
    out = torch.empty_like(x, device="xpu")
    double_kernel[(4,)](x, out, x.numel(), warp_size=32, threads_per_warp=32)
    torch.xpu.synchronize()
    return out.xpu()
'''


@pytest.mark.parametrize("device", [None, "cpu"])
def test_an_intel_file_runs_elsewhere_with_each_change_recorded(device):
    moved = retarget(INTEL, "nvidia", device)
    text, dev = moved.text, device or "cuda"
    assert moved.source == "intel" and moved.device == dev
    assert "xpu" not in text and "grf_mode" not in text and "warp_size" not in text and "intel_extension" not in text
    assert f'DEVICE = "{dev}" if torch.{dev}.is_available() else "cpu"' in text
    assert 'triton.Config({"BLOCK": 64}, num_warps=8)' in text
    assert 'triton.Config({"BLOCK": 128}, num_warps=16)' in text
    assert "double_kernel[(4,)](x, out, x.numel())" in text and f"return out.{dev}()" in text
    compile(text, "retargeted", "exec")
    lines = {int(c.split(":")[0].removeprefix("line ")) for c in moved.changes}
    vendor_lines = {k for k, line in enumerate(INTEL.splitlines(), 1)
                    if any(w in line for w in ("xpu", "grf_mode", "warp_size", "intel_extension"))}
    assert lines == vendor_lines, moved.changes
    assert sum("grf_mode" in c for c in moved.changes) == 3
    assert retarget(text, "nvidia", device).changes == []  # already there


def test_a_file_that_names_no_device_is_left_alone():
    text = "import torch\n\ndef f(x):\n    return torch.empty_like(x, device=x.device)\n"
    assert vendor_of(text) is None
    moved = retarget(text, "intel")
    assert moved.text == text and moved.changes == []


@pytest.mark.parametrize("device", [None, "cpu"])
def test_events_and_streams_a_module_makes_for_its_own_timing_still_build(device):
    """``torch.xpu.Event(enable_timing=True)`` and ``torch.xpu.Stream(priority=-1)``: on a GPU the vendor's
    classes take the same arguments; the CPU's (the interpreter's device) take none, so they are dropped there,
    each drop recorded, and the objects build and record."""
    import torch

    text = ("import torch\nstart = torch.xpu.Event(enable_timing=True)\nside = torch.xpu.Stream(priority=-1)\n"
            "start.record()\n")
    moved = retarget(text, "nvidia", device)
    if device == "cpu":
        assert "torch.cpu.Event()" in moved.text and "torch.cpu.Stream()" in moved.text
        assert sum("arguments dropped" in c for c in moved.changes) == 2
        exec(compile(moved.text, "retargeted", "exec"), {"torch": torch})
    else:
        assert "torch.cuda.Event(enable_timing=True)" in moved.text and "torch.cuda.Stream(priority=-1)" in moved.text
