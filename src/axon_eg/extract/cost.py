"""Cost models that rank Candidates before anything is measured. Every number comes from the
hardware description (``data/hw_costs``); calibration fits per-target coefficients on measurements.

GPU: per fusion group, bytes between HBM and the chip (a matmul re-reads its operands once per
output tile column / row unless both fit in L2) and flops (tensor cores for matmuls, the vector
rate otherwise); roofline time ``max(bytes / bandwidth, flops / peak)`` divided by the wave
efficiency (programs over SMs times blocks per SM, from shared-memory and register use), plus one
launch per group. What the model needs of a tiling it asks the tiling's tile template
(``extract/templates``): its program count, the output tile of the re-read model, the loads one
program keeps in flight, blocks per SM, scratch traffic and launches (a split-K GEMV: two).

Trainium: a timeline over the engine queues (DMA in, DMA out, Tensor, Vector, Scalar, GpSimd). Each group
becomes DMA-in, compute and DMA-out work items; a work item starts when its engine is free and its
inputs are done, so independent branches overlap (RMSNorm's reduction on the Vector engine while a
matmul runs on the Tensor engine). A work item's seconds are the declared latency model
(``semantics/isa/declarations.py``, evaluated by ``extract/latency.py``) of the instruction it runs as,
on its engine: ``load``/``store`` for the DMAs, ``nc_matmul`` per tile for the matmul, and per node
``activation`` (Scalar), ``tensor_reduce`` or ``tensor_scalar`` (Vector) -- see ``_instruction``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from axon_eg.hw import HardwareSpec
from axon_eg.ir import ops as O
from axon_eg.ir.library_ops import CONV_FAMILIES
from axon_eg.ir.program import Program
from axon_eg.semantics.isa.declarations import DMA, TENSOR, declaration

from .fusion import ATTENTION, LAYOUT, LIBRARY, MATMUL, REDUCTION, FusionPlan, is_pool, node_kind, window_producers, window_reader
from .isa import BLAS_PADK, DOT, DOT_PERSISTENT, DOT_TMA, FMA_REDUCE, NHWC, SDPA, WINDOW, base, is_blas, tf32, tf32x3
from .latency import engine_seconds, model_cycles, model_seconds
from .templates import GpuTile, MatmulTile, RowsTile, Tile, Tiling, TrnMatmulTile, group_dims, knobs, streams, tile_of

GROUP_SIZE_M = MatmulTile.GROUP_SIZE_M  # the matmul template's tile-row swizzle (the re-read model reads the tile's)


@dataclass(frozen=True)
class GroupCost:
    group: int
    kind: str
    bytes: float
    flops: float
    seconds: float
    engine: str = ""  # trainium: the compute engine


@dataclass(frozen=True)
class Interval:
    engine: str
    start: float
    end: float
    label: str


@dataclass
class CostReport:
    seconds: float
    groups: list[GroupCost]
    timeline: list[Interval] = field(default_factory=list)

    @property
    def bytes(self) -> float:
        return sum(g.bytes for g in self.groups)

    @property
    def flops(self) -> float:
        return sum(g.flops for g in self.groups)


def _nbytes(plan: FusionPlan, node: int) -> float:
    n = plan.program.nodes[node]
    if n.op == "constant":
        return 0.0
    return float(math.prod(plan.program.concrete_shape(node)) * n.dtype.itemsize)


def _conv_flops(program: Program, i: int, family: str) -> float:
    """A convolution's multiply-adds, as the νGraph's cost counts them (``egraph.schema._FLOPS``): 2 per output
    element (conv) or per input element (conv_transpose) per weight element of one output (input) channel."""
    node = program.nodes[i]
    w = program.concrete_shape(node.inputs[1])
    per = math.prod(w) / max(1, w[0])
    elems = math.prod(program.concrete_shape(i) if family == "conv" else program.concrete_shape(node.inputs[0]))
    return 2.0 * elems * per


def group_traffic(plan: FusionPlan, gi: int, tiling: Tiling | None, l2_bytes: float,
                  wave: int = 1, hw: HardwareSpec | None = None) -> tuple[float, float, float]:
    """(HBM bytes, matmul flops, other flops) of one group. ``wave``: programs running at once; ``hw``
    reads a tiling built by hand (``templates.tile_of``)."""
    program = plan.program
    reads = [_nbytes(plan, j) for j in plan.inputs_of(gi)]
    writes = sum(_nbytes(plan, j) for j in plan.outputs_of(gi))
    mm_flops = other = 0.0
    recomputed = window_producers(plan, gi)  # computed again at every window position of each pooled output
    per_window = max((math.prod(program.nodes[p].attrs["kernel_size"]) * math.prod(program.concrete_shape(p))
                      for p in plan.groups[gi].nodes if is_pool(program.nodes[p].op)), default=0)
    for i in plan.groups[gi].nodes:
        n = program.nodes[i]
        out = per_window if i in recomputed else math.prod(program.concrete_shape(i))
        kind = node_kind(n.op)
        if n.op == "matmul":
            k = program.concrete_shape(n.inputs[0])[-1]
            mm_flops += 2.0 * out * k
        elif (family := O.get(n.op).meta.get("shape_family")) in CONV_FAMILIES:
            mm_flops += _conv_flops(program, i, family)
        elif kind in (REDUCTION,) or O.get(n.op).kind is O.OpKind.SCAN:
            other += math.prod(program.concrete_shape(n.inputs[0]))
        elif kind is not None and kind != LAYOUT:
            other += out
    if plan.groups[gi].kind == ATTENTION:  # key blocks past a causal diagonal are skipped, not computed
        mm_flops *= _causal_fraction(plan, gi)
    total_read = sum(reads)
    tile = tile_of(plan, gi, tiling, hw) if mm_flops and total_read > l2_bytes else None
    out_tile = tile.traffic_tile() if tile is not None else None
    if out_tile is not None:
        # Operands larger than L2: with the GROUP_SIZE_M swizzle a wave of programs covers `rows` tile
        # rows by `cols` tile columns, and L2 keeps what one wave reads; A is read once per band of
        # `cols` tile columns, B once per band of `rows` tile rows.
        anchor = program.nodes[plan.groups[gi].anchor(program)]
        a, b = (program.concrete_shape(j) for j in anchor.inputs)
        bm, bn, group_size_m = out_tile
        a_bytes = math.prod(a) * program.nodes[anchor.inputs[0]].dtype.itemsize
        b_bytes = math.prod(b) * program.nodes[anchor.inputs[1]].dtype.itemsize
        tile_rows, tile_cols = math.ceil(a[-2] / bm), math.ceil(b[-1] / bn)
        rows = min(tile_rows, group_size_m)
        cols = max(1, math.ceil(max(1, wave) / rows))
        total_read += a_bytes * (math.ceil(tile_cols / cols) - 1) + b_bytes * (math.ceil(tile_rows / rows) - 1)
    return total_read + writes, mm_flops, other


def _causal_fraction(plan: FusionPlan, gi: int) -> float:
    """The fraction of an attention group's (query, key) pairs a causal mask filled with -inf keeps (key
    j <= query i + diagonal): the flash kernel and the library skip the rest; 1 without such a mask."""
    program = plan.program
    for n in plan.groups[gi].nodes:
        node = program.nodes[n]
        if node.op == "causal_mask" and float(node.attrs.get("fill", 0.0)) == -math.inf:
            s, t = program.concrete_shape(n)[-2:]
            kept = np.clip(np.arange(s) + int(node.attrs.get("diagonal", 0)) + 1, 0, t).sum()
            return float(kept) / (s * t) if s * t else 1.0
    return 1.0


def gpu_group_cost(plan: FusionPlan, gi: int, t: Tiling | None, hw: HardwareSpec,
                   coefficients: dict[str, float] | None = None, isa: str | None = None,
                   channels_last_kept: bool = False) -> GroupCost:
    """One group's roofline at its tiling and ISA choice. A library GEMM (``blas``) reads its operands
    once and fills the machine (the library tiles and schedules it), at the library's measured rate; a
    Triton ``tl.dot`` on fp32 operands runs at the measured ieee rate (CUDA cores) unless the choice
    carries ``/tf32``."""
    c = {"bytes": 1.0, "flops": 1.0, "launch": 1.0, **(coefficients or {})}
    bw = hw.get("memory.hbm.measured_bandwidth") or hw.value("memory.hbm.bandwidth")
    peak_mm = _matmul_peak(plan, gi, hw, isa)
    if is_blas(isa):
        reads = sum(_nbytes(plan, j) for j in plan.inputs_of(gi))
        nbytes = reads + sum(_nbytes(plan, j) for j in plan.outputs_of(gi))
        _, mm, other = group_traffic(plan, gi, None, math.inf)
        launches = 1
        if base(isa) == BLAS_PADK:  # the operands copied once more (read and written), two copies launched
            mm_node = plan.program.nodes[plan.groups[gi].anchor(plan.program)]
            nbytes += 2 * sum(_nbytes(plan, j) for j in mm_node.inputs)
            launches += 4
        roof = max(c["bytes"] * nbytes / bw, c["flops"] * (mm / peak_mm + other / hw.value("compute.peak.fp32")))
        return GroupCost(gi, plan.groups[gi].kind, nbytes, mm + other,
                         roof + c["launch"] * launches * hw.value("costs.launch"))
    tile = tile_of(plan, gi, t, hw)
    nbytes, mm, other = group_traffic(plan, gi, t, hw.value("memory.l2.capacity"), int(hw.value("compute.units")), hw)
    nbytes += _extra_passes_bytes(plan, gi, tile, hw)
    if plan.groups[gi].kind == LIBRARY and isa != WINDOW:
        return _library_call_cost(plan, gi, hw, nbytes, mm, other, bw, c, isa, channels_last_kept)
    launches = 1
    if tile is not None:  # split-K: the fp32 partials written and read back, a second launch
        nbytes += tile.scratch_bytes(plan, gi)
        launches = tile.launches
    peak_mm *= _short_tile_efficiency(plan, gi, tile, hw, isa)
    efficiency = (_latency_efficiency(plan, gi, tile, hw) * _cross_warp_efficiency(plan, gi, tile, hw)
                  * _row_warp_efficiency(plan, gi, tile, hw) * _loop_register_efficiency(plan, gi, tile, hw)
                  * _column_run_efficiency(plan, gi, tile, hw) * _window_efficiency(plan, gi, tile, hw, isa))
    memory = c["bytes"] * nbytes / (bw * efficiency)
    roof = max(memory, c["flops"] * (mm / peak_mm + other / hw.value("compute.peak.fp32")))
    seconds = (roof / _wave_efficiency(plan, gi, tile, hw, hw.value("compute.units"))
               + c["launch"] * launches * hw.value("costs.launch") + right_copy_seconds(plan, gi, hw, isa))
    return GroupCost(gi, plan.groups[gi].kind, nbytes, mm + other, seconds)


def _library_call_cost(plan: FusionPlan, gi: int, hw: HardwareSpec, nbytes: float, mm: float, other: float,
                       bw: float, c: dict[str, float], isa: str | None = None, kept: bool = False) -> GroupCost:
    """A library group run as torch's op (conv, or pooling with ISA choice ``library``) then our epilogue
    kernel: the library's output is written and read back once more where an epilogue follows, two
    launches; a pooling moves its bytes at torch's measured pooling rate (``memory.library_pool_bandwidth``).
    A conv on channels-last operands (``library+nhwc``) runs at the library's channels-last rate and pays
    our transpose of its input (read and written once more, one launch), and without an epilogue (which
    transposes back as it reads) one of its output, unless the next group's window kernel reads it as it is
    (``kept``, ``fusion.window_reader``). Those passes run as kernels of their own, so their time
    adds to the library op's, whose bytes and arithmetic overlap."""
    program = plan.program
    g = plan.groups[gi]
    lib = next(n for n in g.nodes if node_kind(program.nodes[n].op) == LIBRARY)
    tail = any(n != lib and program.nodes[n].op not in O.flat_views() and n not in plan.feeding(gi, lib)
               for n in g.nodes)
    extra = 2 * _nbytes(plan, lib) if tail else 0.0
    launches = 2 if tail else 1
    if isa == NHWC:
        back = not tail and not kept  # ``kept``: the next group's window kernel reads the output channels-last
        extra += 2 * _nbytes(plan, program.nodes[lib].inputs[0]) + (2 * _nbytes(plan, lib) if back else 0.0)
        launches += 2 if back else 1
    pool = is_pool(program.nodes[lib].op)
    rate = (hw.get("memory.library_pool_bandwidth") or bw) if pool else bw
    # the library op's bytes hide under its arithmetic (or the other way round); the epilogue's pass over its
    # output and the channels-last transposes are kernels of their own, run after or before it
    seconds = max(c["bytes"] * nbytes / rate,
                  c["flops"] * (mm / _library_op_peak(plan, gi, lib, hw, isa) + other / hw.value("compute.peak.fp32")))
    seconds += c["bytes"] * extra / bw
    return GroupCost(gi, g.kind, nbytes + extra, mm + other, seconds + c["launch"] * launches * hw.value("costs.launch"))


def _library_op_peak(plan: FusionPlan, gi: int, lib: int, hw: HardwareSpec, isa: str | None = None) -> float:
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
    return _matmul_peak(plan, gi, hw, None)


def _matmul_peak(plan: FusionPlan, gi: int, hw: HardwareSpec, isa: str | None) -> float:
    """The matmul rate of group ``gi``: 16-bit operands on tensor cores (the measured library rate, which
    the persistent Triton kernel reaches; the non-persistent ones at their measured rates), fp32 at the
    library's ieee rate (``blas``), Triton's ieee rate (pointer loads; far lower with TMA loads), or TF32
    (``/tf32``); the library's measured rate off its row alignment where its rows are
    (``library_misaligned``); the library's attention (``sdpa``) at its own measured rate; a 16-bit Triton
    matmul whose K loop computes an operand (a fused prologue) at most at its measured rate."""
    program = plan.program
    anchor = program.nodes[plan.groups[gi].anchor(program)]
    fp32 = anchor.op == "matmul" and program.nodes[anchor.inputs[0]].dtype.name == "fp32"
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
        if not is_blas(isa) and anchor.op == "matmul" and _computed_operand(plan, gi):
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
    read through a transpose (a ``linear`` weight), or K or N of 1. Views are followed to what they read; a
    transpose of the last two dims flips the order; a computed operand counts as stored row-major."""
    program = plan.program
    anchor = program.nodes[plan.groups[gi].anchor(program)]
    if anchor.op != "matmul":
        return False

    def flipped(j: int) -> bool | None:
        flips = False
        while program.nodes[j].op in O.flat_views() or program.nodes[j].op == "transpose":
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
    return 2 * _nbytes(plan, anchor.inputs[1]) / bw + hw.value("costs.launch")


def _computed_operand(plan: FusionPlan, gi: int) -> bool:
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
    if not align or anchor.op != "matmul":
        return 0
    inside = set(group.nodes)
    count = 0
    for j in anchor.inputs:
        while j in inside and (O.is_view(program.nodes[j].op) or node_kind(program.nodes[j].op) == LAYOUT):
            j = program.nodes[j].inputs[0]
        if j in inside or program.nodes[j].op == "constant":
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
    if not align or anchor.op != "matmul":
        return False, False
    size = program.nodes[anchor.inputs[0]].dtype.itemsize
    k, n = program.concrete_shape(anchor.inputs[1])[-2:]
    return (not padded and (k * size) % align != 0), (n * size) % align != 0


def gpu_cost(plan: FusionPlan, tilings: Sequence[Tiling | None], hw: HardwareSpec,
             coefficients: dict[str, float] | None = None, isa: dict[int, str] | None = None) -> CostReport:
    isa = isa or {}
    # a channels-last conv whose output the next group's window kernel reads as it is: not transposed back
    kept = {gi for gi, choice in isa.items() if choice == NHWC and (r := window_reader(plan, gi)) is not None
            and isa.get(r) == WINDOW}
    groups = [_memo_group_cost(plan, gi, tilings[gi] if gi < len(tilings) else None, hw, coefficients, isa.get(gi),
                               gi in kept)
              for gi in range(len(plan.groups))]
    return CostReport(sum(g.seconds for g in groups), groups)


def _memo_group_cost(plan: FusionPlan, gi: int, t: Tiling | Tile | None, hw: HardwareSpec,
                     coefficients: dict[str, float] | None, isa: str | None, kept: bool) -> GroupCost:
    """``gpu_group_cost``, memoized on the plan (``FusionPlan.memo``) per hardware spec object: a group's cost
    depends on the plan, the group, its tiling's values (and template), the ISA choice and the coefficients."""
    store = plan.memo.get(("gpu_group_cost", id(hw)))
    if store is None or store[0] is not hw:  # keyed by identity: a spec object is not compared by its values
        store = plan.memo[("gpu_group_cost", id(hw))] = (hw, {})
    tk = t if t is None or isinstance(t, Tile) else (t.values, type(t.typed) if t.typed is not None else None)
    key = (gi, tk, isa, kept, tuple(sorted(coefficients.items())) if coefficients else None)
    got = store[1].get(key)
    if got is None:
        got = store[1][key] = gpu_group_cost(plan, gi, t, hw, coefficients, isa, channels_last_kept=kept)
    return got


def _short_tile_efficiency(plan: FusionPlan, gi: int, tile: Tile | None, hw: HardwareSpec, isa: str | None) -> float:
    """A tensor-core ``tl.dot`` tile of fewer than ``costs.tensor_core_min_rows`` rows (Hopper's wgmma takes 64
    rows per warpgroup; Triton falls back to smaller instructions) runs at that fraction of the rate, where
    the matmul has the rows for a full tile (a skinny matmul's every tiling pays alike). fp32 FMAs (no
    suffix on fp32 operands) are not charged."""
    rows = hw.get("costs.tensor_core_min_rows")
    if rows is None or not isinstance(tile, MatmulTile) or is_blas(isa) or base(isa) == FMA_REDUCE:
        return 1.0
    program = plan.program
    anchor = program.nodes[plan.groups[gi].anchor(program)]
    if anchor.op != "matmul":
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


def _latency_efficiency(plan: FusionPlan, gi: int, tile: Tile | None, hw: HardwareSpec) -> float:
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


def _cross_warp_efficiency(plan: FusionPlan, gi: int, tile: Tile | None, hw: HardwareSpec) -> float:
    """A one-pass column reduction (the whole reduced axis in one block, one tile per program) whose
    reductions depend on each other (a log-softmax's max, then its sum; ``FusionPlan.row_passes`` >= 2)
    waits on each level's shared-memory combine and barrier with nothing to overlap them: past
    ``costs.column_reduction_warps`` warps along the reduced axis its bandwidth falls in proportion
    (measured on the H200: a soft cross-entropy over 19 classes, 254 us at 2 warps along them, 420-450 at
    4, 1380-1410 at 8, 2744 at 16). One level of reductions is not charged (an L2 normalization over 67
    rows ran fastest with all 16 warps along them, 473 us, against 547 at 8 and 929 at 2), nor a chunk
    loop, which combines once after many chunks."""
    limit = hw.get("costs.column_reduction_warps")
    if not isinstance(tile, RowsTile) or limit is None or plan.row_passes(gi) < 2:
        return 1.0
    d = group_dims(plan, gi)
    if d.get("INNER", 1) <= 1 or tile.row_block(d["COLS"]) < d["COLS"]:
        return 1.0
    _, item = streams(plan, gi)
    return min(1.0, float(limit) / reduced_axis_warps(tile, item))


def _row_warp_efficiency(plan: FusionPlan, gi: int, tile: Tile | None, hw: HardwareSpec) -> float:
    """A one-pass row reduction (the whole row in one block) whose reductions depend on each other
    (``FusionPlan.row_passes`` >= 2: a cosine similarity's norms, then the sum of the normalized products)
    waits at each level on the cross-warp combine of all its warps: past ``costs.row_reduction_warps`` its
    bandwidth falls as ``(that / num_warps) ** costs.row_reduction_warps_exponent`` (the hardware file's fit).
    A chunk loop combines once after many chunks and a column reduction is :func:`_cross_warp_efficiency`'s."""
    limit, exponent = hw.get("costs.row_reduction_warps"), hw.get("costs.row_reduction_warps_exponent")
    if not isinstance(tile, RowsTile) or limit is None or exponent is None or plan.row_passes(gi) < 2:
        return 1.0
    d = group_dims(plan, gi)
    if d.get("INNER", 1) > 1 or tile.row_block(d["COLS"]) < d["COLS"]:
        return 1.0
    return min(1.0, float(limit) / tile.num_warps) ** float(exponent)


def loop_vectors(plan: FusionPlan, gi: int) -> int:
    """[ROWS, BLOCK_N] accumulators the sibling pass of a chunked row reduction carries from chunk to chunk:
    one per sibling reduction, two more (count, sum of squared deviations) per Welford pair."""
    return max(1, len(plan.sibling_reductions(gi)) + 2 * len(plan.welford_pairs(gi)))


def _loop_register_efficiency(plan: FusionPlan, gi: int, tile: Tile | None, hw: HardwareSpec) -> float:
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


def _column_run_efficiency(plan: FusionPlan, gi: int, tile: Tile | None, hw: HardwareSpec) -> float:
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
    written = sum(_nbytes(plan, o) for o in plan.outputs_of(gi))
    total = sum(_nbytes(plan, j) for j in plan.inputs_of(gi)) + written
    return total / ((total - written) / read + written / write) if total > 0 else 1.0


def window_taps(plan: FusionPlan, gi: int) -> int:
    """The most window positions one output element of the group's pooling windows reads (0: no window)."""
    program = plan.program
    taps = [math.prod(program.nodes[n].attrs["kernel_size"]) for n in plan.groups[gi].nodes
            if is_pool(program.nodes[n].op)]
    return max(taps, default=0)


def _window_efficiency(plan: FusionPlan, gi: int, tile: Tile | None, hw: HardwareSpec, isa: str | None) -> float:
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


def _extra_passes_bytes(plan: FusionPlan, gi: int, tile: Tile | None, hw: HardwareSpec) -> float:
    """A row reduction whose row does not fit one block reads its rows once per pass (``row_passes``: the
    sibling reductions share one), and once more to store full-width outputs: all passes after the first are
    extra; they come from L2 when the rows in flight fit it, else from HBM. A column reduction's passes come
    from HBM whatever its tile (its short runs strided across the tensor do not stay in L2: on the H200 an
    RMSNorm over 320 channels chunked by 32-256 ran 610-1090 us whose rows in flight fit half the L2, 568 us
    at best, the time of every pass from HBM; a softmax entropy over 151 classes likewise)."""
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


def _wave_efficiency(plan: FusionPlan, gi: int, tile: Tile | None, hw: HardwareSpec, units: float) -> float:
    """Useful fraction of the last wave: programs / (waves * slots), slots = SMs * blocks per SM. Below
    four waves for every kernel; at any wave count for a matmul's output tiles, each of which is seconds of
    tensor-core work, so the idle SMs of the last wave cost a whole tile's time however many waves precede
    it (a persistent kernel walks the same tiles: measured on an H200, the SwiGLU up projection 2048 x 11008
    x 4096 in 128 x 256 tiles, 688 tiles over 132 SMs, 5.2 waves, ran 292 us where cuBLAS ran 237 us,
    ``benchmarks/results/2026-12-06-issue21-llama/profile-h200.txt``)."""
    programs = tile.programs(plan, gi) if tile is not None else 1
    per_sm = tile.blocks_per_sm(hw) if tile is not None else 1
    slots = units * per_sm
    waves = math.ceil(programs / slots)
    tiles = isinstance(tile, MatmulTile)
    return max(1e-3, programs / (waves * slots)) if programs < slots * 4 or tiles else 1.0


# ------------------------------------------------------------------------------------------------
# Trainium: a timeline over engine queues
# ------------------------------------------------------------------------------------------------
_ACTIVATIONS = frozenset(O.activations())  # on the Scalar engine; the rest on the Vector engine


def _instruction(op: str, kind: str) -> str:
    """The instruction a node's work is priced as (its declared latency model, on its first engine): an
    activation on the Scalar engine, a row reduction ``tensor_reduce``, any other element-wise op
    ``tensor_scalar`` on the Vector engine -- one input stream for every node, as the model has always priced
    them (a binary op of two full tiles runs as ``tensor_tensor``, whose declared model counts two)."""
    if op in _ACTIVATIONS:
        return "activation"
    return "tensor_reduce" if kind == REDUCTION else "tensor_scalar"


def _vector_seconds(plan: FusionPlan, nodes: Sequence[int], hw: HardwareSpec) -> dict[str, float]:
    """Vector / Scalar engine seconds of element-wise and reduction nodes: each node's instruction
    (``_instruction``) on the node's elements spread over the partitions."""
    program = plan.program
    out = {"vector": 0.0, "scalar": 0.0}
    for n in nodes:
        node = program.nodes[n]
        kind = node_kind(node.op)
        if kind is None or kind in (MATMUL, LAYOUT):
            continue
        src = node.inputs[0] if kind == REDUCTION and node.inputs else n
        elements = math.prod(program.concrete_shape(src))
        instruction = declaration(_instruction(node.op, kind))
        engine = instruction.engines[0]
        out[engine] += model_seconds(instruction.latency[engine], engine, hw,
                                     free=elements / hw.value("limits.partition_max"))
    return {e: v for e, v in out.items() if v}


def trainium_engine_work(plan: FusionPlan, gi: int, t: Tiling | None, hw: HardwareSpec
                         ) -> tuple[float, list[tuple[str, str, float]], float]:
    """(DMA seconds each way, [(stage, engine, seconds)], bytes) of one group. A matmul group's stages are
    its prologue (the norm's statistics and scaling: Vector/Scalar), the Tensor-engine matmul and its
    epilogue; other groups have one stage per engine they use."""
    program = plan.program
    group = plan.groups[gi]
    nbytes, mm, _ = group_traffic(plan, gi, t, float("inf"))
    transfers = max(1, len(plan.inputs_of(gi)) + len(plan.outputs_of(gi)))
    # each way (load, store): half the transfers and half the bytes, over all the DMA engines
    dma = model_seconds(declaration("load").latency[DMA], DMA, hw, nbytes=nbytes / 2, transfers=transfers / 2,
                        engines=hw.value("compute.dma.engines"))
    if not mm:
        work = _vector_seconds(plan, group.nodes, hw)
        return dma, [("compute", e, v) for e, v in sorted(work.items())] or [("compute", "vector", 0.0)], nbytes
    tile = tile_of(plan, gi, t, hw)
    trn = tile if isinstance(tile, TrnMatmulTile) else TrnMatmulTile()  # no tiling: the template's defaults
    tile_n, tile_m, tile_k = trn.TILE_N, trn.TILE_M, trn.TILE_K
    anchor = group.anchor(program)
    a, b = (program.concrete_shape(j) for j in program.nodes[anchor].inputs)
    batch = math.prod(program.concrete_shape(anchor)[:-2])
    instrs = batch * math.ceil(a[-2] / tile_m) * math.ceil(b[-1] / tile_n) * math.ceil(a[-1] / tile_k)
    # one nc_matmul per (row, column, contraction) tile, TILE_N moving columns each; priced without the
    # declared model's fp32 factor (the trace's latency applies it), as the timeline always has
    per_tile = model_cycles(declaration("nc_matmul").latency[TENSOR], hw, columns=tile_n, fp32=False)
    tensor = engine_seconds(hw, TENSOR, instrs * per_tile)
    before = [n for n in group.nodes if n < anchor]
    after = [n for n in group.nodes if n > anchor]
    stages = [("prologue", e, v) for e, v in sorted(_vector_seconds(plan, before, hw).items())]
    stages.append(("matmul", "tensor", tensor))
    stages += [("epilogue", e, v) for e, v in sorted(_vector_seconds(plan, after, hw).items())]
    return dma, stages, nbytes


def trainium_group_work(plan: FusionPlan, gi: int, t: Tiling | None, hw: HardwareSpec) -> tuple[float, str, float, float]:
    """(DMA seconds each way, busiest engine, its seconds, bytes) of one group on its own: its engines run
    in a software pipeline, so the busiest one bounds it."""
    dma, stages, nbytes = trainium_engine_work(plan, gi, t, hw)
    busy: dict[str, float] = {}
    for _, engine, seconds in stages:
        busy[engine] = busy.get(engine, 0.0) + seconds
    engine = max(busy, key=lambda e: busy[e])
    return dma, engine, busy[engine], nbytes


PIPELINE_CHUNKS = 8  # tiles a fused group's stages are pipelined over in the timeline


def trainium_cost(plan: FusionPlan, tilings: Sequence[Tiling | None], hw: HardwareSpec) -> CostReport:
    """Engine timeline: loads and stores on separate DMA queues (a chip has 16 DMA engines, one group's
    store does not hold up the next independent group's load); a group whose work spans engines (a
    norm fused into a matmul: statistics on Vector/Scalar, the matmul on the Tensor engine) runs as a
    software pipeline over ``PIPELINE_CHUNKS`` tiles, so tile i+1's prologue overlaps tile i's matmul."""
    program = plan.program
    free = {e: 0.0 for e in ("dma_in", "dma_out", "tensor", "vector", "scalar", "gpsimd")}
    done: dict[int, float] = {}
    owner = plan.group_of()
    timeline: list[Interval] = []
    groups: list[GroupCost] = []

    def run(engine: str, ready: float, seconds: float, label: str) -> float:
        start = max(free[engine], ready)
        free[engine] = start + seconds
        timeline.append(Interval(engine, start, start + seconds, label))
        return start + seconds

    for gi, group in enumerate(plan.groups):
        t = tilings[gi] if gi < len(tilings) else None
        deps = {owner[j] for n in group.nodes for j in program.nodes[n].inputs if j in owner} - {gi}
        ready = max((done[d] for d in deps), default=0.0)
        dma, stages, nbytes = trainium_engine_work(plan, gi, t, hw)
        chunks = PIPELINE_CHUNKS if len(stages) > 1 else 1
        finished = ready
        for c in range(chunks):
            step = run("dma_in", ready, dma / chunks, f"g{gi} load{'' if chunks == 1 else f' {c}'}")
            for stage, engine, seconds in stages:
                label = f"g{gi} {group.kind}" if chunks == 1 else f"g{gi} {stage} {c}"
                step = run(engine, step, seconds / chunks, label)
            finished = run("dma_out", step, dma / chunks, f"g{gi} store{'' if chunks == 1 else f' {c}'}")
        done[gi] = finished
        busiest = max(stages, key=lambda s: s[2])[1]
        groups.append(GroupCost(gi, group.kind, nbytes, 0.0, finished - ready, busiest))
    makespan = max((i.end for i in timeline), default=0.0) + hw.value("costs.launch")
    return CostReport(makespan, groups, timeline)


def cost(plan: FusionPlan, tilings: Sequence[Tiling | None], hw: HardwareSpec,
         coefficients: dict[str, float] | None = None, isa: tuple[tuple[int, str], ...] = ()) -> CostReport:
    """The predicted cost of ``plan`` at ``tilings`` and ISA choices on ``hw``: the model of ``hw``'s backend
    (``Backend.cost``: the GPU roofline or the Trainium engine timeline)."""
    from axon_eg.backends.base import backend_for_hw

    return backend_for_hw(hw).cost(plan, tilings, hw, coefficients, isa)


# ------------------------------------------------------------------------------------------------
# Calibration
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Calibration:
    coefficients: dict[str, float]
    spearman_before: float
    spearman_after: float


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Rank correlation (average ranks for ties)."""
    ra, rb = _ranks(np.asarray(a, float)), _ranks(np.asarray(b, float))
    if ra.std() == 0 or rb.std() == 0:
        return 0.0
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x))
    for v in np.unique(x):
        tie = x == v
        ranks[tie] = ranks[tie].mean()
    return ranks


def calibrate(rows: Sequence[tuple[dict[str, float], float]]) -> Calibration:
    """Fit non-negative coefficients for the terms ``bytes``, ``flops`` and ``launch`` (each row:
    the model's per-term seconds, and the measured seconds) by least squares on relative error, and
    report the rank correlation between prediction and measurement before and after."""
    terms = ("bytes", "flops", "launch")
    x = np.array([[r[0].get(t, 0.0) for t in terms] for r in rows], float)
    y = np.array([r[1] for r in rows], float)
    weights = 1.0 / np.maximum(y, 1e-12)
    coef, *_ = np.linalg.lstsq(x * weights[:, None], y * weights, rcond=None)
    coef = np.maximum(coef, 1e-3)
    before = spearman(x.sum(axis=1), y)
    after = spearman(x @ coef, y)
    return Calibration(dict(zip(terms, map(float, coef))), before, after)
