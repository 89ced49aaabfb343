"""Triton scan groups (cumsum with fused producers and consumers, chunked with a carry) and layout groups
(tiled transposes through shared memory; slices and concats as element-wise copies) run under
TRITON_INTERPRET=1 equal the float64 reference, and lower without torch fallback."""

from __future__ import annotations

import dataclasses
import math
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from benchmarks import suite  # noqa: E402
from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import axon_eg as ax  # noqa: E402
from axon_eg.backends.triton import layout, scan  # noqa: E402
from axon_eg.backends.triton.base import GroupKernel, NotLowerable  # noqa: E402
from axon_eg.backends.triton.emit import emit, lower_group  # noqa: E402
from axon_eg.extract.fusion import LAYOUT, SCAN, FusionPlan, Group  # noqa: E402
from axon_eg.extract.tiling import Tiling  # noqa: E402
from axon_eg.hw import load  # noqa: E402
from axon_eg.ir.builder import Builder  # noqa: E402
from axon_eg.ir.dtypes import fp32  # noqa: E402
from axon_eg.testing.kernels import candidate_for, run_kernel  # noqa: E402
from axon_eg.testing.strategies import programs  # noqa: E402

H200 = load("h200")
EXAMPLES = int(os.environ.get("AXON_EG_TRITON_EXAMPLES", "20"))


def emitted(program, overrides=None, plan_index=-1):
    return emit(candidate_for(program, H200, plan_index, overrides), H200, "k")


def check(program, tmp_path, overrides=None, plan_index=-1, triton_only=True):
    """Emit, run against the float64 reference, and return the kernel."""
    kernel = emitted(program, overrides, plan_index)
    if triton_only:
        assert kernel.meta["lowering"].startswith("triton:") and "torch" not in kernel.meta["lowering"], kernel.source
    out = run_kernel(kernel, program.expand(), tmp_path)
    assert out.status == "ok", f"{out.error}\n{kernel.source}"
    return kernel


def cumsum_program(shape, axis, dtype="fp32"):
    b = Builder("cumsum_nd")
    x = b.input("x", shape, dtype)
    return b.build(b.emit("cumsum", x, axis=axis))


def transpose_program(shape, perm, dtype="fp32"):
    b = Builder("transpose_nd")
    x = b.input("x", shape, dtype)
    return b.build(b.emit("transpose", x, perm=tuple(perm)))


# ------------------------------------------------------------------------------------------------
# Scans
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dims,overrides", [({"M": 5, "N": 7}, None), ({"M": 1, "N": 1}, None),
                                            ({"M": 3, "N": 300}, {"BLOCK": 128}), ({"M": 9, "N": 33}, {"CHUNK": 16})])
def test_suite_cumsum_lowers_to_one_scan_kernel(dims, overrides, tmp_path):
    program = suite.get("cumsum").program.bind(**dims)
    kernel = check(program, tmp_path, overrides)
    assert "tl.cumsum" in kernel.source and kernel.meta["lowering"] == "triton:1"
    assert ("for c0 in range(0," in kernel.source) == (dims["N"] > int((overrides or {}).get("CHUNK", 128)))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("chunk", [4, 64])
def test_cumsum_along_each_axis_of_a_3d_tensor(axis, dtype, chunk, tmp_path):
    program = cumsum_program((6, 11, 13), axis, dtype)
    kernel = check(program, tmp_path, {"CHUNK": chunk})
    assert ("for c0 in range(0," in kernel.source) == (chunk < (6, 11, 13)[axis])
    assert f"axis={1 if axis == 2 else 0})" in kernel.source  # the tile axis the scan runs along


def test_long_axis_needs_many_chunks_with_a_carry(tmp_path):
    program = cumsum_program((2, 2000), 1, "bf16")
    kernel = check(program, tmp_path, {"BLOCK": 256})
    assert "carry1 = tl.sum(tl.where(lane == CHUNK - 1" in kernel.source
    assert "8 chunks with a carry" in kernel.source


def test_scan_fuses_element_wise_producers_and_consumers(tmp_path):
    @ax.program(M=4, N=6)
    def prog(x: ax.Tensor["M", "N", ax.bf16], y: ax.Tensor["M", "N", ax.bf16], z: ax.Tensor["N", ax.bf16],
             s: ax.Tensor["M", 1, ax.bf16]):
        return ax.tanh((x * y).cumsum(axis=0) * s + z)

    program = prog.bind(M=37, N=20)
    kernel = check(program, tmp_path, {"CHUNK": 8})
    assert kernel.meta["groups"] == 1 and kernel.source.count("@triton.jit") == 1
    assert "tl.cumsum" in kernel.source and "tl.exp" in kernel.source


def test_producer_that_is_also_an_output_is_stored_from_the_sweep(tmp_path):
    @ax.program(M=4, N=6)
    def prog(x: ax.Tensor["M", "N", ax.fp32], y: ax.Tensor["M", "N", ax.fp32]):
        p = ax.exp(x) * y
        return p, p.cumsum(axis=-1) - x

    kernel = check(prog.bind(M=5, N=70), tmp_path, {"CHUNK": 16})
    assert kernel.source.count("tl.store(") == 2


def test_scan_of_a_transposed_and_sliced_producer(tmp_path):
    @ax.program(M=4, N=6)
    def prog(x: ax.Tensor["M", "N", ax.fp32]):
        return (ax.transpose(x, (1, 0)) * 2.0).cumsum(axis=1)

    check(prog.bind(M=19, N=7), tmp_path, {"CHUNK": 8})


def test_concat_along_an_outer_axis_feeds_a_column_scan(tmp_path):
    b = Builder("concat_cumsum")
    x, y = b.input("x", (2, 9, 5), "fp32"), b.input("y", (1, 9, 5), "fp32")
    check(b.build(b.emit("cumsum", b.emit("concat", x, y, axis=0), axis=1)), tmp_path, {"CHUNK": 4})


def test_outputs_that_are_flat_views_of_the_scan_are_stored_from_the_sweep(tmp_path):
    b = Builder("cumsum_views")
    x = b.input("x", (3, 8), "fp32")
    c = b.emit("cumsum", b.emit("exp", x), axis=1)
    program = b.build([b.emit("reshape", c, shape=(24,)), b.emit("expand_dims", c, axis=0)])
    check(program, tmp_path, {"CHUNK": 4})


def _same_axis_twice():
    b = Builder("double_cumsum")
    x = b.input("x", (3, 41), "fp32")
    c1 = b.emit("cumsum", x, axis=1)
    c2 = b.emit("cumsum", b.emit("mul", c1, b.constant(0.5, "fp32")), axis=1)
    return b.build(c2)


def test_two_scans_along_one_axis_share_the_sweep(tmp_path):
    program = _same_axis_twice().expand()
    base = candidate_for(program, H200, -1, {"CHUNK": 8})
    nodes = tuple(sorted({n for g in base.plan.groups for n in g.nodes}))
    plan = FusionPlan(program, (Group(SCAN, nodes),))
    cand = dataclasses.replace(base, plan=plan, tilings=(Tiling(0, (("BLOCK", 128), ("num_warps", 2), ("CHUNK", 8))),))
    kernel = emit(cand, H200, "k")
    assert kernel.meta["lowering"] == "triton:1" and kernel.source.count("tl.cumsum") == 2
    out = run_kernel(kernel, program, tmp_path)
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


def test_scans_along_different_axes_in_one_group_are_not_lowerable():
    b = Builder("two_axes")
    x = b.input("x", (3, 4), "fp32")
    program = b.build(b.emit("cumsum", b.emit("cumsum", x, axis=0), axis=1)).expand()
    plan = FusionPlan(program, (Group(SCAN, (1, 2)),))
    with pytest.raises(NotLowerable, match="cannot share one sweep"):
        scan.lower(plan, 0, None, "_g0")


def test_scan_result_read_through_a_transpose_stays_in_torch_and_says_why(tmp_path):
    @ax.program(M=4, N=6)
    def prog(x: ax.Tensor["M", "N", ax.fp32]):
        return ax.exp(ax.transpose(x.cumsum(axis=1), (1, 0)))

    kernel = check(prog.bind(M=6, N=6), tmp_path, triton_only=False)
    assert "torch (cumsum result 1 is read through an index map" in kernel.source
    kernel = check(prog.bind(M=5, N=6), tmp_path, triton_only=False)
    assert "torch (output 3 (exp) of shape [6, 5] is not the scan's shape [5, 6])" in kernel.source


def test_float64_scans_stay_in_torch():
    program = cumsum_program((4, 5), 1, "fp64")
    got = lower_group(FusionPlan(program, (Group(SCAN, (1,)),)), 0, None, "_g0")
    assert not isinstance(got, GroupKernel) and "float64" in got


def test_scan_tiles_follow_the_planners_block():
    def tiles(shape, axis, block=4096):
        plan = FusionPlan(cumsum_program(shape, axis, "bf16").expand(), (Group(SCAN, (1,)),))
        k = scan.lower(plan, 0, Tiling(0, (("BLOCK", block), ("num_warps", 4))), "_g0")
        return dict(k.constexprs), k.grid

    assert tiles((4096, 4096), 1) == ({"ROWS": 1, "CHUNK": 4096}, 4096)  # a whole row per program
    assert tiles((65536, 256), 1) == ({"ROWS": 16, "CHUNK": 256}, 4096)  # short rows: several per program
    assert tiles((4096, 4096), 0) == ({"CHUNK": 256, "COLS": 16}, 256)  # narrow strips: enough programs for the SMs
    assert tiles((64, 4096, 64), 1) == ({"CHUNK": 256, "COLS": 16}, 256)
    assert tiles((8, 100, 4096), 1, 1024) == ({"CHUNK": 16, "COLS": 64}, 512)  # already enough: 128 B rows


def test_float64_layouts_stay_in_torch():
    program = transpose_program((4, 5), (1, 0), "fp64")
    got = lower_group(FusionPlan(program, (Group(LAYOUT, (1,)),)), 0, None, "_g0")
    assert not isinstance(got, GroupKernel) and "float64" in got


@pytest.mark.slow
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.lists(st.integers(1, 12), min_size=1, max_size=3).filter(lambda s: math.prod(s) <= 600), data=st.data(),
       dtype=st.sampled_from(["fp32", "bf16"]), chunk=st.sampled_from([1, 4, 16]),
       lines=st.sampled_from([1, 4, 16]))
def test_random_cumsums_match_the_reference(tmp_path_factory, shape, data, dtype, chunk, lines):
    axis = data.draw(st.integers(0, len(shape) - 1))
    program = cumsum_program(tuple(shape), axis, dtype)
    check(program, tmp_path_factory.mktemp("scan"), {"CHUNK": chunk, "LINES": lines})


# ------------------------------------------------------------------------------------------------
# Layouts
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dims,tile", [({"M": 5, "N": 7}, None), ({"M": 64, "N": 48}, 16), ({"M": 37, "N": 70}, 16),
                                       ({"M": 1, "N": 9}, 16), ({"M": 130, "N": 3}, 32)])
def test_suite_transpose_is_a_tiled_transpose(dims, tile, tmp_path):
    program = suite.get("transpose").program.bind(**dims)
    kernel = check(program, tmp_path, {"TILE": tile} if tile else None)
    if dims["M"] > 1:
        assert "tl.trans(" in kernel.source and "tiled transpose" in kernel.source
    else:  # [1, N] -> [N, 1] moves no axis: a plain copy
        assert "tl.trans(" not in kernel.source


@pytest.mark.parametrize("shape,perm", [((3, 17, 21), (0, 2, 1)), ((3, 17, 21), (2, 0, 1)), ((3, 17, 21), (2, 1, 0)),
                                        ((3, 17, 21), (1, 2, 0)), ((2, 3, 5, 19), (0, 3, 1, 2)),
                                        ((2, 1, 33, 18), (0, 3, 2, 1))])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_batched_and_3d_permutations_move_the_last_axis_through_tiles(shape, perm, dtype, tmp_path):
    kernel = check(transpose_program(shape, perm, dtype), tmp_path, {"TILE": 16})
    assert "tl.trans(" in kernel.source
    assert kernel.resources["smem_bytes"] > 0


@pytest.mark.parametrize("shape,perm", [((4, 5, 6), (1, 0, 2)), ((3, 7, 1), (2, 0, 1)), ((2, 3, 4, 5), (2, 0, 1, 3))])
def test_permutations_that_keep_the_last_axis_are_plain_copies(shape, perm, tmp_path):
    kernel = check(transpose_program(shape, perm), tmp_path)
    assert "tl.trans(" not in kernel.source and "element-wise" in kernel.source


def test_concat_along_a_batch_axis_then_transpose(tmp_path):
    b = Builder("concat_transpose")
    x = b.input("x", (2, 3, 20), "bf16")
    program = b.build(b.emit("transpose", b.emit("concat", x, x, axis=1), perm=(1, 2, 0)))
    kernel = check(program, tmp_path, {"TILE": 16})
    assert "tl.trans(" in kernel.source


def test_slices_and_concats_are_plain_copies(tmp_path):
    @ax.program(M=4, N=6)
    def prog(x: ax.Tensor["M", "N", ax.bf16], y: ax.Tensor["M", "N", ax.bf16]):
        return ax.concat([ax.slice(x, axis=1, start=1, stop=5), y], axis=1)

    kernel = check(prog.bind(M=5, N=7), tmp_path)
    assert "tl.trans(" not in kernel.source


def test_transpose_with_slices_and_concats_in_one_tiled_kernel(tmp_path):
    @ax.program(B=2, M=4, N=6)
    def prog(x: ax.Tensor["B", "M", "N", ax.bf16], y: ax.Tensor["B", "N", "M", ax.bf16]):
        return ax.concat([ax.slice(ax.transpose(x, (0, 2, 1)), axis=1, start=1, stop=4), y], axis=1)

    program = prog.bind(B=2, M=19, N=6)
    assert [g.kind for g in candidate_for(program, H200).plan.groups] == [LAYOUT]
    kernel = check(program, tmp_path, {"TILE": 16})
    assert "tl.trans(" in kernel.source and kernel.source.count("tl.load(") == 2


def test_offsets_are_64_bit_only_for_tensors_of_2_to_the_31_elements():
    big = emitted(transpose_program((3, 32768, 32768), (0, 2, 1), "bf16"), {"TILE": 64})
    small = emitted(transpose_program((3, 64, 64), (0, 2, 1), "bf16"), {"TILE": 64})
    assert "tl.program_id(0).to(tl.int64)" in big.source and "tl.int64" not in small.source
    big_scan = emitted(cumsum_program((65536, 32768), 0, "bf16"))
    assert "tl.program_id(0).to(tl.int64)" in big_scan.source


def test_tile_follows_the_planners_block_and_shrinks_to_short_axes():
    program = transpose_program((4096, 4096), (1, 0), "bf16").expand()
    plan = FusionPlan(program, (Group(LAYOUT, (1,)),))
    k = layout.lower(plan, 0, Tiling(0, (("BLOCK", 4096), ("num_warps", 4))), "_g0")
    assert dict(k.constexprs) == {"TILE_C": 64, "TILE_Q": 64} and k.grid == 64 * 64
    assert k.resources["smem_bytes"] == 64 * 64 * 2
    thin = transpose_program((4096, 3), (1, 0), "bf16").expand()
    k = layout.lower(FusionPlan(thin, (Group(LAYOUT, (1,)),)), 0, Tiling(0, (("BLOCK", 4096),)), "_g0")
    assert dict(k.constexprs) == {"TILE_C": 64, "TILE_Q": 4}


def test_emission_is_deterministic():
    program = transpose_program((3, 17, 21), (2, 0, 1))
    assert emitted(program).source == emitted(program).source
    program = cumsum_program((3, 17, 21), 1)
    assert emitted(program).source == emitted(program).source


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.lists(st.integers(1, 20), min_size=2, max_size=4).filter(lambda s: math.prod(s) <= 2400), data=st.data(),
       dtype=st.sampled_from(["fp32", "bf16"]), tile=st.sampled_from([16, 32]))
def test_random_permutations_match_the_reference(tmp_path_factory, shape, data, dtype, tile):
    perm = data.draw(st.permutations(range(len(shape))))
    kernel = check(transpose_program(tuple(shape), perm, dtype), tmp_path_factory.mktemp("perm"), {"TILE": tile})
    last = max((k for k, d in enumerate(shape) if d > 1), default=None)
    out_shape = [shape[p] for p in perm]
    out_last = max((k for k, d in enumerate(out_shape) if d > 1), default=None)
    moved = last is not None and out_last is not None and perm[out_last] != last
    assert ("tl.trans(" in kernel.source) == moved


# ------------------------------------------------------------------------------------------------
# Random programs mixing scans, layouts and element-wise ops
# ------------------------------------------------------------------------------------------------
MIXED_OPS = ["cumsum", "transpose", "slice", "concat", "reshape", "broadcast_to", "expand_dims", "squeeze", "exp", "mul",
             "add", "sub", "tanh"]
KNOWN_FALLBACKS = ("is read through an index map", "is not the scan's shape", "outputs of different shapes")


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(program=programs(max_nodes=5, ops=MIXED_OPS, dtypes=(fp32,)), plan_index=st.sampled_from([0, -1]))
def test_random_scan_and_layout_programs_match_the_reference(tmp_path_factory, program, plan_index):
    kernel = check(program, tmp_path_factory.mktemp("mixed"), plan_index=plan_index, triton_only=False)
    for line in kernel.source.splitlines():
        if line.startswith("#   g") and ": torch (" in line:
            assert any(reason in line for reason in KNOWN_FALLBACKS), line


@pytest.mark.parametrize("m, n", [(2, 1), (1, 1), (3, 2)])
def test_concat_of_a_tensor_whose_axes_are_all_one_loads_it_as_a_scalar(m, n, tmp_path):
    """A layout tile reading an input with every axis of size 1 (x1 is [1, 1, 1] at N = 1) has no block
    index in its address: a scalar load (Triton refuses a block mask on a scalar pointer). Found by
    test_random_programs_match_the_reference."""
    b = Builder("concat_unit")
    x0, x1 = b.input("x0", ("M", "N", "N"), fp32), b.input("x1", ("N", "N", "N"), fp32)
    both = b.emit("concat", x0, x1, axis=0)
    program = b.build([b.emit("concat", both, both, axis=1)], dims={"M": m, "N": n})
    check(program, tmp_path)


@pytest.mark.parametrize("b", [1, 2, 3])
def test_a_tiled_transpose_reads_a_flat_view_of_its_own_domain(b, tmp_path):
    """transpose -> expand_dims as one tiled layout kernel: the flat view's index maps back through the
    kernel's own domain tuple, which has no flat ``offs`` to stand for it (a random program once read
    ``offs`` before the store defined it)."""
    bld = Builder("view_of_transpose")
    x = bld.input("x0", (b, b, b, b), fp32)
    t = bld.emit("transpose", bld.emit("transpose", x, perm=(0, 1, 2, 3)), perm=(0, 1, 3, 2))
    check(bld.build([bld.emit("expand_dims", t, axis=0)]), tmp_path, plan_index=-1, triton_only=False)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.lists(st.integers(1, 9), min_size=2, max_size=3), data=st.data(), dtype=st.sampled_from(["fp32", "bf16"]))
def test_a_normalized_cumsum_reads_the_statistic_in_the_scan(tmp_path_factory, shape, data, dtype):
    """``cumsum(x / max(sum|x|, eps), axis)``: a plan moves the division (the reduction group's full-width
    tail) into the scan group, which reads ``x`` and the row statistic, so that the normalized tensor never
    goes through memory; that plan lowers to Triton and equals float64, along each axis."""
    from axon_eg.extract.fusion import REDUCTION, plans

    axis = data.draw(st.integers(0, len(shape) - 1))
    assume(shape[axis] > 1)  # a reduced axis of 1: the statistic is as wide as the tensor, nothing to sink
    b = Builder("l1_cumsum")
    x = b.input("x", tuple(shape), dtype)
    norm = b.emit("maximum", b.emit("sum", b.emit("abs", x), axes=(axis,), keepdims=True), b.constant(1e-12, dtype))
    program = b.build(b.emit("cumsum", b.emit("div", x, norm), axis=axis)).expand()
    found = [k for k, p in enumerate(plans(program)) if [g.kind for g in p.groups] == [REDUCTION, SCAN]
             and any(program.nodes[n].op == "div" for n in p.groups[1].nodes)]
    assert found, [[(g.kind, g.nodes) for g in p.groups] for p in plans(program)]
    kernel = check(program, tmp_path_factory.mktemp("l1cumsum"), plan_index=found[0])
    assert kernel.source.count("tl.store(") == 2  # the statistic and the scan: no normalized tensor


@settings(max_examples=6, deadline=None)
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=3), data=st.data(), chunk=st.sampled_from([1, 2, 4, 16]))
def test_cumprod_and_reverse_scans_run_and_match_the_reference(tmp_path_factory, shape, data, chunk):
    """``cumprod`` (``tl.cumprod`` in the sweep, its carry multiplying each chunk; several chunks per line
    where CHUNK is short) and a reverse cumsum written as flip, cumsum, flip, against float64 through the
    harness (the reverse scan's flip after the cumsum may leave that group to torch, and says why)."""
    axis = data.draw(st.integers(0, len(shape) - 1))
    b = Builder("scans")
    x = b.input("x", tuple(shape), fp32)
    rev = b.emit("flip", b.emit("cumsum", b.emit("flip", x, axes=(axis,)), axis=axis), axes=(axis,))
    near_one = b.emit("add", b.emit("mul", b.emit("tanh", x), b.constant(0.5, fp32)), b.constant(1.0, fp32))
    program = b.build([b.emit("add", b.emit("cumprod", near_one, axis=axis), rev)])
    kernel = check(program, tmp_path_factory.mktemp("k"), {"CHUNK": chunk}, triton_only=False)
    assert "tl.cumprod(" in kernel.source
    if shape[axis] > chunk:
        assert "* carry" in kernel.source
