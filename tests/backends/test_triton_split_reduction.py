"""Split reductions (``RowsTile.SPLIT``) against the float64 reference under TRITON_INTERPRET=1: few long
rows (a full reduction to one scalar is one row) reduced by several programs per row, each over a slice of
whole chunks, their fp32 partials combined in slice order by a second launch that also computes what the
group derives from the reductions; random shapes with tails (odd columns, 1 row, 3-D inputs reduced over
several trailing axes), sum / mean / max / min with element-wise producers and consumers fused."""

from __future__ import annotations

import math
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from axon_eg.backends.triton.backend import TRITON  # noqa: E402
from axon_eg.backends.triton.base import NotLowerable  # noqa: E402
from axon_eg.backends.triton.emit import emit  # noqa: E402
from axon_eg.backends.triton.reduction import CHUNK_WEIGHT, check  # noqa: E402
from axon_eg.backends.triton.templates import RowsTile  # noqa: E402
from axon_eg.egraph.nugraph import Variant  # noqa: E402
from axon_eg.extract.candidates import Candidate  # noqa: E402
from axon_eg.extract.fusion import REDUCTION, plans  # noqa: E402
from axon_eg.extract.tiling import Tiling, space, tilings  # noqa: E402
from axon_eg.hw import load  # noqa: E402
from axon_eg.ir.builder import Builder  # noqa: E402
from axon_eg.ir.dtypes import bf16, fp32  # noqa: E402
from axon_eg.ir.program import Program  # noqa: E402
from axon_eg.testing.kernels import run_kernel  # noqa: E402

H200 = load("h200")


def reduction_program(shape: tuple[int, ...], kept: int, op: str, producer: str, consumer: str, dtype) -> Program:
    """``consumer(op(producer(x), axes=trailing))`` keeping the first ``kept`` axes."""
    b = Builder(f"split_{op}")
    x = b.input("x", shape, dtype)
    v = {"square": lambda: b.emit("mul", x, x), "abs": lambda: b.emit("abs", x),
         "diff": lambda: b.emit("sub", x, b.input("y", shape, dtype)), "none": lambda: x}[producer]()
    r = b.emit(op, v, axes=tuple(range(kept, len(shape))))
    if consumer == "sqrt_abs":
        r = b.emit("sqrt", b.emit("abs", r))
    elif consumer == "scale":
        r = b.emit("mul", r, b.constant(0.5, dtype))
    return b.build([r]).expand()


def split_candidate(program: Program, split: int, block_n: int = 16) -> Candidate:
    """The one-group plan's candidate with the reduction group at ``SPLIT = split``."""
    plan = next(p for p in plans(program) if len(p.groups) == 1 and p.groups[0].kind == REDUCTION)
    options, _ = tilings(space(plan, 0, H200, TRITON.templates))
    base = dict(options[0].values) if options else {}
    t = Tiling(0, tuple({**base, "BLOCK_N": block_n, "ROWS_PER_PROGRAM": 1, "num_warps": 1, "SPLIT": split}.items()))
    report = TRITON.cost(plan, (t,), H200)
    return Candidate(Variant(program, 0, 0, 0), plan, (t,), (), report.seconds, report)


@pytest.mark.slow  # seconds of interpreted kernels or compiles: make test-slow (CI) runs it
@settings(max_examples=int(os.environ.get("AXON_EG_SPLIT_EXAMPLES", "16")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(shape=st.sampled_from(((1, 301), (3, 257), (2, 5, 37), (1, 1, 129), (5, 100))),
       op=st.sampled_from(("sum", "mean", "max", "min")), producer=st.sampled_from(("square", "abs", "diff", "none")),
       consumer=st.sampled_from(("none", "sqrt_abs", "scale")), split=st.sampled_from((2, 3, 4, 8)),
       dtype=st.sampled_from((fp32, bf16)), data=st.data())
def test_split_reduction_matches_float64(shape, op, producer, consumer, split, dtype, data, tmp_path):
    kept = data.draw(st.integers(0, len(shape) - 1))
    program = reduction_program(shape, kept, op, producer, consumer, dtype)
    kernel = emit(split_candidate(program, split), H200, "k")
    assert "_part[" in kernel.source and "_finish[" in kernel.source and f"SPLIT={split}" in kernel.source
    out = run_kernel(kernel, program, tmp_path)
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


def test_a_full_reduction_to_one_scalar_is_split_to_fill_the_gpu():
    """sqrt(sum(x * x)) of a 4096 x 458752 fp32 tensor (a Frobenius norm, 7.5 GB): the one-program kernel is
    predicted at about a second; the split one near the HBM roofline (~1.8 ms), and the space offers it."""
    program = reduction_program((4096, 458752), 0, "sum", "square", "sqrt_abs", fp32)
    plan = next(p for p in plans(program) if len(p.groups) == 1)
    splits = {dict(t.values).get("SPLIT", 1) for t in tilings(space(plan, 0, H200, TRITON.templates))[0]}
    assert max(splits) >= 512

    def predicted(split: int) -> float:
        t = Tiling(0, (("BLOCK_N", 8192), ("ROWS_PER_PROGRAM", 1), ("num_warps", 16), ("SPLIT", split)))
        return TRITON.cost(plan, (t,), H200).seconds

    assert predicted(1) > 0.1 and predicted(512) < 2.5e-3


def test_only_few_long_rows_are_split():
    many = reduction_program((4096, 65536), 1, "sum", "none", "none", fp32)
    plan = plans(many)[0]
    assert all(dict(t.values).get("SPLIT", 1) == 1 for t in tilings(space(plan, 0, H200, TRITON.templates))[0])
    assert RowsTile.split_values  # the template decides it from the group's rows and columns


@pytest.mark.parametrize("what,make", [
    ("reads the reduction", lambda b, x: [b.emit("sum", b.emit(
        "mul", x, b.emit("sum", x, axes=(1,), keepdims=True)), axes=(1,))]),
    ("a full-width output of it", lambda b, x: [b.emit("div", x, b.emit("sum", b.emit(
        "abs", b.emit("sub", x, b.emit("max", x, axes=(1,), keepdims=True))), axes=(1,), keepdims=True))]),
])
def test_what_a_split_cannot_compute_is_refused_with_its_reason(what, make):
    b = Builder("refused")
    x = b.input("x", (2, 300), fp32)
    program = b.build(make(b, x)).expand()
    plan = next(p for p in plans(program) if len(p.groups) == 1)
    t = Tiling(0, (("BLOCK_N", 16), ("ROWS_PER_PROGRAM", 1), ("num_warps", 1), ("SPLIT", 4)))
    with pytest.raises(NotLowerable, match="split"):
        check(plan, 0, t)
    assert what


def column_candidate(program: Program, rows: int, block_n: int, split: int = 1) -> Candidate:
    plan = next(p for p in plans(program) if len(p.groups) == 1 and p.groups[0].kind == REDUCTION)
    t = Tiling(0, (("BLOCK_N", block_n), ("ROWS_PER_PROGRAM", rows), ("num_warps", 1), ("SPLIT", split)))
    report = TRITON.cost(plan, (t,), H200)
    return Candidate(Variant(program, 0, 0, 0), plan, (t,), (), report.seconds, report)


@settings(max_examples=int(os.environ.get("AXON_EG_SPLIT_EXAMPLES", "16")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(shape=st.sampled_from(((3, 37, 5), (1, 19, 7), (4, 9, 1, 3), (2, 3, 33, 6), (5, 1, 17), (3, 5, 16), (9, 3, 8))),
       op=st.sampled_from(("sum", "mean", "max", "min")), producer=st.sampled_from(("square", "diff", "none")),
       consumer=st.sampled_from(("none", "sqrt_abs", "scale")), rows=st.sampled_from((1, 4, 16)),
       block_n=st.sampled_from((16, 64)), dtype=st.sampled_from((fp32, bf16)), data=st.data())
def test_column_reduction_of_middle_axes_matches_float64(shape, op, producer, consumer, rows, block_n, dtype, data,
                                                         tmp_path):
    """A reduction of a middle block of axes, the axes after it kept (a column reduction): rows are output
    elements, read without a transpose; chunked (BLOCK_N < reduced size) or in one pass. The address shows
    Triton the rows contiguous where it can (no outer axis, or a program's rows inside one outer index)."""
    k = data.draw(st.integers(0, len(shape) - 2))
    j = data.draw(st.integers(k + 1, len(shape) - 1))
    b = Builder(f"col_{op}")
    x = b.input("x", shape, dtype)
    v = {"square": lambda: b.emit("mul", x, x), "diff": lambda: b.emit("sub", x, b.input("y", shape, dtype)),
         "none": lambda: x}[producer]()
    r = b.emit(op, v, axes=tuple(range(k, j)))
    r = b.emit("sqrt", b.emit("abs", r)) if consumer == "sqrt_abs" else \
        b.emit("mul", r, b.constant(0.5, dtype)) if consumer == "scale" else r
    program = b.build([r]).expand()
    kernel = emit(column_candidate(program, rows, block_n), H200, "k")
    assert "torch (" not in kernel.source.split("def kernel")[0].split("# fusion plan")[1], kernel.source
    inner, outer = math.prod(shape[j:]), math.prod(shape[:k])
    if inner > 1:
        form = (f"cols * {inner} + rows" if outer == 1 else "(pid * ROWS) %" if inner % rows == 0 else
                f"rows % {inner}")
        assert form in kernel.source, kernel.source
    out = run_kernel(kernel, program, tmp_path)
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


def test_a_norm_over_dim_0_is_one_fused_kernel_with_its_full_width_output(tmp_path):
    """F.normalize(x, dim=0): square, sum over the leading axis, sqrt, clamp and divide in one kernel."""
    b = Builder("normalize_dim0")
    x = b.input("x", (7, 5, 3), fp32)
    norm = b.emit("sqrt", b.emit("sum", b.emit("mul", x, x), axes=(0,), keepdims=True))
    program = b.build([b.emit("div", x, b.emit("maximum", norm, b.constant(1e-12, fp32)))]).expand()
    kernel = emit(column_candidate(program, 4, 16), H200, "k")
    out = run_kernel(kernel, program, tmp_path)
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


def sibling_program(shape: tuple[int, ...], ops: tuple[str, ...], dtype) -> Program:
    """Several reductions of one row (l1 = sum|x|, l2 = sum x*x, max, ...) combined into one row value, as
    a Hoyer sparsity or a z-score of the maximum writes it."""
    b = Builder("siblings")
    x = b.input("x", shape, dtype)
    axes = tuple(range(1, len(shape)))
    prods = {"sum": b.emit("abs", x), "mean": x, "max": x, "min": b.emit("mul", x, x)}
    rs = [b.emit(op, prods[op], axes=axes) for op in ops]
    out = rs[0]
    for r in rs[1:]:
        out = b.emit("add", out, b.emit("mul", r, b.constant(0.25, dtype)))
    return b.build([out]).expand()


@settings(max_examples=int(os.environ.get("AXON_EG_SPLIT_EXAMPLES", "16")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(shape=st.sampled_from(((1, 301), (3, 257), (2, 5, 37), (1, 129), (7, 1, 65))),
       ops=st.lists(st.sampled_from(("sum", "mean", "max", "min")), min_size=2, max_size=4, unique=True),
       split=st.sampled_from((1, 3, 8)), dtype=st.sampled_from((fp32, bf16)))
def test_sibling_reductions_share_one_pass_over_the_row(shape, ops, split, dtype, tmp_path):
    """Reductions of one row that read no other reduction are computed in one chunk loop (the row is read
    once, not once per reduction), split or not, with [ROWS, BLOCK_N] accumulators reduced once after the
    loop; the result matches float64 and the cost model counts one pass."""
    program = sibling_program(shape, tuple(ops), dtype)
    cand = split_candidate(program, split)
    assert cand.plan.row_passes(0) == 1 and len(cand.plan.sibling_reductions(0)) == len(ops)
    kernel = emit(cand, H200, "k")
    loops = [ln for ln in kernel.source.splitlines() if "for c0 in range(" in ln and "partial last chunk" not in ln]
    assert len(loops) == 1, kernel.source
    assert "tl.full([ROWS, BLOCK_N]" in kernel.source
    out = run_kernel(kernel, program, tmp_path)
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(n=st.integers(17, 700).filter(lambda n: n % 16), split=st.sampled_from((1, 2, 3)), op=st.sampled_from(("sum", "max")))
def test_one_odd_row_loads_whole_chunks_unmasked_by_its_odd_bound(n, split, op, tmp_path):
    """A full reduction of a row whose length is not a multiple of BLOCK_N: the loop over whole chunks tests a
    multiple of BLOCK_N (16-byte loads; the row's own odd bound made every load scalar: Huber loss over 127M
    elements at 372 us against 249 us predicted) and its address is the column alone; the partial last chunk
    is a loop of its own, in the slice that holds it; the result matches float64 at every slice count."""
    program = reduction_program((n,), 0, op, "diff", "scale", fp32)
    if split > 1 and split * 16 * 4 > n:
        split = 1  # the split template needs slices of at least 4 chunks
    cand = split_candidate(program, split)
    kernel = emit(cand, H200, "k")
    full = n // 16 * 16
    assert f"cmask = cols < {full}" in kernel.source and "partial last chunk" in kernel.source, kernel.source
    assert "flat = rows * 0 + cols" in kernel.source
    out = run_kernel(kernel, program, tmp_path)
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


def zscore_of_max(shape: tuple[int, ...], dtype) -> Program:
    """``(max(x) - mean(x)) / std(x)`` over the whole tensor: the std's squared deviations read the mean."""
    b = Builder("zscore")
    x = b.input("x", shape, dtype)
    axes = tuple(range(len(shape)))
    mean_kd = b.emit("mean", x, axes=axes, keepdims=True)
    dev = b.emit("square", b.emit("sub", x, mean_kd))
    n = 1
    for d in shape:
        n *= d
    var = b.emit("mul", b.emit("sum", dev, axes=axes), b.constant(1.0 / max(1, n - 1), dtype))
    top = b.emit("sub", b.emit("max", x, axes=axes), b.emit("mean", x, axes=axes))
    return b.build([b.emit("div", top, b.emit("sqrt", var))]).expand()


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(shape=st.sampled_from(((301,), (3, 257), (2, 5, 37), (7, 1, 129), (2, 200))), split=st.sampled_from((1, 2, 4)))
def test_dependent_reductions_of_one_tensor_split_into_levels(shape, split, tmp_path):
    """A statistic of a whole tensor whose reductions read each other (a std reads its mean) cannot be one
    split reduction; the plans then hold it cut by dependency level (max and both means in one pass, the
    squared deviations and the division in a second), each level a split reduction over the GPU, and the
    kernels match float64 at every slice count."""
    program = zscore_of_max(shape, fp32)
    cut = [p for p in plans(program) if [g.kind for g in p.groups] == [REDUCTION, REDUCTION]]
    assert cut, [p.name for p in plans(program)]
    plan = cut[0]
    ops = [sorted(program.nodes[n].op for n in g.nodes if program.nodes[n].op in ("max", "mean", "sum"))
           for g in plan.groups]
    assert ops == [["max", "mean", "mean"], ["sum"]], ops
    n = 1
    for d in shape:
        n *= d
    split = split if split * 16 * 4 <= n else 1
    chosen = []
    for gi in range(2):
        options, _ = tilings(space(plan, gi, H200, TRITON.templates))
        base = dict(options[0].values) if options else {}
        chosen.append(Tiling(gi, tuple({**base, "BLOCK_N": 16, "ROWS_PER_PROGRAM": 1, "num_warps": 1,
                                        "SPLIT": split}.items())))
    report = TRITON.cost(plan, tuple(chosen), H200)
    kernel = emit(Candidate(Variant(program, 0, 0, 0), plan, tuple(chosen), (), report.seconds, report), H200, "k")
    out = run_kernel(kernel, program, tmp_path)
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


@pytest.mark.slow  # 16 interpreted kernels over every axis set: 10-23 s (make test-slow, CI)
@settings(max_examples=int(os.environ.get("AXON_EG_SPLIT_EXAMPLES", "16")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(shape=st.sampled_from(((3, 37, 5), (2, 1, 19, 7), (4, 9, 3, 3), (2, 3, 33, 6), (5, 1, 17), (7, 6, 1, 5, 3))),
       what=st.sampled_from(("sum", "mean", "max", "var")), keepdims=st.booleans(), rows=st.sampled_from((1, 4, 16)),
       block_n=st.sampled_from((16, 64)), dtype=st.sampled_from((fp32, bf16)), data=st.data())
def test_reductions_over_any_set_of_axes_read_in_place_and_match_float64(shape, what, keepdims, rows, block_n, dtype,
                                                                         data, tmp_path):
    """Reduced axes with kept axes between them (a per-channel variance over (N, L) of [N, C, L], a norm over
    (0, 2, 3)): one Triton kernel whose rows are the kept axes and whose columns the reduced ones, each axis
    indexed in place (no transpose through memory), chunked or in one pass; a variance reads its mean back at
    its own row. The result matches float64."""
    axes = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape) - 1))))
    b = Builder(f"axes_{what}")
    x = b.input("x", shape, dtype)
    if what == "var":
        mean = b.emit("mean", x, axes=axes, keepdims=True)
        dev = b.emit("sub", x, mean)
        r = b.emit("mean", b.emit("mul", dev, dev), axes=axes, keepdims=keepdims)
    else:
        r = b.emit(what, b.emit("mul", x, b.constant(1.5, dtype)), axes=axes, keepdims=keepdims)
    program = b.build([b.emit("sqrt", b.emit("abs", r))]).expand()
    kernel = emit(column_candidate(program, rows, block_n), H200, "k")
    assert "torch (" not in kernel.source.split("def kernel")[0].split("# fusion plan")[1], kernel.source
    out = run_kernel(kernel, program, tmp_path)
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


@pytest.mark.slow
@settings(max_examples=int(os.environ.get("AXON_EG_SPLIT_EXAMPLES", "16")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(shape=st.sampled_from(((3, 37), (1, 301), (5, 2, 33), (2, 7, 3, 11), (4, 1, 65))),
       axes_kind=st.sampled_from(("trailing", "middle", "any")),
       what=st.sampled_from(("var", "sumsq", "norm")), rows=st.sampled_from((1, 4)), dtype=st.sampled_from((fp32, bf16)),
       data=st.data())
def test_a_mean_and_its_squared_deviations_take_one_pass_over_the_row(shape, axes_kind, what, rows, dtype, data,
                                                                      tmp_path):
    """``mean(x)`` and ``mean|sum((x - mean(x))**2)`` over the same axes (a variance, a layer / group / instance
    norm) in one chunk loop by Welford's update, not one loop each (r13's instance norm read its rows three
    times); a norm's full-width output takes the second loop. Chunked rows of odd length, any axis set; the
    result matches float64."""
    n = len(shape)
    axes = {"trailing": tuple(range(1, n)), "middle": tuple(range(1, n - 1)) or (0,),
            "any": tuple(sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n - 1))))}[axes_kind]
    b = Builder(f"welford_{what}")
    x = b.input("x", shape, dtype)
    mean = b.emit("mean", x, axes=axes, keepdims=True)
    dev = b.emit("sub", x, mean)
    sq = b.emit("square", dev)
    if what == "sumsq":
        out = b.emit("sum", sq, axes=axes, keepdims=False)
    else:
        var = b.emit("mean", sq, axes=axes, keepdims=True)
        out = var if what == "var" else b.emit("mul", dev, b.emit("rsqrt", b.emit("add", var, b.constant(1e-5, dtype))))
    program = b.build([out]).expand()
    cand = column_candidate(program, rows, 16)
    assert len(cand.plan.welford_pairs(0)) == 1
    assert cand.plan.row_passes(0) == 1
    kernel = emit(cand, H200, "k")
    src = kernel.source.split("def kernel")[0]
    loops = [ln for ln in src.splitlines() if "for c0 in range(" in ln and "partial last chunk" not in ln]
    cols = math.prod(shape[a] for a in axes)
    if cols > 16:
        assert "tl.maximum(n" in src and len(loops) == (2 if what == "norm" else 1), src
        assert f"* {CHUNK_WEIGHT}" in src and "_v, 1.0)" not in src, src  # one weight per chunk, no division per element
    out_ = run_kernel(kernel, program, tmp_path)
    assert out_.status == "ok", f"{out_.error}\n{kernel.source}"


def test_a_single_row_over_non_consecutive_axes_stores_full_width_blocks(tmp_path):
    """Hypothesis found it: a norm over axes (0, 2) of [4, 1, 65] (the kept axis of size 1: one row) with
    ROWS=4 addressed its full-width store by columns only ([1, BLOCK_N] against a [ROWS, BLOCK_N] value)."""
    b = Builder("one_row_norm")
    x = b.input("x", (4, 1, 65), fp32)
    mean = b.emit("mean", x, axes=(0, 2), keepdims=True)
    dev = b.emit("sub", x, mean)
    var = b.emit("mean", b.emit("square", dev), axes=(0, 2), keepdims=True)
    out = b.emit("mul", dev, b.emit("rsqrt", b.emit("add", var, b.constant(1e-5, fp32))))
    program = b.build([out]).expand()
    kernel = emit(column_candidate(program, 4, 16), H200, "k")
    got = run_kernel(kernel, program, tmp_path)
    assert got.status == "ok", f"{got.error}\n{kernel.source}"


def norm_program(shape: tuple[int, ...], kept: int, dev: str, affine: bool, stats: bool, dtype) -> Program:
    """A layer / group norm over the trailing axes after ``kept``: ``(x - mean) * rsqrt(var + eps)`` (the
    variance a ``dev`` = mean or sum of the squared deviations), optionally times a per-column weight, and
    optionally also the variance itself as a second (row) output."""
    b = Builder("split_norm")
    x = b.input("x", shape, dtype)
    axes = tuple(range(kept, len(shape)))
    m = b.emit("mean", x, axes=axes, keepdims=True)
    d = b.emit("sub", x, m)
    v = b.emit(dev, b.emit("mul", d, d), axes=axes, keepdims=True)
    y = b.emit("mul", d, b.emit("rsqrt", b.emit("add", v, b.constant(1e-3, dtype))))
    if affine:
        y = b.emit("mul", y, b.input("w", shape[kept:], dtype))
    return b.build([y, v] if stats else [y]).expand()


@pytest.mark.slow
@settings(max_examples=int(os.environ.get("AXON_EG_SPLIT_EXAMPLES", "16")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(shape=st.sampled_from(((1, 301), (3, 257), (2, 5, 37), (1, 1, 129), (2, 3, 7, 11))),
       dev=st.sampled_from(("mean", "sum")), affine=st.booleans(), stats=st.booleans(),
       split=st.sampled_from((2, 3, 8)), block_n=st.sampled_from((16, 32)), dtype=st.sampled_from((fp32, bf16)),
       data=st.data())
def test_a_split_norm_computes_its_variance_by_welford_and_stores_full_width_slices(
        shape, dev, affine, stats, split, block_n, dtype, data, tmp_path):
    """A norm of few long rows split across programs: the first launch's slices each keep a Welford count,
    mean and sum of squared deviations (one pass over the row), the second combines them by Chan's formula
    in slice order and each of its SPLIT programs per row stores its slice of the normalized output (a row
    output once per row); the result matches float64. The cost model charges the second read from HBM."""
    kept = data.draw(st.integers(0, len(shape) - 1))
    program = norm_program(shape, kept, dev, affine, stats, dtype)
    cand = split_candidate(program, split, block_n)
    assert len(cand.plan.welford_pairs(0)) == 1
    kernel = emit(cand, H200, "k")
    finish = kernel.source.split("_finish(")[1]
    assert "m2" in finish and ("split == 0" in finish) == stats, kernel.source
    assert f"_finish[({split * math.ceil(math.prod(shape[:kept]))},)]" in kernel.source, kernel.source
    out = run_kernel(kernel, program, tmp_path)
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


def test_a_split_norm_reads_its_rows_twice_from_hbm():
    """The split norm's bytes: the row once for the statistics, once more (from HBM: the whole tensor went
    through the first launch in between) for the output, plus the output."""
    program = norm_program((8, 96, 181, 179), 1, "mean", True, False, fp32)
    plan = next(p for p in plans(program) if len(p.groups) == 1)
    t = Tiling(0, (("BLOCK_N", 4096), ("ROWS_PER_PROGRAM", 1), ("num_warps", 16), ("SPLIT", 64)))
    x = 8 * 96 * 181 * 179 * 4
    assert TRITON.cost(plan, (t,), H200).bytes >= 3 * x
