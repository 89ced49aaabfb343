"""The split-K GEMV (``x @ sum(W, -1)`` with the row sum of W fused in, ``backends/triton/gemv_splitk.py``)
runs under TRITON_INTERPRET=1 and matches the float64 reference: the suite's sum_matmul after the νGraph's
rewrite, sum and mean, bf16 and fp32, sizes that are not multiples of the tiles (hypothesis); the candidate
ranking puts it first for sum_matmul at the H200 size; groups of another shape are not taken."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

from benchmarks import suite  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from axon_eg.backends.triton import gemv_splitk  # noqa: E402
from axon_eg.backends.triton.backend import TRITON  # noqa: E402
from axon_eg.backends.triton.emit import emit  # noqa: E402
from axon_eg.extract.fusion import plans  # noqa: E402
from axon_eg.extract.tiling import reduced_operand, space, tilings  # noqa: E402
from axon_eg.hw import load  # noqa: E402
from axon_eg.ir.builder import Builder  # noqa: E402
from axon_eg.ir.dtypes import bf16, fp32  # noqa: E402
from axon_eg.ir.program import Program  # noqa: E402
from axon_eg.testing.kernels import candidate_for, run_kernel  # noqa: E402

H200 = load("h200")


def rewritten(m: int, k: int, n: int, op: str = "sum", dtype=bf16, keep_col: bool = False) -> Program:
    """``x @ op(W, -1, keepdims)`` (what sum1_into_matmul_B / mean1_into_matmul_B make of ``op(x @ W, -1)``)."""
    bl = Builder(f"x_at_{op}_w")
    x, w = bl.input("x", (m, k), dtype), bl.input("w", (k, n), dtype)
    y = bl.emit("matmul", x, bl.emit(op, w, axes=(1,), keepdims=True))
    return bl.build(y if keep_col else bl.emit("squeeze", y, axes=(1,)))


def check(program: Program, tmp_path, **tiles):
    kernel = emit(candidate_for(program, H200, -1, tiles or None), H200, "k")
    assert kernel.meta["lowering"] == "triton:1" and "split-K GEMV" in kernel.source, kernel.source[:600]
    out = run_kernel(kernel, program.expand(), tmp_path)
    assert out.status == "ok", f"{out.error}\n{kernel.source}"
    return kernel


@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 70), k=st.integers(1, 70), n=st.integers(1, 70), op=st.sampled_from(["sum", "mean"]),
       dtype=st.sampled_from([bf16, fp32]), split=st.sampled_from([16, 32]), block=st.sampled_from([16, 32, 64]),
       keep_col=st.booleans())
def test_split_k_gemv_matches_the_reference(m, k, n, op, dtype, split, block, keep_col, tmp_path_factory):
    program = rewritten(m, k, n, op, dtype, keep_col)
    check(program, tmp_path_factory.mktemp("k"), SPLIT_K=split, BLOCK_R=block, num_warps=2)


def test_suite_sum_matmul_after_the_rewrite_is_one_split_k_group(tmp_path):
    """Among the candidates the selection measures at the H200 size (next to the row-sum + GEMV plan), and
    correct at CI sizes."""
    from axon_eg.backends.triton.emit import runs_as_torch
    from axon_eg.extract.candidates import enumerate_candidates
    from axon_eg.saturation import saturated

    for small in (False, True):
        program = suite.get("sum_matmul").bound(small=small)
        found, _ = enumerate_candidates(saturated(program, 2.0), H200, 6, backend=TRITON, fallback=runs_as_torch)
        fused = [c for c in found if c.plan.name == "matmul" and "SPLIT_K" in dict(c.tilings[0].values)]
        assert fused and any(c.plan.name == "reduction+matmul" for c in found)
        kernel = emit(fused[0], H200, "c0")
        if not small:
            assert f"_partial[({4096 // dict(fused[0].tilings[0].values)['SPLIT_K']},)]" in kernel.source
            continue
        out = run_kernel(kernel, program.expand(), tmp_path)
        assert out.status == "ok", out.error


def test_intel_xpu_knobs_reach_both_launches(tmp_path):
    xe2 = load("intel-xe2")
    program = rewritten(40, 37, 50)
    kernel = emit(candidate_for(program, xe2, -1, {"SPLIT_K": 16, "BLOCK_R": 32, "num_warps": 2}), xe2, "k")
    assert "_g0_" in kernel.source and "grf_mode=" in kernel.source.split("def kernel")[1]
    assert kernel.source.count("**launch)\n") == 2  # both launches pass the knobs on
    out = run_kernel(kernel, program.expand(), tmp_path)  # the interpreter ignores the knobs
    assert out.status == "ok", out.error


def test_tiling_space_is_a_k_slice_and_a_streamed_width():
    program = rewritten(4096, 4096, 4096).expand()
    plan = plans(program)[-1]
    assert reduced_operand(plan, 0)
    options, stats = tilings(space(plan, 0, H200, TRITON.templates))
    assert options and all({"SPLIT_K", "BLOCK_R", "num_warps"} == set(dict(t.values)) for t in options)
    assert all(dict(t.values)["SPLIT_K"] * dict(t.values)["BLOCK_R"] <= 32768 for t in options)


def test_other_gemvs_are_not_taken():
    """The reduction over W's first axis, or a GEMV whose vector is an input, keeps the general lowering."""
    bl = Builder("colsum")
    x, w = bl.input("x", (8, 6), bf16), bl.input("w", (6, 6), bf16)
    s = bl.emit("transpose", bl.emit("sum", w, axes=(0,), keepdims=True), perm=(1, 0))
    colsum = bl.build(bl.emit("matmul", x, s))
    plan = plans(colsum.expand())[-1]
    assert gemv_splitk.match(plan, len(plan.groups) - 1) is None
    bl = Builder("plain")
    plain = bl.build(bl.emit("matmul", bl.input("x", (8, 6), bf16), bl.input("v", (6, 1), bf16)))
    plan = plans(plain.expand())[-1]
    assert gemv_splitk.match(plan, 0) is None and not reduced_operand(plan, 0)
