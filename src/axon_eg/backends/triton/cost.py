"""The GPU cost model (``TRITON.cost``), which ranks candidates before anything is measured; every number
comes from the hardware description (``data/hw_costs``). Per fusion group, bytes between HBM and the chip (a
matmul re-reads its operands once per output tile column / row unless both fit in L2) and flops (tensor
cores for matmuls, the vector rate otherwise); roofline time ``max(bytes / bandwidth, flops / peak)``
divided by the wave efficiency (programs over SMs times blocks per SM, from shared-memory and register
use), plus one launch per group. What the model needs of a tiling it asks the tiling's tile template
(``extract/templates``): its program count, the output tile of the re-read model, the loads one program
keeps in flight, blocks per SM, scratch traffic and launches (a split-K GEMV: two).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from axon_eg.backends.triton.isa import (
    BLAS_PADK,
    DOT,
    DOT_PERSISTENT,
    DOT_TMA,
    FMA_REDUCE,
    NHWC,
    SDPA,
    WINDOW,
    base,
    is_blas,
    tf32,
    tf32x3,
)
from axon_eg.extract.cost import CostReport, GroupCost, group_traffic, node_bytes
from axon_eg.extract.fusion import LAYOUT, LIBRARY, MATMUL, FusionPlan, is_pool, node_kind, window_reader
from axon_eg.extract.templates import GpuTile, Tile, Tiling, group_dims, knobs, streams
from axon_eg.hw import HardwareSpec
from axon_eg.ir import ops as O
from axon_eg.ir.library_ops import CONV_FAMILIES

from .templates import TEMPLATES, MatmulTile, RowsTile, ScanTile

GROUP_SIZE_M = MatmulTile.GROUP_SIZE_M  # the matmul template's tile-row swizzle (the re-read model reads the tile's)


def gpu_group_cost(plan: FusionPlan, gi: int, t: Tiling | None, hw: HardwareSpec,
                   coefficients: dict[str, float] | None = None, isa: str | None = None,
                   channels_last_kept: bool = False, channels_last_input: bool = False) -> GroupCost:
    """One group's roofline at its tiling and ISA choice. A library GEMM (``blas``) reads its operands
    once and fills the machine (the library tiles and schedules it), at the library's measured rate; a
    Triton ``tl.dot`` on fp32 operands runs at the measured ieee rate (CUDA cores) unless the choice
    carries ``/tf32``."""
    c = {"bytes": 1.0, "flops": 1.0, "launch": 1.0, **(coefficients or {})}
    bw = hw.get("memory.hbm.measured_bandwidth") or hw.value("memory.hbm.bandwidth")
    peak_mm = matmul_peak(plan, gi, hw, isa)
    if is_blas(isa):
        reads = sum(node_bytes(plan, j) for j in plan.inputs_of(gi))
        nbytes = reads + sum(node_bytes(plan, j) for j in plan.outputs_of(gi))
        _, mm, other = group_traffic(plan, gi, None, math.inf)
        launches = 1
        if base(isa) == BLAS_PADK:  # the operands copied once more (read and written), two copies launched
            mm_node = plan.program.nodes[plan.groups[gi].anchor(plan.program)]
            nbytes += 2 * sum(node_bytes(plan, j) for j in mm_node.inputs)
            launches += 4
        roof = max(c["bytes"] * nbytes / bw, c["flops"] * (mm / peak_mm + other / hw.value("compute.peak.fp32")))
        return GroupCost(gi, plan.groups[gi].kind, nbytes, mm + other,
                         roof + c["launch"] * launches * hw.value("costs.launch"))
    tile = TEMPLATES.tile_of(plan, gi, t, hw)
    nbytes, mm, other = group_traffic(plan, gi, tile, hw.value("memory.l2.capacity"), int(hw.value("compute.units")))
    nbytes += extra_passes_bytes(plan, gi, tile, hw)
    if plan.groups[gi].kind == LIBRARY and isa != WINDOW:
        return library_call_cost(plan, gi, hw, nbytes, mm, other, bw, c, isa, channels_last_kept, channels_last_input)
    launches = 1
    if tile is not None:  # split-K: the fp32 partials written and read back, a second launch
        nbytes += tile.scratch_bytes(plan, gi)
        launches = tile.launches
    peak_mm *= short_tile_efficiency(plan, gi, tile, hw, isa)
    efficiency = (latency_efficiency(plan, gi, tile, hw) * cross_warp_efficiency(plan, gi, tile, hw)
                  * row_warp_efficiency(plan, gi, tile, hw) * loop_register_efficiency(plan, gi, tile, hw)
                  * column_run_efficiency(plan, gi, tile, hw) * window_efficiency(plan, gi, tile, hw, isa))
    memory = c["bytes"] * nbytes / (bw * efficiency)
    roof = max(memory, c["flops"] * (mm / peak_mm + other / hw.value("compute.peak.fp32")))
    seconds = (roof / wave_efficiency(plan, gi, tile, hw, hw.value("compute.units"))
               + c["launch"] * launches * hw.value("costs.launch") + right_copy_seconds(plan, gi, hw, isa))
    return GroupCost(gi, plan.groups[gi].kind, nbytes, mm + other, seconds)


def library_call_cost(plan: FusionPlan, gi: int, hw: HardwareSpec, nbytes: float, mm: float, other: float,
                       bw: float, c: dict[str, float], isa: str | None = None, kept: bool = False,
                       chained: bool = False) -> GroupCost:
    """A library group run as torch's op (conv, or pooling with ISA choice ``library``) then our epilogue
    kernel: the library's output is written and read back once more where an epilogue follows, two
    launches; a pooling moves its bytes at torch's measured pooling rate (``memory.library_pool_bandwidth``).
    A conv on channels-last operands (``library+nhwc``) runs at the library's channels-last rate and pays
    our transpose of its input (read and written once more, one launch), and without an epilogue (which
    transposes back as it reads) one of its output, unless the next group's window kernel reads it as it is
    (``kept``, ``fusion.window_reader``), and the input's transpose unless the previous channels-last conv's
    epilogue stored it so (``chained``, :func:`channels_last_chained`). Those passes run as kernels of their
    own, so their time adds to the library op's, whose bytes and arithmetic overlap."""
    program = plan.program
    g = plan.groups[gi]
    lib = next(n for n in g.nodes if node_kind(program.nodes[n].op) == LIBRARY)
    tail = any(n != lib and program.nodes[n].op not in O.flat_views() and n not in plan.feeding(gi, lib)
               for n in g.nodes)
    extra = 2 * node_bytes(plan, lib) if tail else 0.0
    launches = 2 if tail else 1
    if isa == NHWC:
        back = not tail and not kept  # ``kept``: the next group's window kernel reads the output channels-last
        extra += (0.0 if chained else 2 * node_bytes(plan, program.nodes[lib].inputs[0])) + \
            (2 * node_bytes(plan, lib) if back else 0.0)
        launches += int(back) + int(not chained)
    pool = is_pool(program.nodes[lib].op)
    rate = (hw.get("memory.library_pool_bandwidth") or bw) if pool else bw
    # the library op's bytes hide under its arithmetic (or the other way round); the epilogue's pass over its
    # output and the channels-last transposes are kernels of their own, run after or before it
    seconds = max(c["bytes"] * nbytes / rate,
                  c["flops"] * (mm / library_op_peak(plan, gi, lib, hw, isa) + other / hw.value("compute.peak.fp32")))
    seconds += c["bytes"] * extra / bw
    return GroupCost(gi, g.kind, nbytes + extra, mm + other, seconds + c["launch"] * launches * hw.value("costs.launch"))


def library_op_peak(plan: FusionPlan, gi: int, lib: int, hw: HardwareSpec, isa: str | None = None) -> float:
    """The rate of the library op ``lib`` (a convolution): on fp32 operands the library's measured conv rate
    (``compute.measured_peak.library_conv_fp32``: TF32 tensor cores, about a seventh of the 16-bit GEMM rate;
    a grouped conv or transposed conv ``library_conv_grouped_fp32``; on channels-last operands, ISA choice
    ``library+nhwc``, the ``library_conv_nhwc_*`` ones), else the group's matmul rate. (A grouped transposed
    conv at the plain rate was predicted 817 us where v10 measured 1467, issue 18 run 5.)"""
    program = plan.program
    node = program.nodes[lib]
    family = O.get(node.op).meta.get("shape_family")
    if family in CONV_FAMILIES and program.nodes[node.inputs[0]].dtype.name == "fp32":
        grouped = node.attrs.get("groups", 1) > 1
        layout = "_nhwc" if isa == NHWC else ""
        rate = (grouped and hw.get(f"compute.measured_peak.library_conv{layout}_grouped_fp32")
                or hw.get(f"compute.measured_peak.library_conv{layout}_fp32"))
        if rate:
            return rate
    return matmul_peak(plan, gi, hw, None)


def matmul_peak(plan: FusionPlan, gi: int, hw: HardwareSpec, isa: str | None) -> float:
    """The matmul rate of group ``gi``: 16-bit operands on tensor cores (the measured library rate, which
    the persistent Triton kernel reaches; the non-persistent ones at their measured rates), fp32 at the
    library's ieee rate (``blas``), Triton's ieee rate (pointer loads; far lower with TMA loads), or TF32
    (``/tf32``); the library's measured rate off its row alignment where its rows are
    (``library_misaligned``); the library's attention (``sdpa``) at its own measured rate; a 16-bit Triton
    matmul whose K loop computes an operand (a fused prologue) at most at its measured rate."""
    program = plan.program
    anchor = program.nodes[plan.groups[gi].anchor(program)]
    fp32 = anchor.kind is O.OpKind.CONTRACTION and program.nodes[anchor.inputs[0]].dtype.name == "fp32"
    if is_blas(isa) and any(library_misaligned(plan, gi, hw, padded=base(isa) == BLAS_PADK)):
        slow = hw.get("compute.measured_peak.library_unaligned")
        if slow:
            return slow
    if not is_blas(isa) and base(isa) != FMA_REDUCE and not fp32:
        off = misaligned_operands(plan, gi, hw)
        slow = hw.get(f"compute.measured_peak.dot_misaligned_{('one', 'two')[min(off, 2) - 1]}") if off else None
        if slow:
            return slow
    if base(isa) == SDPA:  # the library's attention: its own measured rate (fp32: CUDA cores, no TF32)
        rate = hw.get(f"compute.measured_peak.library_attention_{'fp32' if fp32 else 'bf16'}")
        if rate:
            return rate
    if not fp32:
        library = hw.get("compute.measured_peak.bf16") or hw.value("compute.peak.bf16")
        ours = {DOT: "bf16_dot", DOT_TMA: "bf16_dot_tma"}.get(base(isa) or "")  # Triton below the library
        rate = (hw.get(f"compute.measured_peak.{ours}") if ours else None) or library
        if not is_blas(isa) and anchor.kind is O.OpKind.CONTRACTION and computed_operand(plan, gi):
            rate = min(rate, hw.get("compute.measured_peak.bf16_dot_prologue") or rate)
        return rate
    if tf32(isa):
        return (hw.get("compute.measured_peak.tf32") or hw.get("compute.peak.tf32")
                or hw.value("compute.peak.fp32"))
    if tf32x3(isa):  # three TF32 products per term, the right operand with K contiguous (copied so if need be)
        key = "fp32_dot_tma_3xtf32" if base(isa) in (DOT_TMA, DOT_PERSISTENT) else "fp32_dot_3xtf32"
        return hw.get(f"compute.measured_peak.{key}") or (hw.get("compute.peak.tf32") or hw.value("compute.peak.fp32")) / 3
    if is_blas(isa):
        return hw.get("compute.measured_peak.fp32") or hw.value("compute.peak.fp32")
    if base(isa) in (DOT_TMA, DOT_PERSISTENT) and hw.get("compute.measured_peak.fp32_dot_tma"):
        return hw.get("compute.measured_peak.fp32_dot_tma")
    return hw.get("compute.measured_peak.fp32_dot") or hw.value("compute.peak.fp32")


def right_k_major(plan: FusionPlan, gi: int) -> bool:
    """Whether the right operand of the matmul of group ``gi`` is read with K contiguous: stored N x K and
    read through a transpose (a ``linear`` weight), or K or N of 1. Views inside the group are followed to
    what they read; a transpose of the last two dims flips the order; a computed operand, or a view another
    group materialises, counts as stored row-major."""
    program = plan.program
    anchor = program.nodes[plan.groups[gi].anchor(program)]
    if anchor.kind is not O.OpKind.CONTRACTION:
        return False
    inside = set(plan.groups[gi].nodes)

    def flipped(j: int) -> bool | None:
        flips = False
        while j in inside and (program.nodes[j].op in O.flat_views() or program.nodes[j].op == "transpose"):
            node = program.nodes[j]
            if node.op == "transpose":
                perm = tuple(node.attrs["perm"])
                if perm[-2:] == (len(perm) - 1, len(perm) - 2):
                    flips = not flips
                elif perm[-1] != len(perm) - 1:
                    return None  # a permutation moving the last dim elsewhere: neither order
            j = node.inputs[0]
        return flips

    if 1 in tuple(program.concrete_shape(anchor.inputs[1]))[-2:]:
        return True  # one row or one column: both orders are the same memory
    return flipped(anchor.inputs[1]) is True


def right_copy_seconds(plan: FusionPlan, gi: int, hw: HardwareSpec, isa: str | None) -> float:
    """The transposed copy of the right operand a ``/3xtf32`` matmul reads where it is stored K x N
    (``matmul._with_right_copy``): the operand read and written once more, one launch."""
    if not tf32x3(isa) or plan.groups[gi].kind != MATMUL or right_k_major(plan, gi):
        return 0.0
    anchor = plan.program.nodes[plan.groups[gi].anchor(plan.program)]
    bw = hw.get("memory.hbm.measured_bandwidth") or hw.value("memory.hbm.bandwidth")
    return 2 * node_bytes(plan, anchor.inputs[1]) / bw + hw.value("costs.launch")


def computed_operand(plan: FusionPlan, gi: int) -> bool:
    """Whether the matmul of group ``gi`` multiplies an operand its K loop computes (an element-wise or
    row-statistic prologue: rmsnorm, layernorm, an activation of x), not one it loads as stored."""
    program = plan.program
    anchor = plan.groups[gi].anchor(program)
    return any(node_kind(program.nodes[j].op) not in (None, LAYOUT) for j in plan.feeding(gi, anchor))


def misaligned_operands(plan: FusionPlan, gi: int, hw: HardwareSpec) -> int:
    """How many operands the matmul of group ``gi`` loads from a buffer whose rows are not a multiple of
    ``memory.library_row_alignment`` bytes (through the views and layout ops inside the group; an operand
    computed inside is not loaded): such rows cannot be read with 16-byte vector loads. 0 where the
    hardware file names no alignment."""
    align = hw.get("memory.library_row_alignment")
    program = plan.program
    group = plan.groups[gi]
    anchor = program.nodes[group.anchor(program)]
    if not align or anchor.kind is not O.OpKind.CONTRACTION:
        return 0
    inside = set(group.nodes)
    count = 0
    for j in anchor.inputs:
        while j in inside and (O.is_view(program.nodes[j].op) or node_kind(program.nodes[j].op) == LAYOUT):
            j = program.nodes[j].inputs[0]
        if j in inside or program.nodes[j].is_constant:
            continue
        last = program.concrete_shape(j)[-1] if program.concrete_shape(j) else 1
        count += last > 1 and (last * program.nodes[j].dtype.itemsize) % align != 0
    return count


def library_misaligned(plan: FusionPlan, gi: int, hw: HardwareSpec, padded: bool = False) -> tuple[bool, bool]:
    """Whether the library GEMM of matmul group ``gi`` reads rows off its alignment
    (``memory.library_row_alignment``, bytes): ``(k, n)``, K * itemsize (the rows of the operands with K
    contiguous) and N * itemsize (the output's rows, and the right operand's when it is stored K x N). With
    ``padded`` (``blas+padk``: both operands copied with K contiguous and zero-padded) only the output's rows
    count. (False, False) where the hardware file names no alignment."""
    align = hw.get("memory.library_row_alignment")
    program = plan.program
    anchor = program.nodes[plan.groups[gi].anchor(program)]
    if not align or anchor.kind is not O.OpKind.CONTRACTION:
        return False, False
    size = program.nodes[anchor.inputs[0]].dtype.itemsize
    k, n = program.concrete_shape(anchor.inputs[1])[-2:]
    return (not padded and (k * size) % align != 0), (n * size) % align != 0


def gpu_cost(plan: FusionPlan, tilings: Sequence[Tiling | None], hw: HardwareSpec,
             coefficients: dict[str, float] | None = None, isa: dict[int, str] | None = None) -> CostReport:
    """The plan's predicted seconds per call: the sum of its groups' (``gpu_group_cost``). A group of the
    parameters alone (``FusionPlan.static_groups``: a gain folded into a weight, a transposed weight) costs
    nothing: the launcher computes it once per version of those parameters and keeps it (``emit._launcher``);
    its entry stays in the report, at zero bytes, flops and seconds."""
    isa = isa or {}
    # a channels-last conv whose output the next group's window kernel reads as it is: not transposed back
    kept = {gi for gi, choice in isa.items() if choice == NHWC and (r := window_reader(plan, gi)) is not None
            and isa.get(r) == WINDOW}
    chained = channels_last_chained(plan, isa)
    static = plan.static_groups()
    groups = [GroupCost(gi, plan.groups[gi].kind, 0.0, 0.0, 0.0) if gi in static else
              memo_group_cost(plan, gi, tilings[gi] if gi < len(tilings) else None, hw, coefficients, isa.get(gi),
                              gi in kept, gi in chained)
              for gi in range(len(plan.groups))]
    return CostReport(sum(g.seconds for g in groups), groups)


def channels_last_chained(plan: FusionPlan, isa: dict[int, str]) -> set[int]:
    """The channels-last conv groups whose input the previous channels-last conv group's epilogue stores
    channels-last (``emit._chain_channels_last``): that group's outputs are read by nothing but such convs,
    each as its input, and the epilogues of such convs after it, and none is an output of the program."""
    program = plan.program
    users = program.users()
    owner = plan.group_of()
    convs = {next(n for n in plan.groups[gi].nodes if node_kind(program.nodes[n].op) == LIBRARY): gi
             for gi, choice in isa.items() if choice == NHWC and plan.groups[gi].kind == LIBRARY}
    out: set[int] = set()
    for conv, gj in convs.items():
        gi = owner.get(program.nodes[conv].inputs[0])
        if gi is None or gi == gj or gi not in convs.values():
            continue
        outs = plan.outputs_of(gi)
        if any(o in program.outputs for o in outs) or not all(
                program.nodes[u].inputs[0] == o and o not in program.nodes[u].inputs[1:] if u in convs
                else owner.get(u, -1) > gi and owner[u] in convs.values()  # another such conv's epilogue
                for o in outs for u in users[o]):
            continue
        out.add(gj)
    return out


def memo_group_cost(plan: FusionPlan, gi: int, t: Tiling | Tile | None, hw: HardwareSpec,
                     coefficients: dict[str, float] | None, isa: str | None, kept: bool,
                     chained: bool = False) -> GroupCost:
    """``gpu_group_cost``, memoized on the plan (``FusionPlan.memo``) per hardware spec object: a group's cost
    depends on the plan, the group, its tiling's values (and template), the ISA choice and the coefficients."""
    store = plan.memo.get(("gpu_group_cost", id(hw)))
    if store is None or store[0] is not hw:  # keyed by identity: a spec object is not compared by its values
        store = plan.memo[("gpu_group_cost", id(hw))] = (hw, {})
    tk = t if t is None or isinstance(t, Tile) else (t.values, type(t.typed) if t.typed is not None else None)
    key = (gi, tk, isa, kept, chained, tuple(sorted(coefficients.items())) if coefficients else None)
    got = store[1].get(key)
    if got is None:
        got = store[1][key] = gpu_group_cost(plan, gi, t, hw, coefficients, isa, channels_last_kept=kept,
                                             channels_last_input=chained)
    return got


def short_tile_efficiency(plan: FusionPlan, gi: int, tile: Tile | None, hw: HardwareSpec, isa: str | None) -> float:
    """A tensor-core ``tl.dot`` tile of fewer than ``costs.tensor_core_min_rows`` rows (Hopper's wgmma takes 64
    rows per warpgroup; Triton falls back to smaller instructions) runs at that fraction of the rate, where
    the matmul has the rows for a full tile (a skinny matmul's every tiling pays alike). fp32 FMAs (no
    suffix on fp32 operands) are not charged."""
    rows = hw.get("costs.tensor_core_min_rows")
    if rows is None or not isinstance(tile, MatmulTile) or is_blas(isa) or base(isa) == FMA_REDUCE:
        return 1.0
    program = plan.program
    anchor = program.nodes[plan.groups[gi].anchor(program)]
    if anchor.kind is not O.OpKind.CONTRACTION:
        return 1.0
    if program.nodes[anchor.inputs[0]].dtype.name == "fp32" and not (tf32(isa) or tf32x3(isa)):
        return 1.0
    m = program.concrete_shape(anchor.inputs[0])[-2]
    if m < rows or tile.BLOCK_M >= rows:
        return 1.0
    return tile.BLOCK_M / float(rows)


def _resident(tile: GpuTile, programs: int, hw: HardwareSpec) -> int:
    """Programs one SM runs at once (Hopper: at most 64 warps and 32 blocks)."""
    per_sm = min(int(hw.value("compute.max_blocks_per_sm")), int(hw.value("compute.max_warps_per_sm")) // max(1, tile.num_warps))
    return max(1, min(per_sm, math.ceil(programs / hw.value("compute.units"))))


def latency_efficiency(plan: FusionPlan, gi: int, tile: Tile | None, hw: HardwareSpec) -> float:
    """Little's law for memory-bound groups: the bandwidth reached is the bytes in flight per SM over
    the memory latency, so a tiling that keeps too few loads in flight (small blocks, few resident
    programs) cannot reach the roofline. 1.0 for the tiles the model treats as compute-bound (matmuls,
    attention; ``Tile.in_flight`` None) or when the hardware file lacks the facts."""
    if tile is None or hw.get("costs.hbm_latency") is None or hw.get("compute.max_warps_per_sm") is None:
        return 1.0
    flight = tile.in_flight(plan, gi)
    if flight is None or not isinstance(tile, GpuTile):
        return 1.0
    per_iter, n_streams, item = flight
    per_iter *= max(1, window_taps(plan, gi))  # a pooling window's element loads each of its positions
    in_flight = _resident(tile, tile.programs(plan, gi), hw) * per_iter * item * n_streams
    bw = hw.get("memory.hbm.measured_bandwidth") or hw.value("memory.hbm.bandwidth")
    need = bw * hw.value("costs.hbm_latency") / hw.value("compute.units")
    return max(1e-3, min(1.0, in_flight / need))


def reduced_axis_warps(tile: RowsTile, item: int) -> int:
    """Warps one row of a column reduction's tile is spread over. The tile is ``ROWS_PER_PROGRAM`` contiguous
    output elements x ``BLOCK_N`` reduced columns; Triton's coalesced layout puts 16-byte vectors and then
    the 32 threads of a warp along the contiguous rows, and the warps along the rows while they last, the
    rest along the reduced axis: those combine their partials through shared memory behind a barrier."""
    vec = max(1, 16 // item)
    along_rows = max(1, tile.ROWS_PER_PROGRAM // (vec * 32))
    return max(1, tile.num_warps // min(tile.num_warps, along_rows))


def cross_warp_efficiency(plan: FusionPlan, gi: int, tile: Tile | None, hw: HardwareSpec) -> float:
    """A one-pass column reduction (the whole reduced axis in one block, one tile per program) whose
    reductions depend on each other (a log-softmax's max, then its sum; ``FusionPlan.row_passes`` >= 2)
    waits on each level's shared-memory combine and barrier with nothing to overlap them: past
    ``costs.column_reduction_warps`` warps along the reduced axis its bandwidth falls in proportion
    (measured on the H200: a soft cross-entropy over 19 classes, 254 us at 2 warps along them, 420-450 at
    4, 1380-1410 at 8, 2744 at 16). One level of reductions is not charged (an L2 normalization over 67
    rows ran fastest with all 16 warps along them, 473 us, against 547 at 8 and 929 at 2), nor a chunk
    loop, which combines once after many chunks."""
    limit = hw.get("costs.column_reduction_warps")
    if not isinstance(tile, RowsTile) or limit is None or plan.row_passes(gi, chunked=False) < 2:
        return 1.0
    d = group_dims(plan, gi)
    if d.get("INNER", 1) <= 1 or tile.row_block(d["COLS"]) < d["COLS"]:
        return 1.0
    _, item = streams(plan, gi)
    return min(1.0, float(limit) / reduced_axis_warps(tile, item))


def row_warp_efficiency(plan: FusionPlan, gi: int, tile: Tile | None, hw: HardwareSpec) -> float:
    """A one-pass row reduction (the whole row in one block) whose reductions depend on each other
    (``FusionPlan.row_passes`` >= 2: a cosine similarity's norms, then the sum of the normalized products)
    waits at each level on the cross-warp combine of all its warps: past ``costs.row_reduction_warps`` its
    bandwidth falls as ``(that / num_warps) ** costs.row_reduction_warps_exponent`` (the hardware file's fit).
    A chunk loop combines once after many chunks and a column reduction is :func:`cross_warp_efficiency`'s."""
    limit, exponent = hw.get("costs.row_reduction_warps"), hw.get("costs.row_reduction_warps_exponent")
    if not isinstance(tile, RowsTile) or limit is None or exponent is None or plan.row_passes(gi, chunked=False) < 2:
        return 1.0
    d = group_dims(plan, gi)
    if d.get("INNER", 1) > 1 or tile.row_block(d["COLS"]) < d["COLS"]:
        return 1.0
    return min(1.0, float(limit) / tile.num_warps) ** float(exponent)


def loop_vectors(plan: FusionPlan, gi: int) -> int:
    """[ROWS, BLOCK_N] accumulators the sibling pass of a chunked row reduction carries from chunk to chunk:
    one per sibling reduction, two more (count, sum of squared deviations) per Welford pair, one more (the
    running sum) per online (max, exp-sum) pair."""
    return max(1, len(plan.sibling_reductions(gi)) + 2 * len(plan.welford_pairs(gi)) + len(plan.online_pairs(gi)))


def loop_register_efficiency(plan: FusionPlan, gi: int, tile: Tile | None, hw: HardwareSpec) -> float:
    """A chunked row reduction keeps its accumulators (:func:`loop_vectors` of them, ``ROWS * BLOCK_N /
    threads`` registers each) live across the chunk loop: past ``costs.loop_accumulator_registers`` per thread
    fewer programs fit an SM and each iteration's loads wait with nothing to overlap them; the bandwidth falls as
    ``(that / registers) ** costs.loop_accumulator_exponent`` (the hardware file's fit to the H200's sweeps of
    group and instance norms: their Welford pass at 4 elements per thread ran 1.9x faster than at 16)."""
    limit, exponent = hw.get("costs.loop_accumulator_registers"), hw.get("costs.loop_accumulator_exponent")
    if not isinstance(tile, RowsTile) or limit is None or exponent is None:
        return 1.0
    d = group_dims(plan, gi)
    if tile.row_block(d["COLS"]) >= d["COLS"]:
        return 1.0
    threads = tile.num_warps * knobs(hw).warp_size
    registers = tile.ROWS_PER_PROGRAM * tile.row_block(d["COLS"]) / threads * loop_vectors(plan, gi)
    return min(1.0, float(limit) / registers) ** float(exponent)


def column_run_efficiency(plan: FusionPlan, gi: int, tile: Tile | None, hw: HardwareSpec) -> float:
    """A column reduction's program reads (and for a full-width output writes) ``ROWS_PER_PROGRAM``
    contiguous elements per reduced index, one short run per DRAM row it touches: below
    ``costs.column_run_bytes`` per run the bandwidth of its reads falls as ``(run / column_run_bytes) **
    costs.column_run_read_exponent`` and that of its writes as ``** costs.column_run_write_exponent`` (the
    hardware file's fit to the H200's sweeps: short written runs cost far more than short read ones). The
    group's bytes weighted so: ``(R + W) / (R / read + W / write)``. 1.0 for row reductions."""
    full = hw.get("costs.column_run_bytes")
    exps = hw.get("costs.column_run_read_exponent"), hw.get("costs.column_run_write_exponent")
    if not isinstance(tile, RowsTile) or full is None or None in exps:
        return 1.0
    inner = group_dims(plan, gi).get("INNER", 1)
    if inner <= 1:
        return 1.0
    _, item = streams(plan, gi)
    ratio = min(1.0, min(tile.ROWS_PER_PROGRAM, inner) * item / float(full))
    read, write = (ratio ** float(e) for e in exps)
    written = sum(node_bytes(plan, o) for o in plan.outputs_of(gi))
    total = sum(node_bytes(plan, j) for j in plan.inputs_of(gi)) + written
    return total / ((total - written) / read + written / write) if total > 0 else 1.0


def window_taps(plan: FusionPlan, gi: int) -> int:
    """The most window positions one output element of the group's pooling windows reads (0: no window)."""
    program = plan.program
    taps = [math.prod(program.nodes[n].attrs["kernel_size"]) for n in plan.groups[gi].nodes
            if is_pool(program.nodes[n].op)]
    return max(taps, default=0)


def window_efficiency(plan: FusionPlan, gi: int, tile: Tile | None, hw: HardwareSpec, isa: str | None) -> float:
    """Pooling windows computed by our kernel (``window``): every output element gathers its window's
    positions, each a load of its own; past ``costs.window_loads_per_thread`` loads per thread (window
    positions x elements per thread) the loads no longer stay in flight together and the bandwidth falls to
    ``1 / costs.window_overflow_slowdown`` (measured on the H200: a 3x3 max pool at 1-2 elements per thread
    241-259 us, at 4-16 455-487 us; a 3x3x3 one at 1 element 366 us, at 4-16 690-926 us)."""
    limit, slowdown = hw.get("costs.window_loads_per_thread"), hw.get("costs.window_overflow_slowdown")
    if isa != WINDOW or limit is None or slowdown is None or not isinstance(tile, GpuTile) or not hasattr(tile, "BLOCK"):
        return 1.0
    per_thread = max(1.0, tile.BLOCK / (tile.num_warps * knobs(hw).warp_size))
    return 1.0 if window_taps(plan, gi) * per_thread <= float(limit) else 1.0 / float(slowdown)


def extra_passes_bytes(plan: FusionPlan, gi: int, tile: Tile | None, hw: HardwareSpec) -> float:
    """A row reduction whose row does not fit one block reads its rows once per pass (``row_passes``: the
    sibling reductions share one), and once more to store full-width outputs: all passes after the first are
    extra; they come from L2 when the rows in flight fit it, else from HBM. A column reduction's passes come
    from HBM whatever its tile (its short runs strided across the tensor do not stay in L2: on the H200 an
    RMSNorm over 320 channels chunked by 32-256 ran 610-1090 us whose rows in flight fit half the L2, 568 us
    at best, the time of every pass from HBM; a softmax entropy over 151 classes likewise). A split scan
    (``ScanTile.SPLIT``) reads its input twice, once to fold each segment and once to sweep it."""
    if isinstance(tile, ScanTile) and tile.SPLIT > 1:  # a split scan reads its line twice: fold, then sweep
        n_streams, item = streams(plan, gi)
        return float(math.prod(plan.program.concrete_shape(plan.groups[gi].anchor(plan.program))) * item * n_streams)
    if not isinstance(tile, RowsTile) or hw.get("compute.max_warps_per_sm") is None:
        return 0.0
    cols = group_dims(plan, gi)["COLS"]
    if tile.row_block(cols) >= cols:
        return 0.0
    program = plan.program
    reductions = plan.row_passes(gi)
    n_streams, item = streams(plan, gi)
    rows_in_flight = _resident(tile, tile.programs(plan, gi), hw) * hw.value("compute.units") * tile.ROWS_PER_PROGRAM
    column = group_dims(plan, gi).get("INNER", 1) > 1
    rows = group_dims(plan, gi)["ROWS"]
    full = any(math.prod(program.concrete_shape(o)) == rows * cols for o in plan.outputs_of(gi))
    # a split's second launch reads its slice again after the whole tensor went through the first: from HBM
    resident = not column and not (tile.SPLIT > 1 and full)
    if resident and rows_in_flight * cols * item * n_streams <= hw.value("memory.l2.capacity") / 2:
        return 0.0
    return float((reductions - 1 + full) * rows * cols * item * n_streams)


def wave_efficiency(plan: FusionPlan, gi: int, tile: Tile | None, hw: HardwareSpec, units: float) -> float:
    """Useful fraction of the last wave: programs / (waves * slots), slots = SMs * blocks per SM. Below
    four waves for every kernel; at any wave count for a matmul's output tiles, each of which is seconds of
    tensor-core work, so the idle SMs of the last wave cost a whole tile's time however many waves precede
    it (a persistent kernel walks the same tiles: measured on an H200, the SwiGLU up projection 2048 x 11008
    x 4096 in 128 x 256 tiles, 688 tiles over 132 SMs, 5.2 waves, ran 292 us where cuBLAS ran 237 us,
    ``benchmarks/results/2026-12-06-issue21-llama/earlier/previous-cost-model/profile-h200.txt``)."""
    programs = tile.programs(plan, gi) if tile is not None else 1
    per_sm = tile.blocks_per_sm(hw) if tile is not None else 1
    slots = units * per_sm
    waves = math.ceil(programs / slots)
    tiles = isinstance(tile, MatmulTile)
    return max(1e-3, programs / (waves * slots)) if programs < slots * 4 or tiles else 1.0


def group_seconds(plan: FusionPlan, gi: int, t: Tiling | None, hw: HardwareSpec) -> float:
    """A group's predicted seconds alone, for ranking its tilings (``TRITON.group_cost``). A library group's
    tiling matters only to its ``window`` choice (pooling computed by our kernel): its tilings are ranked at
    that choice."""
    isa = WINDOW if window_taps(plan, gi) else None
    return memo_group_cost(plan, gi, t, hw, None, isa, False).seconds
