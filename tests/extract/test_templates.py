"""Typed tile templates (issue 16): one template applies to each fusion group on each target, its space
reads its ranges from the hardware file, the enumerated tilings carry their typed tile, hand-built and
stored tilings read the same way, and the cost model, the ranking and the Triton lowerings read the
typed fields."""

from __future__ import annotations

import dataclasses
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import yaml  # noqa: E402
from benchmarks.suite import get  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from axon_eg import hw  # noqa: E402
from axon_eg.backends.nki import templates as NT  # noqa: E402
from axon_eg.backends.triton import cost as cost_module  # noqa: E402
from axon_eg.backends.triton import templates as GT  # noqa: E402
from axon_eg.backends.triton.backend import TRITON  # noqa: E402
from axon_eg.egraph.nugraph import DEFAULT_FLOPS_PER_BYTE, flops_per_byte  # noqa: E402
from axon_eg.extract import templates as T  # noqa: E402
from axon_eg.extract.candidates import isa_choices  # noqa: E402
from axon_eg.extract.fusion import MATMUL, REDUCTION, FusionPlan, Group, plans  # noqa: E402
from axon_eg.extract.tiling import Tiling, group_cost, rank_tilings, space, stored_tie_break, tilings  # noqa: E402  # noqa: E402
from axon_eg.ir.dtypes import bf16, fp32  # noqa: E402
from axon_eg.ir.program import Builder  # noqa: E402
from axon_eg.targets import backend_for_hw  # noqa: E402

TARGETS = ["h200", "h100", "intel-xe2", "trn1", "trn2"]
NAMES = ["rmsnorm_matmul", "softmax", "gated_mlp", "cumsum", "transpose", "gqa", "matmul_bias_gelu"]


def _gemv(op: str | None) -> FusionPlan:
    """``x @ sum(W, -1, keepdims)`` (``op`` "sum": the split-K GEMV) or ``x @ v`` (None: a plain GEMV), one group."""
    b = Builder(f"gemv_{op}")
    x = b.input("x", (64, 48), bf16)
    w = b.input("w", (48, 32 if op else 1), bf16)
    vec = b.emit(op, w, axes=(1,), keepdims=True) if op else w
    program = b.build(b.emit("matmul", x, vec)).expand()
    return FusionPlan(program, (Group(MATMUL, tuple(i for i, n in enumerate(program.nodes) if n.op not in ("input",))),))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", NAMES)
def test_one_template_per_group_and_tilings_carry_their_typed_tile(target, name):
    spec = hw.load(target)
    for plan in plans(get(name).bound(small=True)):
        for gi in range(len(plan.groups)):
            templates = backend_for_hw(spec).templates
            applying = [t for t in templates.kinds if t.applies(plan, gi, spec)]
            assert len(applying) == 1, (plan.name, gi, applying)
            sp = space(plan, gi, spec, templates)
            assert sp.template is applying[0] and sp.kind == plan.groups[gi].kind
            for t in tilings(sp)[0]:
                assert type(t.typed) is sp.template and t.template is sp.template
                assert all(getattr(t.typed, key) == value for key, value in t.values), t
                assert templates.tile_of(plan, gi, Tiling(gi, t.values), spec) == t.typed  # the same tile read by hand
                assert templates.recover(plan.groups[gi].kind, t.values, spec).tie_break(32) == t.typed.tie_break(32)


def test_the_gemv_and_split_k_decision_has_one_home():
    split, plain = _gemv("sum"), _gemv(None)
    h200 = hw.load("h200")
    assert GT.TEMPLATES.template_for(split, 0, h200) is GT.SplitKTile
    assert GT.TEMPLATES.template_for(plain, 0, h200) is GT.GemvTile
    assert T.is_gemv(split, 0) and T.is_gemv(plain, 0) and T.reduced_operand(split, 0)
    assert isa_choices(plain, h200, TRITON) == [((0, "fma_reduce"),), ((0, "blas"),)]  # a GEMV or the library
    program = get("matmul").bound(small=False).expand()
    plan = plans(program)[-1]
    assert not T.is_gemv(plan, 0) and GT.TEMPLATES.template_for(plan, 0, h200) is GT.MatmulTile
    assert NT.TEMPLATES.template_for(plan, 0, hw.load("trn2")) is NT.TrnMatmulTile


def test_spaces_read_their_ranges_from_the_hardware_file(tmp_path):
    doc = yaml.safe_load((hw.DATA_DIR / "h200.yaml").read_text())
    doc["tiles"]["matmul"]["block_m"]["value"] = [32, 64]
    doc["tiles"]["elementwise"]["block"]["value"] = [256, 512]
    path = tmp_path / "h200.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    narrow = hw.load(path)
    program = get("matmul_bias_gelu").bound(small=False).expand()
    unfused = plans(program)[0]
    params = {gi: dict(space(unfused, gi, narrow, TRITON.templates).params) for gi in range(len(unfused.groups))}
    mm = next(gi for gi, g in enumerate(unfused.groups) if g.kind == MATMUL)
    ew = next(gi for gi, g in enumerate(unfused.groups) if g.kind != MATMUL)
    assert params[mm]["BLOCK_M"] == (32, 64) and params[mm]["BLOCK_N"] == T.pow2(16, 256)
    assert params[ew]["BLOCK"] == (256, 512)


def test_defaults_live_in_the_templates_and_the_hardware_file():
    k = T.knobs(hw.load("h200"))
    assert (k.warp_size, k.num_warps) == (32, 4) and T.knobs() == k  # hw.DEFAULT_HW's file
    assert T.knobs(hw.load("intel-xe2")).warp_size == 32  # the largest sub-group size, as the emitter launches
    m = GT.MatmulTile.of()
    assert (m.BLOCK_M, m.BLOCK_N, m.BLOCK_K, m.num_warps, m.num_stages, m.GROUP_SIZE_M) == (64, 64, 32, 4, 3, 8)
    assert cost_module.GROUP_SIZE_M == GT.MatmulTile.GROUP_SIZE_M
    s = GT.SplitKTile.of((), k)
    assert (s.SPLIT_K, s.BLOCK_R, s.num_warps, s.finish_warps) == (16, 1024, 8, 4)
    assert GT.AttentionTile.of().num_stages == 2 and GT.ElementwiseTile.of().BLOCK == 1024
    assert NT.TrnMatmulTile.of() == NT.TrnMatmulTile(TILE_K=128, TILE_M=128, TILE_N=512, BLOCK_M=1, BLOCK_N=1)
    assert GT.ElementwiseTile.of({"BLOCK": 256, "num_warps": 8, "unknown": 1}) == GT.ElementwiseTile(BLOCK=256, num_warps=8)


def test_hand_built_tilings_take_the_template_that_applies():
    split = _gemv("sum")
    tile = GT.TEMPLATES.tile_of(split, 0, Tiling(0, (("SPLIT_K", 32), ("BLOCK_R", 256), ("num_warps", 4))))
    assert tile == GT.SplitKTile(SPLIT_K=32, BLOCK_R=256, num_warps=4, finish_warps=4)
    assert GT.TEMPLATES.tile_of(split, 0, None) is None and GT.TEMPLATES.tile_of(split, 0, Tiling(0, ())) is None
    assert NT.TEMPLATES.recover(None, {"TILE_P": 64, "TILE_F": 512}) == NT.TrnRowsTile(TILE_P=64, TILE_F=512)
    assert isinstance(GT.TEMPLATES.recover("matmul", {"BLOCK_M": 16, "BLOCK_N": 1, "BLOCK_K": 256, "num_warps": 4}), GT.GemvTile)


def test_the_ranking_api_is_the_enumerators_order():
    h200 = hw.load("h200")
    plan = plans(get("rmsnorm_matmul").bound(small=False).expand())[-1]
    for gi in range(len(plan.groups)):
        options, _ = tilings(space(plan, gi, h200, TRITON.templates))
        ranked = rank_tilings(plan, gi, h200, TRITON.templates, TRITON.group_cost)
        raw = rank_tilings(plan, gi, h200, TRITON.templates, TRITON.group_cost, bucketed=False)
        assert sorted(ranked, key=lambda t: t.values) == sorted(options, key=lambda t: t.values)
        costs = [group_cost(plan, gi, t, h200, TRITON) for t in raw]
        assert costs == sorted(group_cost(plan, gi, t, h200, TRITON) for t in options)
        assert stored_tie_break(ranked[0], TRITON.templates, plan.groups[gi].kind) == ranked[0].typed.tie_break(32)


def test_lowerings_read_typed_fields():
    from axon_eg.backends.triton.emit import lower_group

    program = get("matmul").program.bind(M=70, K=40, N=50).expand()
    plan = plans(program)[-1]
    t = tilings(space(plan, 0, hw.load("h200"), TRITON.templates))[0][0]
    tile = dataclasses.replace(GT.MatmulTile.read(t), BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_SIZE_M=2)
    kernel = lower_group(plan, 0, Tiling(0, t.values, tile), "_g0")
    assert ("GROUP_SIZE_M", 2) in kernel.constexprs and "GROUP_SIZE_M=2" in kernel.note
    assert kernel.resources["threads"] == tile.num_warps * 32  # the default target's warp size


def test_nugraph_flops_per_byte_from_the_hardware_file():
    assert flops_per_byte(hw.load("h200")) == DEFAULT_FLOPS_PER_BYTE
    assert flops_per_byte(hw.load("h100")) > flops_per_byte(hw.load("h200"))  # same peak, less bandwidth
    assert all(flops_per_byte(hw.load(t)) >= 1 for t in TARGETS)


@settings(max_examples=40, deadline=None)
@given(outer=st.integers(1, 9), cols=st.integers(2, 60), inner=st.integers(2, 5000), rows_log=st.integers(4, 8),
       warps_log=st.integers(0, 4), dtype=st.sampled_from([fp32, bf16]))
def test_one_pass_column_reductions_pay_for_warps_along_the_reduced_axis(outer, cols, inner, rows_log, warps_log,
                                                                       dtype):
    """Doubling the warps of a one-pass column reduction with dependent reductions (a logsumexp: its max,
    then its sum) past the hardware file's limit along the reduced axis costs more; one level of reductions
    (a sum), a chunk loop and a row reduction are not charged; the layout's warps along the axis are the
    warps the contiguous rows leave over."""
    spec = hw.load("h200")

    def column_plan(op: str) -> FusionPlan:
        b = Builder("col" + op)
        x = b.input("x", (outer, cols, inner), dtype)
        program = b.build(b.emit(op, x, axes=(1,), keepdims=False)).expand()
        return FusionPlan(program, (Group(REDUCTION, tuple(i for i, n in enumerate(program.nodes)
                                                           if n.op != "input")),))

    plan, single = column_plan("logsumexp"), column_plan("sum")
    assert plan.row_passes(0, chunked=False) >= 2 and single.row_passes(0, chunked=False) == 1
    assert plan.row_passes(0) == 1  # chunked: a logsumexp's max and sum in one online pass
    rows, warps, block = 2 ** rows_log, 2 ** warps_log, T.next_pow2(cols)

    def seconds(**values):
        return cost_module.gpu_group_cost(plan, 0, Tiling(0, tuple(values.items())), spec).seconds

    tile = GT.RowsTile(BLOCK_N=block, ROWS_PER_PROGRAM=rows, num_warps=warps)
    along = cost_module.reduced_axis_warps(tile, dtype.itemsize)
    assert along == max(1, warps // max(1, rows // (16 // dtype.itemsize * 32)))
    one, two = (seconds(BLOCK_N=block, ROWS_PER_PROGRAM=rows, num_warps=w) for w in (warps, 2 * warps))
    limit = spec.value("costs.column_reduction_warps")
    if along >= limit and cost_module.reduced_axis_warps(dataclasses.replace(tile, num_warps=2 * warps),
                                                          dtype.itemsize) > along:
        assert two > one
    assert cost_module.cross_warp_efficiency(single, 0, dataclasses.replace(tile, num_warps=16), spec) == 1.0
    chunk = GT.RowsTile(BLOCK_N=max(1, block // 4), ROWS_PER_PROGRAM=rows, num_warps=16)  # a chunk loop: not charged
    assert cost_module.cross_warp_efficiency(plan, 0, chunk, spec) == 1.0
    row = Builder("rowsum")
    y = row.input("y", (outer, inner, cols), dtype)
    rp = row.build(row.emit("sum", y, axes=(2,), keepdims=False)).expand()
    row_plan = FusionPlan(rp, (Group(REDUCTION, tuple(i for i, n in enumerate(rp.nodes) if n.op != "input")),))
    assert cost_module.cross_warp_efficiency(row_plan, 0, dataclasses.replace(tile, num_warps=16), spec) == 1.0


@settings(max_examples=30, deadline=None)
@given(outer=st.integers(1, 9), cols=st.integers(2, 300), inner=st.integers(2, 5000), rows_log=st.integers(2, 8),
       dtype=st.sampled_from([fp32, bf16]))
def test_column_reductions_pay_for_short_contiguous_runs(outer, cols, inner, rows_log, dtype):
    """A column reduction's program reads ROWS_PER_PROGRAM contiguous elements per reduced index: below the
    hardware file's run length the bandwidth falls as the fitted powers, weighted by its reads and writes
    (never above 1, never for a row reduction); longer runs are never predicted slower on that account."""
    spec = hw.load("h200")
    b = Builder("colsum")
    x = b.input("x", (outer, cols, inner), dtype)
    program = b.build(b.emit("sum", x, axes=(1,), keepdims=False)).expand()
    plan = FusionPlan(program, (Group(REDUCTION, tuple(i for i, n in enumerate(program.nodes) if n.op != "input")),))
    rows = 2 ** rows_log
    short, long = (cost_module.column_run_efficiency(plan, 0, GT.RowsTile(BLOCK_N=16, ROWS_PER_PROGRAM=r, num_warps=4),
                                                      spec) for r in (rows, 2 * rows))
    run = min(rows, inner) * dtype.itemsize
    full = spec.value("costs.column_run_bytes")
    assert 0 < short <= long <= 1.0
    ratio = min(1.0, run / full)
    read, write = (ratio ** spec.value(f"costs.column_run_{k}_exponent") for k in ("read", "write"))
    written, total = outer * inner * dtype.itemsize, outer * inner * (cols + 1) * dtype.itemsize
    assert short == pytest.approx(total / ((total - written) / read + written / write))
    assert write <= short <= read
    row = Builder("rowsum")
    y = row.input("y", (outer, inner, cols), dtype)
    rp = row.build(row.emit("sum", y, axes=(2,), keepdims=False)).expand()
    row_plan = FusionPlan(rp, (Group(REDUCTION, tuple(i for i, n in enumerate(rp.nodes) if n.op != "input")),))
    assert cost_module.column_run_efficiency(row_plan, 0, GT.RowsTile(BLOCK_N=16, ROWS_PER_PROGRAM=rows,
                                                                      num_warps=4), spec) == 1.0


@settings(max_examples=30, deadline=None)
@given(m=st.sampled_from([1, 16, 63, 64, 127, 4096]), block_m=st.sampled_from([16, 32, 64, 128]),
       kind=st.sampled_from(["bf16", "fp32 3xtf32", "fp32 tf32", "fp32 ieee"]))
def test_tensor_core_tiles_under_64_rows_are_charged_their_fraction(m, block_m, kind):
    """A tensor-core tl.dot tile of fewer rows than the hardware file's minimum runs at BLOCK_M / minimum of
    the rate where the matmul has the rows for a full tile (e12: BLOCK_M 16 measured 17x slower than 128);
    fp32 FMAs, library calls and skinny matmuls are not charged."""
    from axon_eg.backends.triton.isa import BLAS, DOT, TF32, TF32X3

    spec = hw.load("h200")
    dtype = bf16 if kind == "bf16" else fp32
    b = Builder("mm")
    y = b.emit("matmul", b.input("a", (m, 64), dtype), b.input("b", (64, 96), dtype))
    plan = FusionPlan(b.build(y).expand(), ())
    plan = FusionPlan(plan.program, (Group(MATMUL, tuple(i for i, n in enumerate(plan.program.nodes)
                                                         if n.op != "input")),))
    isa = DOT + {"bf16": "", "fp32 3xtf32": TF32X3, "fp32 tf32": TF32, "fp32 ieee": ""}[kind]
    tile = dataclasses.replace(GT.MatmulTile.of(), BLOCK_M=block_m)
    rows = spec.value("costs.tensor_core_min_rows")
    got = cost_module.short_tile_efficiency(plan, 0, tile, spec, isa)
    charged = kind != "fp32 ieee" and m >= rows and block_m < rows
    assert got == (block_m / rows if charged else 1.0)
    assert cost_module.short_tile_efficiency(plan, 0, tile, spec, BLAS) == 1.0


def _one_group(program) -> FusionPlan:
    return FusionPlan(program, (Group(REDUCTION, tuple(i for i, n in enumerate(program.nodes) if n.op != "input")),))


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 5000), cols=st.integers(2, 4000), warps_log=st.integers(0, 4),
       rows_pp=st.sampled_from([1, 2, 8]), dtype=st.sampled_from([fp32, bf16]))
def test_one_pass_dependent_row_reductions_pay_for_their_warps(rows, cols, warps_log, rows_pp, dtype):
    """A one-pass row reduction whose reductions read each other (a log-softmax: max, then the sum of
    exponentials) is charged past the hardware file's warps, as the fitted power, more warps never cheaper;
    a single level (a sum), a chunk loop and a column reduction are not charged by this term."""
    spec = hw.load("h200")
    b = Builder("lsm")
    x = b.input("x", (rows, cols), dtype)
    plan = _one_group(b.build(b.emit("logsumexp", x, axes=(1,), keepdims=False)).expand())
    b2 = Builder("s")
    single = _one_group(b2.build(b2.emit("sum", b2.input("x", (rows, cols), dtype), axes=(1,))).expand())
    warps = 2 ** warps_log
    block = T.next_pow2(cols)
    tile = GT.RowsTile(BLOCK_N=block, ROWS_PER_PROGRAM=rows_pp, num_warps=warps)
    eff = cost_module.row_warp_efficiency(plan, 0, tile, spec)
    limit, exponent = spec.value("costs.row_reduction_warps"), spec.value("costs.row_reduction_warps_exponent")
    assert eff == pytest.approx(min(1.0, limit / warps) ** exponent)
    assert cost_module.row_warp_efficiency(plan, 0, dataclasses.replace(tile, num_warps=2 * warps), spec) <= eff
    assert cost_module.row_warp_efficiency(single, 0, tile, spec) == 1.0
    if cols > 16:
        chunked = GT.RowsTile(BLOCK_N=max(1, block // 4), ROWS_PER_PROGRAM=rows_pp, num_warps=16)
        assert cost_module.row_warp_efficiency(plan, 0, chunked, spec) == 1.0


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 5000), cols=st.integers(300, 100000), warps_log=st.integers(0, 4),
       block_log=st.integers(5, 8), welford=st.booleans())
def test_chunk_loops_pay_for_the_accumulators_they_carry(rows, cols, warps_log, block_log, welford):
    """A chunked row reduction's accumulator registers per thread (ROWS * BLOCK_N / threads, times one per
    sibling reduction and two more per Welford pair) past the hardware file's limit cost the fitted power:
    a variance (its mean and squared deviations in one Welford pass) carries three, a sum one; wider chunks
    per thread are never cheaper; a row in one block is not charged."""
    spec = hw.load("h200")
    b = Builder("var" if welford else "sum")
    x = b.input("x", (rows, cols), fp32)
    if welford:
        m = b.emit("mean", x, axes=(1,), keepdims=True)
        d = b.emit("sub", x, m)
        out = b.emit("mean", b.emit("mul", d, d), axes=(1,), keepdims=True)
    else:
        out = b.emit("sum", x, axes=(1,), keepdims=True)
    plan = _one_group(b.build(out).expand())
    assert cost_module.loop_vectors(plan, 0) == (3 if welford else 1)
    warps, block = 2 ** warps_log, 2 ** block_log
    tile = GT.RowsTile(BLOCK_N=block, ROWS_PER_PROGRAM=1, num_warps=warps)
    eff = cost_module.loop_register_efficiency(plan, 0, tile, spec)
    registers = block / (warps * 32) * (3 if welford else 1)
    limit, exponent = spec.value("costs.loop_accumulator_registers"), spec.value("costs.loop_accumulator_exponent")
    assert eff == pytest.approx(min(1.0, limit / registers) ** exponent)
    if 2 * block < cols:  # still a chunk loop
        assert cost_module.loop_register_efficiency(plan, 0, dataclasses.replace(tile, BLOCK_N=2 * block), spec) <= eff
    whole = GT.RowsTile(BLOCK_N=T.next_pow2(cols), ROWS_PER_PROGRAM=1, num_warps=warps)
    assert cost_module.loop_register_efficiency(plan, 0, whole, spec) == 1.0


@given(block_log=st.integers(7, 14), warps_log=st.integers(0, 4))
def test_element_wise_blocks_rank_one_vector_per_thread_first(block_log, warps_log):
    """Among element-wise tilings of equal cost the tie-break puts 4 fp32 elements per thread (one 16-byte
    vector) first; layout and scan tiles keep their own target."""
    t = GT.ElementwiseTile(BLOCK=2 ** block_log, num_warps=2 ** warps_log)
    best = GT.ElementwiseTile(BLOCK=4 * 32 * 2 ** warps_log, num_warps=2 ** warps_log)
    assert best.tie_break(32) <= t.tie_break(32) or best.BLOCK == t.BLOCK
    assert GT.LayoutTile(BLOCK=16 * 32, num_warps=1).tie_break(32)[1] == 0
