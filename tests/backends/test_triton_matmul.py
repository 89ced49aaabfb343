"""Matmul groups lowered to Triton (``axon_eg.backends.triton.matmul``) run under TRITON_INTERPRET=1 and
match the float64 reference: every suite program with a matmul in each of its fusion plans, sizes that
are not multiples of the tiles, bf16 and fp32, the fma_reduce GEMV, batched and broadcast batches,
operand prologues (transpose on load, row statistics), epilogues (several outputs, reductions across
N) and random matmul programs; the lowering says why when it leaves a group to torch."""

from __future__ import annotations

import dataclasses
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from benchmarks import suite  # noqa: E402
from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import axon_eg as ax  # noqa: E402
from axon_eg.backends.kernel import input_specs  # noqa: E402
from axon_eg.backends.triton.base import GroupKernel  # noqa: E402
from axon_eg.backends.triton.cost import GROUP_SIZE_M  # noqa: E402
from axon_eg.backends.triton.emit import emit, lower_group  # noqa: E402
from axon_eg.bundle import reference_arrays  # noqa: E402
from axon_eg.extract.fusion import MATMUL, plans  # noqa: E402
from axon_eg.extract.tiling import Tiling  # noqa: E402
from axon_eg.hw import load  # noqa: E402
from axon_eg.ir.builder import Builder  # noqa: E402
from axon_eg.ir.dtypes import bf16, fp32, fp64  # noqa: E402
from axon_eg.ir.lowp import interpret_lowp  # noqa: E402
from axon_eg.ir.program import Program  # noqa: E402
from axon_eg.measure import harness  # noqa: E402
from axon_eg.testing.kernels import candidate_for, run_kernel  # noqa: E402
from axon_eg.testing.strategies import programs  # noqa: E402

H200 = load("h200")
TILES = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "num_warps": 2, "num_stages": 2}
T = ax.Tensor
SUITE_MATMULS = ("matmul", "transpose_matmul", "rmsnorm_matmul", "layernorm_matmul", "matmul_bias_gelu", "gated_mlp",
                 "sum_matmul", "linear_min_sub", "linear_batchnorm", "lora", "softmax_matmul")
ODD = {"M": 40, "K": 37, "N": 50, "D": 37, "F": 50, "R": 5}  # several tiles each way, none of them full




def candidate(program: Program, plan_index: int = -1, tiles: dict | None = None, isa: str = "tl.dot"):
    """The program as written, fusion plan ``plan_index``, ``tiles`` on its matmul groups only."""
    c = candidate_for(program, H200, plan_index)
    tiles = TILES if tiles is None else {**TILES, **tiles}
    tilings = tuple(Tiling(gi, tuple({**dict(t.values), **tiles}.items())) if g.kind == MATMUL else t
                    for gi, (g, t) in enumerate(zip(c.plan.groups, c.tilings)))
    isas = tuple((gi, isa) for gi, g in enumerate(c.plan.groups) if g.kind == MATMUL)
    return dataclasses.replace(c, tilings=tilings, isa=isas)


def check(program: Program, tmp_path, plan_index: int = -1, tiles: dict | None = None, isa: str = "tl.dot",
          triton_only: bool = True):
    """Emit, assert the matmul groups became Triton kernels, run against float64; returns the kernel."""
    kernel = emit(candidate(program, plan_index, tiles, isa), H200, "k")
    header = kernel.source[: kernel.source.index("import math")]
    if triton_only:
        assert "torch" not in kernel.meta["lowering"], header
    out = run_kernel(kernel, program.expand(), tmp_path)
    assert out.status == "ok", f"{out.error}\n{kernel.source}"
    return kernel


def in_fp32(program: Program) -> Program:
    """The same program with fp32 inputs and constants (the suite is bf16)."""
    b = Builder(f"{program.name}_fp32")
    vals = []
    for node in program.nodes:
        if node.op == "input":
            vals.append(b.input(node.attrs["name"], node.attrs["shape"], fp32))
        elif node.op == "constant":
            vals.append(b.constant(node.attrs["value"], fp32))
        else:
            vals.append(b.emit(node.op, *(vals[i] for i in node.inputs), **dict(node.attrs)))
    return b.build([vals[o] for o in program.outputs], dims=program.bindings)


# -- the suite ----------------------------------------------------------------------------------
SUITE_PLANS = [(name, pi) for name in SUITE_MATMULS for pi in range(len(plans(suite.get(name).bound(small=True))))]


@pytest.mark.parametrize("name,plan_index", SUITE_PLANS, ids=[f"{n}-plan{p}" for n, p in SUITE_PLANS])
def test_suite_matmul_groups_lower_to_triton_in_every_plan(name, plan_index, tmp_path):
    program = suite.get(name).bound(small=True)
    kernel = check(program, tmp_path, plan_index)
    assert kernel.meta["lowering"].startswith("triton:")


@pytest.mark.parametrize("name", SUITE_MATMULS)
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_suite_programs_at_sizes_that_are_not_multiples_of_the_tiles(name, dtype, tmp_path):
    program = suite.get(name).program.bind({k: v for k, v in ODD.items() if k in suite.get(name).program.free_dims})
    program = in_fp32(program) if dtype == "fp32" else program
    kernel = check(program, tmp_path)
    assert kernel.meta["lowering"] == f"triton:{len(plans(program)[-1].groups)}"


def test_suite_lowering_needs_no_pre_pass_for_rmsnorm_and_one_for_layernorm_and_softmax():
    """rmsnorm's row scale commutes with the matmul: its sum of squares accumulates in the K loop and
    scales the rows after it. layernorm computes its mean first (x - mean would cancel as x @ W - mean *
    colsum(W)) and gets its bias as a column sum; softmax computes its max first (exp needs it)."""
    notes = {}
    for name in ("rmsnorm_matmul", "layernorm_matmul", "softmax_matmul"):
        kernel = emit(candidate(suite.get(name).bound(small=True)), H200, "k")
        notes[name] = kernel.source.splitlines()[4]
    assert "pre-pass" not in notes["rmsnorm_matmul"] and "1 row sums" in notes["rmsnorm_matmul"]
    assert "1 K pre-passes" in notes["layernorm_matmul"] and "1 column sums" in notes["layernorm_matmul"]
    assert "1 K pre-passes" in notes["softmax_matmul"]


def test_transposed_operands_are_indexed_in_place(tmp_path):
    program = suite.get("transpose_matmul").program.bind(M=40, K=37, N=50)
    kernel = check(program, tmp_path)
    assert kernel.meta["lowering"] == "triton:1" and "transpose" in kernel.source.splitlines()[4]
    assert "p0 + rk * 40 + rm" in kernel.source  # x[K, M] read as x.T[rm, rk]


# -- GEMV, batches, tiles -----------------------------------------------------------------------
@ax.program(M=37, K=45, N=1)
def _gemv(x: T["M", "K", ax.bf16], w: T["K", "N", ax.bf16]):
    return x @ w


@ax.program(M=37, K=45, N=3)
def _gemv_rows(x: T["M", "K", ax.fp32], w: T["N", "K", ax.fp32], b: T["N", ax.fp32]):
    return ax.tanh(ax.linear(x, w, b)).sum(axis=-1)


@pytest.mark.parametrize("program", [_gemv, _gemv_rows], ids=lambda p: p.name)
@pytest.mark.parametrize("isa", ["fma_reduce", "tl.dot"])
def test_gemv_fma_reduce_streams_a_without_padding_to_the_dot(program, isa, tmp_path):
    kernel = check(program, tmp_path, isa=isa)
    assert ("tl.dot(" in kernel.source) == (isa == "tl.dot")
    if isa == "fma_reduce":
        assert dict(kernel_constexprs(kernel))["BLOCK_N"] == (1 if program is _gemv else 4)


def kernel_constexprs(kernel) -> list[tuple[str, int]]:
    launch = next(ln for ln in kernel.source.splitlines() if ln.strip().startswith("_g0_") and "[(" in ln)
    return [(k.strip(), int(v)) for k, v in (kw.split("=") for kw in launch[launch.index(")](") + 3:-1].split(", ")
                                             if "=" in kw) if v.strip().isdigit()]


@ax.program(B=3, M=20, K=24, N=18)
def _batched(x: T["B", "M", "K", ax.bf16], w: T["K", "N", ax.bf16]):
    return x @ w


@ax.program(B=3, M=20, K=24, N=18)
def _batched_left_broadcast(x: T[1, "M", "K", ax.fp32], w: T["B", "K", "N", ax.fp32]):
    return x @ w


@ax.program(B=3, C=2, M=20, K=24, N=18)
def _batched_4d(x: T["B", "C", "M", "K", ax.bf16], w: T["C", "N", "K", ax.bf16], bias: T["B", 1, 1, "N", ax.bf16]):
    return ax.relu(x @ w.mT + bias)


@pytest.mark.parametrize("program", [_batched, _batched_left_broadcast, _batched_4d], ids=lambda p: p.name)
def test_batched_matmuls_broadcast_batch_dims_with_stride_zero(program, tmp_path):
    kernel = check(program, tmp_path)
    assert "pid_b = pid //" in kernel.source


def test_group_size_m_swizzle_masks_and_launch_parameters(tmp_path):
    program = suite.get("matmul").program.bind(M=70, K=40, N=50)
    tiles = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "num_warps": 4, "num_stages": 3}
    kernel = check(program, tmp_path, tiles=tiles)
    assert "group_size_m = min(5 - first_pid_m, GROUP_SIZE_M)" in kernel.source
    assert f"GROUP_SIZE_M={GROUP_SIZE_M}" in kernel.source and "num_stages=3" in kernel.source
    assert "mask=mmask & kmask" in kernel.source and "mask=mmask & nmask" in kernel.source
    lowered = lower_group(candidate(program, tiles=tiles).plan, 0, Tiling(0, tuple(tiles.items())), "_g0")
    assert isinstance(lowered, GroupKernel) and lowered.grid == 5 * 4 and lowered.num_warps == 4
    assert dict(lowered.launch) == {"num_stages": 3}
    assert lowered.resources["smem_bytes"] == (16 * 32 + 32 * 16) * 2 * 3


def test_tiles_that_divide_the_sizes_need_no_masks():
    program = suite.get("matmul").program.bind(M=64, K=64, N=32)
    source = emit(candidate(program), H200, "k").source
    assert "mask=" not in source[source.index("@triton.jit"):source.index("def kernel")]


@pytest.mark.parametrize("name,dims,loads", [
    ("matmul", {"M": 64, "K": 48, "N": 32}, 2),  # A and B row-major
    ("transpose_matmul", {"M": 64, "K": 48, "N": 32}, 2),  # A read transposed: a descriptor over A^T
    ("linear_min_sub", {"M": 48, "K": 64, "N": 32}, 2),  # torch weight [N, K]: B read transposed
    ("matmul_bias_gelu", {"M": 40, "K": 37, "N": 50}, 0),  # tails (masked loads) and odd pitches: no descriptor
])
def test_tma_descriptor_loads_where_the_operand_is_a_dense_tile(name, dims, loads, tmp_path):
    program = suite.get(name).program.bind({k: v for k, v in dims.items() if k in suite.get(name).program.free_dims})
    if not loads:
        reason = lower_group(candidate(program, isa="tl.dot+tma").plan, 0, Tiling(0, tuple(TILES.items())), "_g",
                             isa="tl.dot+tma")
        assert isinstance(reason, str) and "tl.dot+tma" in reason
        return
    kernel = check(program, tmp_path, isa="tl.dot+tma")
    src = kernel.source
    assert src.count("tl.make_tensor_descriptor(") == loads and "triton.set_allocator(_tma_scratch)" in src
    assert "TMA loads" in src[: src.index("import math")]
    assert ("tl.trans(d" in src) == (name != "matmul")


def test_offsets_are_64_bit_only_when_a_tensor_needs_it():
    big = suite.get("matmul").program.bind(M=65600, K=32768, N=16)
    small = suite.get("matmul").program.bind(M=64, K=64, N=32)
    assert ".to(tl.int64)" in emit(candidate(big), H200, "k").source
    assert "int64" not in emit(candidate(small), H200, "k").source


def test_emission_is_deterministic():
    program = suite.get("layernorm_matmul").bound(small=True)
    assert emit(candidate(program), H200, "k").source == emit(candidate(program), H200, "k").source


# -- prologues and epilogues --------------------------------------------------------------------
@ax.program(M=20, K=24, N=18)
def _prologue(x: T["M", "K", ax.bf16], s: T["M", 1, ax.bf16], c: T["K", ax.bf16], w: T["K", "N", ax.bf16]):
    return (ax.silu(x) * s * c) @ w


@ax.program(M=20, K=24, N=18)
def _cast_prologue(x: T["M", "K", ax.fp32], w: T["K", "N", ax.bf16]):
    return x.astype(ax.bf16) @ w


@ax.program(M=20, K=24, N=18)
def _absmax_scaled(x: T["M", "K", ax.fp32], w: T["K", "N", ax.fp32]):
    return (x / ax.abs(x).max(axis=-1, keepdims=True)) @ w


@ax.program(M=20, K=24, N=18)
def _epilogue(x: T["M", "K", ax.fp32], w: T["K", "N", ax.fp32], b: T["N", ax.fp32], r: T["M", "N", ax.fp32],
              s: T["M", 1, ax.fp32], t: T[1, "N", ax.fp32]):
    y = x @ w
    return y, ax.tanh((y + b) * 0.5 + r) * s + t


@ax.program(M=20, K=24, N=18)
def _prologue_outputs(x: T["M", "K", ax.bf16], g: T["K", ax.bf16], w: T["K", "N", ax.bf16]):
    r = ax.rsqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6)
    y = ax.sigmoid(x)
    return r, y, (y * r * g) @ w


@ax.program(M=20, K=24, N=40)
def _rows_after_matmul(x: T["M", "K", ax.bf16], w: T["K", "N", ax.bf16]):
    y = x @ w
    return y.mean(axis=-1), y.max(axis=-1, keepdims=True) * 2.0 - y.min(axis=-1, keepdims=True)


@pytest.mark.parametrize("program", [_prologue, _cast_prologue, _absmax_scaled, _epilogue, _rows_after_matmul],
                         ids=lambda p: p.name)
def test_prologues_and_epilogues_fuse_into_one_kernel(program, tmp_path):
    kernel = check(program, tmp_path)
    assert kernel.meta["lowering"] == "triton:1"


def test_intermediates_that_are_outputs_are_stored_once(tmp_path):
    """A row statistic (stored by the first tile column) and a prologue value (stored from the K loop
    of the first tile column) beside the matmul."""
    kernel = check(_prologue_outputs, tmp_path)
    assert kernel.meta["lowering"] == "triton:1" and kernel.source.count("if pid_n == 0:") == 2


@ax.program(M=20, K=24, N=40)
def _softmax_rows(x: T["M", "K", ax.fp32], w: T["K", "N", ax.fp32]):
    return ax.softmax(x @ w, axis=-1)


def test_a_reduction_across_n_loops_over_n_tiles_or_keeps_the_row_in_one_tile(tmp_path):
    looped = check(suite.get("linear_min_sub").program.bind(M=40, K=37, N=50), tmp_path)
    assert "for n0 in range(0, 50, BLOCK_N):" in looped.source
    whole = check(_softmax_rows, tmp_path, tiles={"BLOCK_N": 64})
    assert "for n0" not in whole.source


def test_groups_it_cannot_lower_say_why_and_run_in_torch(tmp_path):
    reasons = {}
    for key, program, tiles in (("softmax across N tiles", _softmax_rows, None),
                                ("column reduction", _column_sum, None), ("float64", _fp64, None)):
        c = candidate(program, tiles=tiles)
        gi = next(i for i, g in enumerate(c.plan.groups) if g.kind == MATMUL)
        reasons[key] = lower_group(c.plan, gi, c.tilings[gi], "_g", isa="tl.dot")
        if key != "float64":  # the harness has no float64 inputs
            check(program, tmp_path, triton_only=False)
    thin = candidate(_gemv, tiles={"BLOCK_M": 4, "BLOCK_K": 256})
    assert "at least 16" in lower_group(thin.plan, 0, thin.tilings[0], "_g", isa="tl.dot")
    assert isinstance(lower_group(thin.plan, 0, thin.tilings[0], "_g", isa="fma_reduce"), GroupKernel)
    assert "BLOCK_N >= N" in reasons["softmax across N tiles"]
    assert "only sum/mean/max/min over the last axis" in reasons["column reduction"]
    assert "float64" in reasons["float64"]


@ax.program(M=20, K=24, N=18)
def _column_sum(x: T["M", "K", ax.fp32], w: T["K", "N", ax.fp32]):
    return (x @ w).sum(axis=0)


@ax.program(M=5, K=6, N=7)
def _fp64(x: T["M", "K", fp64], w: T["K", "N", fp64]):
    return x @ w


# -- random programs ----------------------------------------------------------------------------
PROLOGUES = ("none", "silu", "tanh", "exp", "row_scale", "col_scale", "rmsnorm", "layernorm", "softmax", "absmax")
EPILOGUES = ("none", "bias", "residual", "gelu", "scale", "row_bias", "sum", "mean", "max", "min", "softmax")


@st.composite
def matmul_programs(draw) -> Program:
    """x[..., M, K] -> prologue -> @ w (maybe transposed, maybe batched) -> epilogue, plus maybe the
    matmul itself as a second output."""
    dt = draw(st.sampled_from([fp32, bf16]))
    m, k, n = (draw(st.integers(1, 40)) for _ in range(3))
    batch = draw(st.sampled_from([(), (2,)]))
    b = Builder("random_matmul")
    x = b.input("x", (*batch, m, k), dt)
    transposed = draw(st.booleans())
    wbatch = draw(st.sampled_from([(), *([(1,), batch] if batch else [])]))
    w = b.input("w", (*wbatch, n, k) if transposed else (*wbatch, k, n), dt)
    if transposed:
        w = b.emit("transpose", w, perm=(*range(len(wbatch)), len(wbatch) + 1, len(wbatch)))
    pro = draw(st.sampled_from(PROLOGUES))
    a = x
    if pro in ("silu", "tanh", "exp"):
        a = b.emit(pro, x)
    elif pro == "row_scale":
        a = b.emit("mul", x, b.input("s", (m, 1), dt))
    elif pro == "col_scale":
        a = b.emit("mul", x, b.input("c", (k,), dt))
    elif pro == "rmsnorm":
        a = b.emit("rmsnorm", x, b.input("g", (k,), dt), axes=(-1,), eps=1e-6)
    elif pro == "layernorm":
        a = b.emit("layernorm", x, b.input("g", (k,), dt), b.input("beta", (k,), dt), axes=(-1,), eps=1e-5)
    elif pro == "softmax":
        a = b.emit("softmax", x, axis=-1)
    elif pro == "absmax":
        a = b.emit("div", x, b.emit("max", b.emit("abs", x), axes=(-1,), keepdims=True))
    y = b.emit("matmul", a, w)
    epi = draw(st.sampled_from(EPILOGUES))
    out = y
    if epi == "bias":
        out = b.emit("add", y, b.input("bias", (n,), dt))
    elif epi == "residual":
        out = b.emit("add", y, b.input("r", tuple(y.shape), dt))
    elif epi == "gelu":
        out = b.emit("gelu", y, approximate="none")
    elif epi == "scale":
        out = b.emit("mul", y, b.constant(0.5, dt))
    elif epi == "row_bias":
        out = b.emit("sub", y, b.input("rb", (m, 1), dt))
    elif epi in ("sum", "mean", "max", "min"):
        out = b.emit(epi, y, axes=(-1,), keepdims=draw(st.booleans()))
    elif epi == "softmax":
        out = b.emit("softmax", y, axis=-1)
    outputs = [out, y] if out is not y and draw(st.booleans()) else [out]
    return b.build(outputs)


def conditioned(program: Program, seeds=range(3)) -> bool:
    """Whether an unfused evaluation that rounds every value to the program's format (fp32, or bf16
    when any input is bf16) stays well within the harness tolerance of the float64 reference: random
    programs can overflow or cancel in the format itself (a bf16 operand of a two-term dot)."""
    low_bf16 = any(spec.dtype.name == "bf16" for spec in program.inputs)
    fmt, tol = ("bf16", 0.5 * harness.TOLERANCES["bf16"]) if low_bf16 else ("fp32", 1e-5)
    ref = reference_arrays(program, seeds)
    for s in seeds:
        xs = [t.double().numpy() for t in harness.make_inputs(input_specs(program), s)]
        low = interpret_lowp(program, xs, fmt)
        for j, a in enumerate(low if isinstance(low, tuple) else (low,)):
            r = ref[f"seed{s}_out{j}"]
            scale = max(1.0, float(np.sqrt(np.mean(r * r)))) if r.size else 1.0
            if not np.all(np.isfinite(a)) or np.any(np.abs(a - r) > tol * (scale + np.abs(r))):
                return False
    return True


@pytest.mark.slow  # seconds of interpreted kernels or compiles: make test-slow (CI) runs it
@settings(max_examples=int(os.environ.get("AXON_EG_TRITON_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(program=matmul_programs(), tiles=st.sampled_from([{}, {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 32}]))
def test_random_matmul_programs_lower_to_triton_and_match_the_reference(tmp_path_factory, program, tiles):
    assume(conditioned(program.expand()))
    kernel = emit(candidate(program, tiles=tiles), H200, "k")
    softmax_across_tiles = "softmax" in [n.op for n in program.nodes[-3:]] and "BLOCK_N >= N" in kernel.source
    assert "torch" not in kernel.meta["lowering"] or softmax_across_tiles, kernel.source[:2000]
    out = run_kernel(kernel, program.expand(), tmp_path_factory.mktemp("k"))
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


@pytest.mark.slow  # seconds of interpreted kernels or compiles: make test-slow (CI) runs it
@settings(max_examples=int(os.environ.get("AXON_EG_TRITON_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
@given(programs(max_nodes=5, dtypes=(fp32,), ops=["matmul", "linear", "add", "mul", "sub", "div", "silu", "exp", "sum",
                                                    "mean", "max", "transpose", "square", "rsqrt", "broadcast_to",
                                                    "expand_dims", "squeeze", "softmax", "rmsnorm", "layernorm"]))
def test_random_programs_with_matmuls_match_the_reference(tmp_path_factory, program):
    expanded = program.expand()
    assume(any(node.op == "matmul" for node in expanded.nodes) and conditioned(expanded))
    kernel = emit(candidate(program), H200, "k")
    out = run_kernel(kernel, expanded, tmp_path_factory.mktemp("k"))
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


def _sliced_epilogue(m: int, k: int, n: int, start: int, concat: bool) -> Program:
    """``(a @ w)[start:]`` (below ``a`` itself when ``concat``) viewed as ``[rows, 1, n]`` and scaled."""
    rows = m - start + (m if concat else 0)

    @ax.program(name=f"{'concat_' if concat else ''}slice_view_{m}x{k}x{n}_{start}")
    def f(a: T[m, k, ax.fp32], w: T[k, n, ax.fp32]):
        y = ax.concat([a @ w, a], axis=0) if concat else a @ w
        return y[start:].reshape(rows, 1, n) * 2.0

    return f


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(m=st.sampled_from([1, 2, 3, 8, 17]), k=st.sampled_from([1, 3, 16, 17]), n=st.sampled_from([1, 5, 16, 17]),
       start=st.integers(0, 16), concat=st.booleans(), plan=st.integers(0, 3), fma=st.booleans())
def test_a_view_after_a_slice_in_a_matmul_epilogue_falls_back_cleanly(tmp_path_factory, m, k, n, start, concat, plan, fma):
    """Issue 14: a view of a sliced (or concatenated, then sliced) matmul result crashed the run with
    ``generator raised StopIteration`` (the epilogue's index map gave the view of a value without a place
    in the tile an empty index). Now such a group is NotLowerable and runs as torch; every plan is right."""
    start, n = start % m, (k if concat else n)  # a slice inside the rows; concat stacks a [m, k] under [m, n]
    program = _sliced_epilogue(m, k, n, start, concat)
    plan_index = plan % len(plans(program.expand()))
    c = candidate(program, plan_index, isa="fma_reduce" if fma else "tl.dot")
    for gi in range(len(c.plan.groups)):
        got = lower_group(c.plan, gi, c.tilings[gi], "g", 32, dict(c.isa).get(gi))
        assert isinstance(got, (GroupKernel, str))
    kernel = emit(c, H200, "k")
    out = run_kernel(kernel, program.expand(), tmp_path_factory.mktemp("k"))
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lead=st.lists(st.sampled_from((1, 2, 3, 5)), min_size=1, max_size=3), m=st.sampled_from((1, 7, 17)),
       k=st.sampled_from((5, 16, 33)), n=st.sampled_from((3, 16, 19)), dtype=st.sampled_from((fp32, bf16)),
       epilogue=st.booleans())
def test_a_tensor_times_a_matrix_is_one_gemm_over_its_leading_dims_read_and_written_in_place(
        lead, m, k, n, dtype, epilogue, tmp_path):
    """Issue 53: ``[*lead, M, K] @ [K, N]`` (3-D and 4-D tensor x matrix) as the importer writes it, the leading
    dims merged by a reshape into one GEMM's rows: the operand read in place through the view (its row index
    decomposed per row), the result's view back stored straight into the output (no copy kernel)."""
    shape = (*lead, m, k)
    rows = int(np.prod(shape[:-1]))
    b = Builder("tensor_matrix")
    x = b.input("x", shape, dtype)
    w = b.input("w", (k, n), dtype)
    y = b.emit("matmul", b.emit("reshape", x, shape=(rows, k)), w)
    if epilogue:
        y = b.emit("relu", y)
    program = b.build([b.emit("reshape", y, shape=(*shape[:-1], n))])
    kernel = check(program, tmp_path)
    launcher = kernel.source[kernel.source.index("def kernel("):]
    assert ".copy_(" not in launcher and f"out0.view(({rows}, {n}))" in launcher, launcher
