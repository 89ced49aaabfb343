"""The cheap stages of the cascade in process: structure limits, out-of-bounds guards, error classification."""

from __future__ import annotations

import json
import time

import pytest
import torch
from triton.runtime.errors import OutOfResources

from axon_eg.measure import harness
from axon_eg.measure.manifest import STATUSES, check_structure, load_manifest
from axon_eg.measure.worker import run_bundle

SPECS = [{"name": "x", "shape": [4, 8], "dtype": "fp32"}, {"name": "y", "shape": [4, 8], "dtype": "fp32"}]
LIMITS = {"smem_bytes": 232448, "max_warps": 32, "max_block_elems": 1048576, "regs_per_thread": 255}


def ref(x, y):
    return x + y


def test_structure_check_names_each_resource_value_and_limit():
    assert check_structure({"limits": LIMITS, "resources": {"smem_bytes": 232448, "max_warps": 32}}) is None
    assert check_structure({"resources": {"smem_bytes": 10**9}}) is None  # no limits known: nothing to check
    assert check_structure({"limits": LIMITS}) is None
    msg = check_structure({"limits": LIMITS, "resources": {"smem_bytes": 262144, "max_warps": 64,
                                                           "max_block_elems": 2097152, "regs_per_thread": 255,
                                                           "launch": {"smem_bytes": "_k0", "max_warps": "_k1"}}})
    assert msg == ("shared memory 262144 B > limit 232448 B (launch _k0); warps per block 64 > limit 32 (launch _k1); "
                   "block elements 2097152 > limit 1048576")
    assert check_structure({"limits": {"tmem_cols": 512}, "resources": {"tmem_cols": 1024.5}}) == "tmem_cols 1024.5 > limit 512"
    assert check_structure({"limits": LIMITS, "resources": {"smem_bytes": "lots", "max_warps": True}}) is None
    assert "structure_error" in STATUSES


def test_structure_errors_never_start_a_child_and_candidates_inherit_limits(tmp_path):
    (tmp_path / "big.py").write_text("def kernel(x, y, out):\n    out.copy_(x + y)\n")
    (tmp_path / "ref.py").write_text("def ref(x, y):\n    return x + y\n")
    cand = {"id": "big", "source": "big.py", "inputs": SPECS, "reference": "ref.py:ref", "kind": "candidate",
            "resources": {"regs_per_thread": 256, "launch": "_fused_softmax"}}
    (tmp_path / "manifest.json").write_text(json.dumps({"limits": LIMITS, "program": "p", "candidates": [cand]}))
    (loaded,) = load_manifest(tmp_path)
    assert loaded["limits"] == LIMITS and loaded["program"] == "p"
    t = time.monotonic()
    (row,) = run_bundle(tmp_path, tmp_path / "o.jsonl", gpus=[])
    assert time.monotonic() - t < 1.0
    assert (row["status"], row["stage"], row["kind"], row["program"]) == ("structure_error", "structure", "candidate", "p")
    assert row["error"] == "registers per thread 256 > limit 255 (launch _fused_softmax)"


def _stray(offset_from_end: int, count: int, value: float = 1.0):
    def kernel(x, y, out):
        out.copy_(x + y)
        start = out.storage_offset() + out.numel() + offset_from_end
        torch.as_strided(out, (count,), (1,), start).fill_(value)

    return kernel


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_guard_regions_catch_out_of_bounds_writes(dtype):
    specs = [{**s, "dtype": dtype} for s in SPECS]
    n = 32
    after = harness.check_correctness(_stray(0, 3), specs, ref)
    assert after.status == "wrong_result" and "out-of-bounds write: 3 elements after output 0" in after.error
    before = harness.check_correctness(_stray(-n - 5, 5), specs, ref)
    assert "out-of-bounds write: 5 elements before output 0" in before.error
    far = harness.check_correctness(_stray(harness.GUARD_ELEMS - 1, 1), specs, ref)  # last guard element
    assert "1 elements after" in far.error
    nan = harness.check_correctness(_stray(0, 2, float("nan")), specs, ref)  # compared bitwise, not as floats
    assert "2 elements after" in nan.error

    def shape_and_layout(x, y, out):
        assert out.is_contiguous() and out.shape == (4, 8) and out.data_ptr() % 16 == 0
        out.copy_(x + y)

    assert harness.check_correctness(shape_and_layout, specs, ref).status == "ok"


def test_out_of_resources_is_a_structure_error():
    def too_much_smem(x, y, out):
        raise OutOfResources(262144, 232448, "shared memory")

    res = harness.check_correctness(too_much_smem, SPECS, ref)
    assert (res.status, res.stage) == ("structure_error", "structure") and "OutOfResources" in res.error
    assert harness.classify(ValueError()) == ("runtime_error", "run")
    assert harness.classify(SyntaxError()) == ("compile_error", "compile")


def test_step_functions_may_be_off_at_isolated_elements_only():
    """A program with a step function of computed values (round, comparisons, ...) may differ from its float64
    reference by a step at up to STEP_FRACTION of an output's elements (its operand computed in fp32 lands on the
    other side); more than that, or a program without steps, still fails."""
    import torch

    from axon_eg.bundle import has_steps
    from axon_eg.ir.builder import Builder
    from axon_eg.measure import harness

    ref = torch.linspace(-1.0, 1.0, 1 << 18, dtype=torch.float64)
    got = ref.clone().float()
    got[::1 << 16] += 0.01  # 4 isolated steps
    assert harness.compare(got, ref, 1e-4)[0] == "over"
    allowed = max(1, int(ref.numel() * harness.STEP_FRACTION))
    assert harness.compare(got, ref, 1e-4, allowed)[0] == "ok"
    got[::1 << 10] += 0.01  # 256: a bug, not rounding
    assert harness.compare(got, ref, 1e-4, allowed)[0] == "over"
    flags = torch.zeros(1 << 18, dtype=torch.bool)
    flags[7] = True
    assert harness.compare(flags, torch.zeros(1 << 18, dtype=torch.float64), 0.0, allowed)[0] == "ok"
    assert harness.compare(flags, torch.zeros(1 << 18, dtype=torch.float64), 0.0)[0] == "over"

    b = Builder("steps")
    x = b.input("x", (4, 5), "fp32")
    scaled = b.emit("mul", x, b.constant(3.0, "fp32"))
    assert has_steps(b.build(b.emit("round", scaled)))
    assert has_steps(b.build(b.emit("gt", scaled, b.constant(0.0, "fp32"))))
    assert not has_steps(b.build(b.emit("gt", b.emit("transpose", x, perm=(1, 0)), b.constant(0.0, "fp32"))))
    assert not has_steps(b.build(b.emit("tanh", scaled)))
