"""The GEMM family's ISA choices against the float64 reference under TRITON_INTERPRET=1: the library GEMM
(``blas``: torch.mm / addmm / _addmm_activation / baddbmm / matmul with Triton kernels for the rest of the
epilogue), the persistent TMA kernel (``tl.dot+tma+persistent``), TMA loads and pointer loads, on random
``Linear -> epilogue`` programs (shapes including 1 and odd sizes, batched and transposed operands, bf16 /
fp16 / fp32) in every fusion plan the enumerator ranks, including the plans split around the library
call; and the library choice exists for every matmul group of the suite."""

from __future__ import annotations

import dataclasses
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from benchmarks import suite  # noqa: E402
from hypothesis import HealthCheck, assume, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from axon_eg.backends.triton import blas, sdpa  # noqa: E402
from axon_eg.backends.triton.backend import TRITON  # noqa: E402
from axon_eg.backends.triton.emit import emit  # noqa: E402
from axon_eg.backends.triton.isa import BLAS, BLAS_PADK, DOT, DOT_PERSISTENT, DOT_TMA, SDPA, TF32X3  # noqa: E402
from axon_eg.egraph.nugraph import Variant  # noqa: E402
from axon_eg.extract.candidates import Candidate, isa_choices  # noqa: E402
from axon_eg.extract.fusion import MATMUL, plans  # noqa: E402
from axon_eg.extract.tiling import Tiling, space, tilings  # noqa: E402
from axon_eg.hw import load  # noqa: E402
from axon_eg.ir.builder import Builder  # noqa: E402
from axon_eg.ir.dtypes import bf16, fp16, fp32  # noqa: E402
from axon_eg.ir.program import Program  # noqa: E402
from axon_eg.testing.kernels import run_kernel  # noqa: E402

H200 = load("h200")
SMALL = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "num_warps": 2, "num_stages": 2}
EPILOGUES = ("none", "bias", "scale", "bias_scale", "scale_bias", "bias_relu", "bias_gelu", "residual",
             "y_plus_sigmoid_y", "bias_silu")


def linear(m: int, k: int, n: int, batch: tuple[int, ...], dtype, epilogue: str, transposed: bool) -> Program:
    """``epilogue(x @ W)``: x [*batch, m, k], W [k, n] (or stored [n, k] and transposed, as nn.Linear)."""
    b = Builder(f"linear_{epilogue}")
    x = b.input("x", (*batch, m, k), dtype)
    w = b.input("w", (n, k) if transposed else (k, n), dtype)
    y = b.emit("matmul", x, b.emit("transpose", w, perm=(1, 0)) if transposed else w)
    for step in epilogue.split("_") if epilogue not in ("none", "y_plus_sigmoid_y") else [epilogue]:
        if step == "bias":
            y = b.emit("add", y, b.input("bias", (n,), dtype))
        elif step == "scale":
            y = b.emit("mul", y, b.constant(0.75, dtype))
        elif step == "residual":
            y = b.emit("add", y, b.input("r", (*batch, m, n), dtype))
        elif step == "y_plus_sigmoid_y":
            y = b.emit("add", y, b.emit("sigmoid", y))
        elif step == "gelu":
            y = b.emit("gelu", y, approximate="tanh")
        elif step in ("relu", "silu"):
            y = b.emit(step, y)
    return b.build([y])


def candidates(program: Program) -> list[Candidate]:
    """One candidate per (plan, ISA choice) the enumerator would consider, small tiles on matmul groups."""
    program = program.expand()
    base = plans(program)
    out = []
    for plan in base + [d for p in base for d in TRITON.derived_plans(p)]:
        chosen = []
        for gi, g in enumerate(plan.groups):
            options, _ = tilings(space(plan, gi, H200, TRITON.templates))
            t = options[0] if options else Tiling(gi, ())
            chosen.append(Tiling(gi, tuple({**dict(t.values), **SMALL}.items())) if g.kind == MATMUL else t)
        for isa in isa_choices(plan, H200, TRITON):
            report = TRITON.cost(plan, chosen, H200, isa=isa)
            out.append(Candidate(Variant(program, 0, 0, 0), plan, tuple(chosen), isa, report.seconds, report))
    return out


@settings(max_examples=int(os.environ.get("AXON_EG_GEMM_EXAMPLES", "12")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(m=st.sampled_from((1, 3, 16, 17)), k=st.sampled_from((1, 5, 16, 24)), n=st.sampled_from((1, 7, 16, 33)),
       batch=st.sampled_from(((), (2,))), dtype=st.sampled_from((bf16, fp16, fp32)),
       epilogue=st.sampled_from(EPILOGUES), transposed=st.booleans(), data=st.data())
def test_every_gemm_choice_matches_float64(m, k, n, batch, dtype, epilogue, transposed, data, tmp_path):
    program = linear(m, k, n, batch, dtype, epilogue, transposed)
    found = candidates(program)
    library = [c for c in found if BLAS in dict(c.isa).values()]
    assert library, "the library GEMM is a choice of every such program"
    chosen = library[:1] + data.draw(st.lists(st.sampled_from(found), min_size=1, max_size=2, unique=True))
    for i, c in enumerate(chosen):
        kernel = emit(c, H200, f"k{i}")
        out = run_kernel(kernel, program.expand(), tmp_path)
        assert out.status == "ok", f"{c.isa} {c.plan.name}: {out.error}\n{kernel.source}"


@pytest.mark.parametrize("epilogue,call", [("none", "torch.mm("), ("bias", "torch.addmm("),
                                           ("scale_bias", "torch.addmm("), ("bias_relu", "torch._addmm_activation("),
                                           ("bias_gelu", "torch._addmm_activation(")])
def test_the_library_call_fuses_what_cublaslt_can(epilogue, call, tmp_path):
    """Bias, scale and ReLU / tanh-GELU go into the library call itself: one kernel, no epilogue pass."""
    program = linear(17, 24, 33, (), fp32, epilogue, True).expand()
    plan = plans(program)[-1]
    assert plan.groups[0].kind == MATMUL and blas.core(plan, 0) is not None
    c = next(c for c in candidates(program) if c.plan == plan and dict(c.isa).get(0) == BLAS)
    kernel = emit(c, H200, "k")
    assert call in kernel.source and kernel.meta["lowering"] == "blas:1", kernel.source
    assert "# fp32 matmul precision: ieee" in kernel.source and "_fp32_matmul(False)" in kernel.source
    assert run_kernel(kernel, program, tmp_path).status == "ok"


def test_the_split_plan_runs_the_rest_of_the_epilogue_as_our_kernel(tmp_path):
    """y + sigmoid(y) reads the product twice: the library writes y, one Triton kernel does the rest."""
    program = linear(17, 24, 33, (2,), bf16, "y_plus_sigmoid_y", True).expand()
    split = TRITON.derived_plans(plans(program)[-1])
    assert split and [g.kind for g in split[0].groups] == ["matmul", "elementwise"]
    c = next(c for c in candidates(program) if c.plan == split[0] and dict(c.isa).get(0) == BLAS)
    kernel = emit(c, H200, "k")
    assert kernel.meta["lowering"] == "triton:1 blas:1" and "torch.matmul(" not in kernel.source
    assert run_kernel(kernel, program, tmp_path).status == "ok"


@settings(max_examples=int(os.environ.get("AXON_EG_GEMM_EXAMPLES", "12")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(m=st.sampled_from((1, 3, 17)), k=st.sampled_from((1, 3, 8, 9, 33)), n=st.sampled_from((1, 7, 16)),
       batch=st.sampled_from(((), (2,))), dtype=st.sampled_from((bf16, fp16, fp32)),
       epilogue=st.sampled_from(("none", "bias", "bias_relu", "residual", "bias_silu")), transposed=st.booleans())
def test_the_k_padded_library_gemm_is_offered_exactly_off_alignment_and_matches_float64(
        m, k, n, batch, dtype, epilogue, transposed, tmp_path):
    """``blas+padk``: where a row of K elements is not a multiple of 16 bytes, the library call runs on
    copies with K contiguous and zero-padded to the alignment; it is offered only there."""
    program = linear(m, k, n, batch, dtype, epilogue, transposed)
    padded = [c for c in candidates(program) if BLAS_PADK in dict(c.isa).values()]
    assert bool(padded) == ((k * dtype.itemsize) % 16 != 0)
    for i, c in enumerate(padded[:2]):
        kernel = emit(c, H200, f"k{i}")
        kp = -(-k // (16 // dtype.itemsize)) * (16 // dtype.itemsize)
        assert f"K {k} -> {kp}" in kernel.source and f"K zero-padded to {kp}" in kernel.source, kernel.source
        out = run_kernel(kernel, program.expand(), tmp_path)
        assert out.status == "ok", f"{c.isa} {c.plan.name}: {out.error}\n{kernel.source}"


def test_the_cost_model_prices_the_library_off_alignment_at_its_measured_rate():
    """A K of 2049 bf16 elements: the plain library call at the measured off-alignment rate, the padded one
    at the aligned rate plus its copies (so it ranks first); an aligned K prices both the same way."""
    def price(k: int) -> dict[str, float]:
        program = linear(3001, k, 5000, (), bf16, "none", True).expand()
        full = Tiling(0, tuple({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8,
                                 "num_stages": 3}.items()))  # a full tensor-core tile (SMALL's 16 rows pay)
        return {dict(c.isa)[0]: TRITON.cost(c.plan, [full], H200, isa=c.isa).seconds for c in candidates(program)
                if len(c.plan.groups) == 1 and dict(c.isa).get(0) in (BLAS, BLAS_PADK, DOT)}

    off, on = price(2049), price(2048)
    assert off[BLAS_PADK] < off[BLAS] / 3 and BLAS_PADK not in on
    assert on[BLAS] < off[BLAS] / 3
    # our pointer-load kernel reading both operands' misaligned rows in place (measured 20.6 TFLOP/s)
    assert off[DOT] > 8 * off[BLAS_PADK] and on[DOT] < 1.5 * on[BLAS]


def test_misaligned_operands_are_counted_through_views_and_not_when_computed_inside():
    from axon_eg.backends.triton.cost import misaligned_operands

    for k, transposed, want in ((2049, True, 2), (2049, False, 1), (2048, True, 0), (8, False, 0)):
        program = linear(33, k, 40, (), bf16, "bias", transposed).expand()
        plan = plans(program)[-1]
        gi = next(i for i, g in enumerate(plan.groups) if g.kind == MATMUL)
        assert misaligned_operands(plan, gi, H200) == want, (k, transposed)
    # the right operand of [K, N] = [2049, 40]: its rows (40 x 2 B) are aligned, the left's are not


def test_persistent_kernel_loops_over_its_tiles(tmp_path):
    program = linear(40, 48, 64, (), bf16, "bias_silu", False).expand()
    c = next(c for c in candidates(program) if dict(c.isa).get(0) == DOT_PERSISTENT and len(c.plan.groups) == 1)
    kernel = emit(c, H200, "k")
    assert "tl.num_programs(0)" in kernel.source and "tl.make_tensor_descriptor" in kernel.source, kernel.source
    assert run_kernel(kernel, program, tmp_path).status == "ok"


def test_tf32_is_a_choice_only_under_the_tf32_policy():
    program = linear(16, 16, 16, (), fp32, "bias", True).expand()
    plan = plans(program)[-1]
    strict = {dict(c)[0] for c in isa_choices(plan, H200, TRITON, "strict")}
    ieee = {dict(c)[0] for c in isa_choices(plan, H200, TRITON)}
    tf32 = {dict(c)[0] for c in isa_choices(plan, H200, TRITON, "tf32")}
    dots = {DOT, DOT_TMA, DOT_PERSISTENT}
    assert strict == dots | {BLAS} and tf32 == {o + "/tf32" for o in strict}
    assert ieee == strict | {o + TF32X3 for o in dots}  # fp32 accuracy: the 3xTF32 split, not the library's
    c = next(c for c in candidates(program) if dict(c.isa).get(0) == BLAS)
    c = dataclasses.replace(c, isa=((0, BLAS + "/tf32"),), precision="tf32")
    assert "_fp32_matmul(True)" in emit(c, H200, "k").source


@settings(max_examples=10, deadline=None)
@example(m=1, k=1, n=16, transposed=False, epilogue="bias", isa=DOT)  # K = 1: no copy
@given(m=st.integers(1, 40), k=st.integers(1, 70), n=st.integers(1, 40), transposed=st.booleans(),
       epilogue=st.sampled_from(["bias", "bias_silu", "none"]), isa=st.sampled_from([DOT, DOT_TMA]))
def test_the_3xtf32_split_is_emitted_and_matches_float64(m, k, n, transposed, epilogue, isa):
    """An fp32 matmul at the ``/3xtf32`` choice passes ``input_precision="tf32x3"`` to every tl.dot and equals
    the float64 reference (random sizes with 1 and odd ones; the interpreter on the CPU)."""
    import tempfile
    from pathlib import Path

    program = linear(m, k, n, (), fp32, epilogue, transposed).expand()
    found = [c for c in candidates(program) if dict(c.isa).get(0) == isa + TF32X3]
    assume(found)
    kernel = emit(found[0], H200, "k")
    assume("tl.dot(" in kernel.source)  # tiny shapes may run as torch code (the backend's fallback)
    assert 'input_precision="tf32x3"' in kernel.source and 'input_precision="ieee"' not in kernel.source
    assert "3xTF32 split" in kernel.source  # the header names the policy
    # a K x N right operand is read from a transposed copy (K or N of 1: either order is the same memory)
    assert ("_bt[" in kernel.source) is (not transposed and k > 1 and n > 1)
    with tempfile.TemporaryDirectory() as tmp:
        assert run_kernel(kernel, program, Path(tmp)).status == "ok"


def test_a_right_operand_with_n_contiguous_is_copied_transposed_for_3xtf32(tmp_path):
    """3xTF32 reads the right operand with K contiguous: an nn.Linear weight as stored, a K x N operand from a
    transposed copy made first (charged to the cost model, run by the kernel's host function)."""
    from axon_eg.backends.triton.cost import right_copy_seconds, right_k_major

    for transposed in (True, False):
        program = linear(64, 48, 32, (), fp32, "bias", transposed).expand()
        plan = plans(program)[-1]
        gi = next(i for i, g in enumerate(plan.groups) if g.kind == MATMUL)
        assert right_k_major(plan, gi) is transposed
        assert (right_copy_seconds(plan, gi, H200, DOT + TF32X3) > 0) is not transposed
        assert right_copy_seconds(plan, gi, H200, DOT) == 0
        c = next(c for c in candidates(program) if dict(c.isa).get(gi) == DOT_TMA + TF32X3
                 and plan.name == c.plan.name)
        kernel = emit(c, H200, "k")
        assert ("_bt[" in kernel.source) is not transposed, kernel.source
        assert run_kernel(kernel, program, tmp_path).status == "ok"


@pytest.mark.parametrize("name", [e.name for e in suite.SUITE])
def test_the_library_gemm_is_a_choice_for_every_matmul_group_of_the_suite(name):
    """In every suite program, each matmul group of the registry's plans has a library-GEMM alternative:
    the group itself is a library call, or the derived plan splits it around one."""
    program = suite.get(name).bound(small=True).expand()
    for plan in plans(program):
        derived = TRITON.derived_plans(plan)
        for gi, g in enumerate(plan.groups):
            if g.kind != MATMUL:
                continue
            if BLAS in (TRITON.isa_options(plan, gi, H200) or []):
                continue
            mm = next(n for n in g.nodes if program.nodes[n].op == "matmul")
            assert derived, (name, plan.name, gi)
            owner = next(j for j, h in enumerate(derived[0].groups) if mm in h.nodes)
            assert BLAS in (TRITON.isa_options(derived[0], owner, H200) or []), (name, plan.name, gi)


ATTENTION_PROGRAMS = [e.name for e in suite.SUITE
                      if any(g.kind == "attention" for p in plans(e.bound(small=True).expand()) for g in p.groups)]


@pytest.mark.parametrize("name", ATTENTION_PROGRAMS)
def test_library_attention_is_a_choice_and_matches_float64(name, tmp_path):
    """torch's scaled_dot_product_attention next to our flash kernel, on q / k / v views of the buffers."""
    program = suite.get(name).bound(small=True).expand()
    found = [c for c in candidates(program) if SDPA in dict(c.isa).values()]
    if name == "gqa":
        assert found, "grouped-query causal attention is the library's pattern"
    for c in found[:1]:
        kernel = emit(c, H200, "k")
        assert "F.scaled_dot_product_attention(" in kernel.source and "sdpa:1" in kernel.meta["lowering"]
        attention_out = any(sdpa.core(c.plan, gi) is not None and sdpa.core(c.plan, gi).out in program.outputs
                            for gi, i in c.isa if i == SDPA)
        # the library's result is a program output: the kernel returns torch's tensor, no copy into an argument
        assert (kernel.mode == "return") == attention_out, kernel.source
        assert attention_out == (".copy_(F.scaled_dot_product_attention(" not in kernel.source), kernel.source
        out = run_kernel(kernel, program, tmp_path)
        assert out.status == "ok", f"{out.error}\n{kernel.source}"


def test_library_attention_returned_as_an_output_and_read_by_a_projection(tmp_path):
    """An attention that is a program output and the operand of a projection: the kernel returns torch's
    tensor (made row-major, since our kernels read it), with the projection's output."""
    b = Builder("attention_projection")
    q, k, v = (b.input(n, (2, 4, s, 16), bf16) for n, s in (("q", 5), ("k", 7), ("v", 7)))
    a = b.emit("sdpa", q, k, v)
    program = b.build([b.emit("matmul", a, b.input("w", (16, 8), bf16)), a]).expand()
    found = [c for c in candidates(program) if SDPA in dict(c.isa).values()]
    assert found
    for i, c in enumerate(found):
        kernel = emit(c, H200, f"k{i}")
        assert kernel.mode == "return" and ".contiguous()\n" in kernel.source, kernel.source
        out = run_kernel(kernel, program, tmp_path)
        assert out.status == "ok", f"{out.error}\n{kernel.source}"


def test_library_attention_takes_the_4d_form_with_fewer_kv_heads():
    """The library's fused kernels take [batch, heads, rows, cols] only: grouped-query heads fold into the
    head dim of q and become ``enable_gqa`` (a 5-D call with stride-0 heads ran the math fallback)."""
    program = suite.get("gqa").bound(small=True).expand()
    plan = next(p for p in plans(program) if any(g.kind == "attention" for g in p.groups))
    gi = next(i for i, g in enumerate(plan.groups) if g.kind == "attention")
    call = sdpa.core(plan, gi)
    a = call.attention
    assert call.kv_heads * a.group == call.heads[1] and a.group > 1
    line = sdpa.source(call, {a.q.node: "q", a.k.node: "k", a.v.node: "v"}, "out0")[0]
    assert "enable_gqa=True" in line and line.count(f"({call.heads[0]}, ") >= 3


@pytest.mark.slow
@settings(max_examples=int(os.environ.get("AXON_EG_GEMM_EXAMPLES", "12")) // 2 or 1, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(m=st.sampled_from((1, 17, 32)), n=st.sampled_from((16, 33)), k=st.sampled_from((2048, 2100)),
       split=st.sampled_from((2, 3, 8)), dtype=st.sampled_from((bf16, fp32)),
       epilogue=st.sampled_from(("none", "bias_silu", "scale_bias")), isa=st.sampled_from((DOT, DOT_TMA)))
def test_split_k_matmul_matches_float64(m, k, n, split, dtype, epilogue, isa, tmp_path):
    """A long K in SPLIT_K slices, each by programs of its own; the partials are added in slice order by
    a second launch that runs the epilogue (tails in every dim, one slice shorter than the others)."""
    program = linear(m, k, n, (), dtype, epilogue, True).expand()
    plan = plans(program)[-1]
    assert plan.groups[0].kind == MATMUL
    c = next(c for c in candidates(program) if c.plan == plan and dict(c.isa).get(0) == DOT)
    tilings = (Tiling(0, tuple({**dict(c.tilings[0].values), "SPLIT_K": split}.items())), *c.tilings[1:])
    kernel = emit(dataclasses.replace(c, tilings=tilings, isa=((0, isa),)), H200, "k")
    assert f"split-K: SPLIT_K={split}" in kernel.source or (isa == DOT_TMA and "torch (tl.dot+tma" in kernel.source)
    out = run_kernel(kernel, program, tmp_path)
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


def test_split_k_is_in_the_space_only_for_few_tiles_and_a_long_k():
    long_k = plans(linear(256, 131072, 256, (), fp32, "none", False).expand())[-1]
    square = plans(linear(4096, 4096, 4096, (), bf16, "none", False).expand())[-1]
    splits = {dict(t.values).get("SPLIT_K", 1) for t in tilings(space(long_k, 0, H200, TRITON.templates))[0]}
    assert splits == {1, 2, 4, 8, 16, 32}
    assert {dict(t.values).get("SPLIT_K", 1) for t in tilings(space(square, 0, H200, TRITON.templates))[0]} == {1}


def test_an_ieee_library_call_leaves_torchs_tf32_flag_as_it_found_it(tmp_path):
    """The kernel sets ``allow_tf32`` off for its own fp32 call and restores the caller's setting."""
    import torch

    from axon_eg.testing.kernels import load_kernel

    program = linear(8, 16, 16, (), fp32, "bias", True).expand()
    c = next(c for c in candidates(program) if dict(c.isa).get(0) == BLAS and len(c.plan.groups) == 1)
    fn = load_kernel(emit(c, H200, "k"), tmp_path)
    flags, saved = torch.backends.cuda.matmul, torch.backends.cuda.matmul.allow_tf32
    try:
        flags.allow_tf32 = True
        x, w, bias = torch.randn(8, 16), torch.randn(16, 16), torch.randn(16)
        out = torch.empty(8, 16)
        fn(x, w, bias, out)
        assert flags.allow_tf32 is True
        assert torch.allclose(out, x @ w.T + bias, atol=1e-5)
    finally:
        flags.allow_tf32 = saved


def test_the_library_is_named_for_the_target():
    program = linear(16, 16, 16, (), bf16, "none", False).expand()
    c = next(c for c in candidates(program) if dict(c.isa).get(0) == BLAS)
    assert "(cuBLAS through torch)" in emit(c, H200, "k").source
    assert "(oneDNN through torch)" in emit(c, load("intel-xe2"), "k").source


def test_library_attention_read_only_by_a_projection_is_not_copied(tmp_path):
    """An attention only a library GEMM reads (the output projection): torch's result is used as it is (its
    fused kernels write [batch, rows, heads, dim], so the projection's transpose back is a view), no copy
    into a buffer of ours; the result still matches float64."""
    b = Builder("attention_then_projection")
    q, k, v = (b.input(n, (2, 4, s, 16), bf16) for n, s in (("q", 5), ("k", 7), ("v", 7)))
    a = b.emit("sdpa", q, k, v)
    heads = b.emit("transpose", a, perm=(0, 2, 1, 3))
    rows = b.emit("reshape", heads, shape=(2, 5, 64))
    program = b.build([b.emit("matmul", rows, b.input("w", (64, 8), bf16))]).expand()
    found = [c for c in candidates(program) if SDPA in dict(c.isa).values()
             and any(i == "blas" for _, i in c.isa)]
    assert found
    for i, c in enumerate(found[:2]):
        kernel = emit(c, H200, f"k{i}")
        assert "F.scaled_dot_product_attention(" in kernel.source and ".copy_(" not in kernel.source, kernel.source
        out = run_kernel(kernel, program, tmp_path)
        assert out.status == "ok", f"{out.error}\n{kernel.source}"
