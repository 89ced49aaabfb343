"""GPU templates of matmul and attention groups.

- ``MatmulTile(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)``: ``tl.dot`` tiles (``tiles.matmul.*``),
  shared memory for ``num_stages`` operand buffers, half the register file for the fp32 accumulator, at
  least one 16 x 16 tile per warp; one program per output tile, swizzled by ``GROUP_SIZE_M`` (the
  template's, not enumerated); tie-break ~64 accumulators per thread, then deeper pipelines, bigger tiles.
- ``GemvTile``: a matmul with N < ``DOT_MIN`` output columns on CUDA cores (``fma_reduce``): thin row
  bands, the output columns in one tile, long K tiles (``tiles.gemv.*``); tie-break ~32 streamed
  elements per thread per K step.
- ``SplitKTile(SPLIT_K, BLOCK_R, num_warps)``: a GEMV whose vector is a reduction in the same group
  (``x @ sum(W, -1)``), split over K (``tiles.split_k.*``): ``ceil(K / SPLIT_K)`` programs and a second
  launch adding their fp32 partials (``finish_warps``).
- ``AttentionTile(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)``: flash attention, ``BLOCK_M`` query
  rows per program, ``BLOCK_N`` keys per step, ``BLOCK_K`` the padded head dim (``tiles.attention.*``);
  tie-break as in the fused-attention tutorial.

The GEMV / split-K decision is ``applies`` here and nowhere else (``base.is_gemv``, ``base.reduced_operand``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from axon_eg.extract.fusion import ATTENTION, MATMUL, FusionPlan
from axon_eg.extract.templates.base import (
    DOT_MIN,
    FP32,
    Constraint,
    GpuTile,
    GroupFacts,
    gpu_facts,
    group_dims,
    is_gemv,
    next_pow2,
    reduced_operand,
    tile_range,
)
from axon_eg.hw import HardwareSpec
from axon_eg.ir import ops as O

WARP_TILE = DOT_MIN * DOT_MIN  # elements a warp takes at least: one 16 x 16 tile (8 per thread of 32)
OPERAND_ITEM = 2  # bytes per operand element the blocks-per-SM estimate assumes (bf16)


def _output_programs(plan: FusionPlan, gi: int, bm: int, bn: int) -> int:
    """One program per (batch entry, BLOCK_M x BLOCK_N output tile); a reduction across N after the matmul
    gives each program whole rows (it loops over the N tiles)."""
    program = plan.program
    anchor = plan.groups[gi].anchor(program)
    node = program.nodes[anchor]
    if node.kind is not O.OpKind.CONTRACTION:
        return 1
    a, b = (program.concrete_shape(j) for j in node.inputs)
    batch = math.prod(program.concrete_shape(anchor)[:-2])
    tiles_n = math.ceil(b[-1] / bn)
    if tiles_n > 1 and any(O.get(program.nodes[n].op).kind is O.OpKind.REDUCE and n > anchor
                           for n in plan.groups[gi].nodes):
        tiles_n = 1
    return batch * math.ceil(a[-2] / bm) * tiles_n


def _blocks_per_sm(hw: HardwareSpec, bm: int, bn: int, bk: int, stages: int) -> int:
    smem = (bm * bk + bk * bn) * OPERAND_ITEM * stages
    regs = bm * bn * FP32
    return max(1, min(hw.value("memory.shared.per_sm") // max(1, smem), hw.value("memory.registers.per_sm") // max(1, regs)))


FUSED_REDUCTION_ACCUMULATORS = 64
"""At most this many fp32 accumulators per thread in a matmul kernel that also reduces (a norm's row
statistics in the prologue, a reduction across N in the epilogue) or whose operands are fp32: at 128 per
thread (128x256 tiles, 8 warps) on the H200 with Triton 3.6 the first returned wrong values
(rmsnorm_matmul, layernorm_matmul) and the second spilled (an fp32 1024x8192x8192 GEMM in 113 ms where
64x256x32 tiles took 4.55 ms; benchmarks/results/2026-12-02-issue17), where 64 per thread ran correct."""


@dataclass(frozen=True, kw_only=True)
class MatmulTile(GpuTile):
    """A ``tl.dot`` matmul tile."""

    kind: ClassVar[str] = "matmul"
    monotone: ClassVar[tuple[str, ...]] = ("BLOCK_K",)
    # the roofline charges a partial last wave (3.9 waves of 128x256 tiles at 4096^3: 3%) but not that
    # small tiles cannot feed the tensor cores (128x128x64: 200-210 us, 128x256x64 at 8 warps: 180-183 us,
    # H200 bf16 4096^3, benchmarks/gemm_core_bench.py): tilings within 10% rank by the tie-break
    cost_tolerance: ClassVar[float] = 1.10
    BLOCK_M: int = 64
    BLOCK_N: int = 64
    BLOCK_K: int = 32
    num_stages: int = 3
    GROUP_SIZE_M: int = 8  # tile rows per swizzle group (the Triton matmul tutorial's); not enumerated
    SPLIT_K: int = 1
    """K slices run by programs of their own (a product with few output tiles and a long K: 256 x 256 x
    131072 is 4 tiles of 128 x 128 on 132 SMs); their fp32 partials are added in a fixed order by a second
    launch, which also runs the epilogue (deterministic, no atomics)."""

    @classmethod
    def applies(cls, plan: FusionPlan, gi: int, hw: HardwareSpec | None) -> bool:
        return plan.groups[gi].kind == MATMUL and not is_gemv(plan, gi)

    @property
    def launches(self) -> int:  # type: ignore[override]
        return 2 if self.SPLIT_K > 1 else 1

    @staticmethod
    def split_k_values(facts: GroupFacts, hw: HardwareSpec) -> tuple[int, ...]:
        """1, and the hardware file's split-K range when the product has fewer 128 x 128 output tiles than
        the GPU has SMs, one batch entry, a K of at least 16 tiles of 128 per slice pair, and no reduction
        fused around it."""
        d = facts.dims
        if hw.get("tiles.matmul.split_k") is None or facts.reduces or d.get("BATCH", 1) != 1:
            return (1,)
        tiles = math.ceil(d["M"] / 128) * math.ceil(d["N"] / 128)
        if tiles >= hw.value("compute.units") or d["K"] < 2048:
            return (1,)
        return (1, *tile_range(hw, "matmul.split_k"))

    @classmethod
    def params(cls, facts: GroupFacts, hw: HardwareSpec):
        g = gpu_facts(hw)
        item, smem, regs, k = facts.item, g.smem, g.regs, facts.dims["K"]
        m, n = facts.dims["M"], facts.dims["N"]
        bk_lo, bm_lo, bn_lo = (hw.value(f"tiles.matmul.block_{x}")[0] for x in "kmn")
        params = [("BLOCK_M", tile_range(hw, "matmul.block_m")), ("BLOCK_N", tile_range(hw, "matmul.block_n")),
                  ("BLOCK_K", tile_range(hw, "matmul.block_k")), ("num_warps", g.warps), ("num_stages", g.stages),
                  *g.extra]
        splits = cls.split_k_values(facts, hw)
        if splits != (1,):
            params.append(("SPLIT_K", splits))
        constraints = [
            Constraint("shared memory", f"(BM*BK + BK*BN) * {item} B * stages <= {smem} B",
                       lambda t: (t["BLOCK_M"] * t["BLOCK_K"] + t["BLOCK_K"] * t["BLOCK_N"]) * item * t["num_stages"] <= smem),
            Constraint("accumulator registers", f"BM*BN*4 B <= registers per SM {regs} B / 2",
                       lambda t: t["BLOCK_M"] * t["BLOCK_N"] * FP32 <= regs // 2),
            # the fewest warps may share a tile that is already the whole output (M, N <= 16: no larger tile)
            Constraint("warp tiles", f"BM*BN >= num_warps * {DOT_MIN}*{DOT_MIN}, or {min(g.warps)} warps on the "
                       "whole output", lambda t: t["BLOCK_M"] * t["BLOCK_N"] >= t["num_warps"] * WARP_TILE or (
                           t["num_warps"] == min(g.warps) and t["BLOCK_M"] >= max(bm_lo, next_pow2(m))
                           and t["BLOCK_N"] >= max(bn_lo, next_pow2(n)))),
            Constraint("no oversized K tile", f"BK <= max({bk_lo}, K={k} rounded up)",
                       lambda t: t["BLOCK_K"] <= max(bk_lo, next_pow2(k))),
            # a tile past the rows (columns) only pads: its MMAs and registers are spent on masked lanes, which
            # a static kernel hides where the mask folds to a constant and a run-time M cannot (ir.traced)
            Constraint("no oversized M tile", f"BM <= max({bm_lo}, M={m} rounded up)",
                       lambda t: t["BLOCK_M"] <= max(bm_lo, next_pow2(m))),
            Constraint("no oversized N tile", f"BN <= max({bn_lo}, N={n} rounded up)",
                       lambda t: t["BLOCK_N"] <= max(bn_lo, next_pow2(n))),
            Constraint("K slices of at least 4 K tiles", f"SPLIT_K * BK * 4 <= K={k}",
                       lambda t: t.get("SPLIT_K", 1) == 1 or t["SPLIT_K"] * t["BLOCK_K"] * 4 <= k),
        ]
        if facts.reduces or facts.item >= FP32:  # fused reductions keep tiles of their own; fp32 dots use FMAs
            per_thread = FUSED_REDUCTION_ACCUMULATORS
            constraints.append(Constraint(
                "fused reductions or fp32 operands",
                f"BM*BN <= num_warps * {g.warp_size} * {per_thread} (fp32 accumulators per thread)",
                lambda t: t["BLOCK_M"] * t["BLOCK_N"] <= t["num_warps"] * g.warp_size * per_thread))
        return params, constraints

    def programs(self, plan: FusionPlan, gi: int) -> int:
        return _output_programs(plan, gi, self.BLOCK_M, self.BLOCK_N) * self.SPLIT_K

    def scratch_bytes(self, plan: FusionPlan, gi: int) -> int:
        """Split-K: the fp32 partials of every slice, written by the first launch and read by the second."""
        if self.SPLIT_K == 1:
            return 0
        d = group_dims(plan, gi)
        return self.SPLIT_K * d["M"] * d["N"] * FP32 * 2

    def tie_break(self, warp_size: int) -> tuple[float, ...]:
        # ~128 fp32 accumulators per thread, BLOCK_K = 64, then bigger tiles, deeper pipelines (H200, Triton
        # 3.6, bf16: 128x256x64 at 8 warps and 4 stages 179.5 us at 4096^3 (persistent, TMA) where 128x128x64
        # at 8 warps (64 per thread) took 200 us and 4 warps on 128x256 (256 per thread) spill, 4-8x slower;
        # benchmarks/gemm_core_bench.py, benchmarks/tile_sweep.py)
        acc = self.BLOCK_M * self.BLOCK_N
        per_thread = acc / (self.num_warps * warp_size)
        return (abs(math.log2(per_thread) - 7) + 0.5 * abs(math.log2(self.BLOCK_K) - 6)
                + 0.5 * max(0, 3 - self.num_stages), -acc, -self.num_stages)

    def traffic_tile(self) -> tuple[int, int, int]:
        return self.BLOCK_M, self.BLOCK_N, self.GROUP_SIZE_M

    def blocks_per_sm(self, hw: HardwareSpec) -> int:
        return _blocks_per_sm(hw, self.BLOCK_M, self.BLOCK_N, self.BLOCK_K, self.num_stages)


@dataclass(frozen=True, kw_only=True)
class GemvTile(MatmulTile):
    """A GEMV on CUDA cores: the streamed A tile reduced against a thin B without tl.dot."""

    kind: ClassVar[str] = "gemv"

    @classmethod
    def applies(cls, plan: FusionPlan, gi: int, hw: HardwareSpec | None) -> bool:
        return is_gemv(plan, gi) and not reduced_operand(plan, gi)

    @classmethod
    def params(cls, facts: GroupFacts, hw: HardwareSpec):
        g = gpu_facts(hw)
        k, cap = facts.dims["K"], int(hw.value("tiles.gemv.max_elements"))
        bk_lo = hw.value("tiles.gemv.block_k")[0]
        # thin row bands, long K tiles, enough loads in flight
        params = [("BLOCK_M", tile_range(hw, "gemv.block_m")), ("BLOCK_N", (next_pow2(facts.dims["N"]),)),
                  ("BLOCK_K", tile_range(hw, "gemv.block_k")), ("num_warps", g.warps), ("num_stages", g.stages[:1]),
                  *g.extra]
        constraints = [
            Constraint("tile per program", f"num_warps*{WARP_TILE} <= BM*BK <= {cap}",
                       lambda t: t["num_warps"] * WARP_TILE <= t["BLOCK_M"] * t["BLOCK_K"] <= cap),
            Constraint("no oversized K tile", f"BK <= max({bk_lo}, K={k} rounded up)",
                       lambda t: t["BLOCK_K"] <= max(bk_lo, next_pow2(k))),
        ]
        return params, constraints

    def tie_break(self, warp_size: int) -> tuple[float, ...]:
        if self.BLOCK_N >= DOT_MIN:  # 9-15 columns padded to 16: ranked as a matmul tile (as before the templates)
            return super().tie_break(warp_size)
        # ~32 streamed elements per thread per K step (a few 16-byte loads in flight), long contiguous K
        # tiles, then thin row bands (more programs)
        per_thread = self.BLOCK_M * self.BLOCK_K / (self.num_warps * warp_size)
        return (abs(math.log2(per_thread) - 5), -self.BLOCK_K, self.BLOCK_M)


@dataclass(frozen=True, kw_only=True)
class SplitKTile(GpuTile):
    """A split-K GEMV: ``SPLIT_K`` rows of W per program, streamed ``BLOCK_R`` wide; a second launch of
    ``finish_warps`` warps adds the partials."""

    kind: ClassVar[str] = "split_k"
    launches: ClassVar[int] = 2
    TRAFFIC_TILE: ClassVar[tuple[int, int, int]] = (128, 128, 8)
    """The re-read model's output tile for this GEMV (the cost model's figure from before the templates;
    with one output column it charges only re-reads of the reduced vector, a few KB)."""
    SPLIT_K: int = 16
    BLOCK_R: int = 1024
    num_warps: int = 8  # measured best (sum_matmul 4096^3 on the H200, see tie_break)
    finish_warps: int  # the finishing launch: the target's default warp count

    @classmethod
    def applies(cls, plan: FusionPlan, gi: int, hw: HardwareSpec | None) -> bool:
        return is_gemv(plan, gi) and reduced_operand(plan, gi)

    @classmethod
    def params(cls, facts: GroupFacts, hw: HardwareSpec):
        g = gpu_facts(hw)
        ws, pt, cap = g.warp_size, g.per_thread, int(hw.value("tiles.split_k.max_elements"))
        k = facts.dims["K"]
        longest = max(facts.dims["M"], k)
        sk_lo, br_lo = hw.value("tiles.split_k.split_k")[0], hw.value("tiles.split_k.block_r")[0]
        params = [("SPLIT_K", tile_range(hw, "split_k.split_k")), ("BLOCK_R", tile_range(hw, "split_k.block_r")),
                  ("num_warps", g.warps)]
        constraints = [
            Constraint("tile per program", f"num_warps*{WARP_TILE} <= SPLIT_K*BLOCK_R <= {cap}",
                       lambda t: t["num_warps"] * WARP_TILE <= t["SPLIT_K"] * t["BLOCK_R"] <= cap),
            Constraint("registers per thread", f"SPLIT_K*BLOCK_R fp32 / (num_warps*{ws}) <= {pt} / 2",
                       lambda t: t["SPLIT_K"] * t["BLOCK_R"] <= t["num_warps"] * ws * pt // 2),
            Constraint("no oversized tiles", f"BLOCK_R <= max({br_lo}, {longest} rounded up), SPLIT_K <= max({sk_lo}, K)",
                       lambda t: t["BLOCK_R"] <= max(br_lo, next_pow2(longest)) and t["SPLIT_K"] <= max(sk_lo, next_pow2(k))),
        ]
        return params, constraints

    def programs(self, plan: FusionPlan, gi: int) -> int:
        program = plan.program
        anchor = plan.groups[gi].anchor(program)
        return math.ceil(program.concrete_shape(program.nodes[anchor].inputs[0])[-1] / self.SPLIT_K)

    def tie_break(self, warp_size: int) -> tuple[float, ...]:
        # 16-row K slices (~2 programs per SM), 16K-element tiles, ~64 per thread (H200, sum_matmul 4096^3:
        # SPLIT_K=16, BLOCK_R=1024, 8 warps 34.5 us; SPLIT_K=32 tilings 41-69 us; one run with unsteady
        # timings, benchmarks/results/2026-12-01-sweeps/sum_matmul-splitk)
        tile = self.SPLIT_K * self.BLOCK_R
        per_thread = tile / (self.num_warps * warp_size)
        return (abs(math.log2(self.SPLIT_K) - 4), abs(math.log2(tile) - 14), abs(math.log2(per_thread) - 6))

    def traffic_tile(self) -> tuple[int, int, int]:
        return self.TRAFFIC_TILE

    def in_flight(self, plan: FusionPlan, gi: int) -> tuple[int, int, int]:
        # streams like a reduction: W's rows, one tensor of the first input's item size
        return self.SPLIT_K * self.BLOCK_R, 1, plan.program.nodes[plan.inputs_of(gi)[0]].dtype.itemsize

    def blocks_per_sm(self, hw: HardwareSpec) -> int:
        return 1  # few wide programs that each stream a whole K slice

    def scratch_bytes(self, plan: FusionPlan, gi: int) -> int:
        out = math.prod(plan.program.concrete_shape(plan.groups[gi].anchor(plan.program)))
        return 2 * self.programs(plan, gi) * out * FP32  # the fp32 partials written and read back


@dataclass(frozen=True, kw_only=True)
class AttentionTile(GpuTile):
    """Flash attention: ``BLOCK_M`` query rows per program, ``BLOCK_N`` keys per step, the whole head dim
    (``BLOCK_K``, padded to a power of two; the cost model reads it) on chip."""

    kind: ClassVar[str] = "attention"
    monotone: ClassVar[tuple[str, ...]] = ("BLOCK_K",)
    BLOCK_M: int = 64
    BLOCK_N: int = 64
    BLOCK_K: int | None = None  # None: the lowering pads the head dim itself
    num_stages: int = 2

    @classmethod
    def applies(cls, plan: FusionPlan, gi: int, hw: HardwareSpec | None) -> bool:
        return plan.groups[gi].kind == ATTENTION

    @classmethod
    def params(cls, facts: GroupFacts, hw: HardwareSpec):
        g = gpu_facts(hw)
        item, smem, ws, pt = facts.item, g.smem, g.warp_size, g.per_thread
        head = max(DOT_MIN, next_pow2(facts.dims["N"]))  # N: the value head dim
        keys, bn_lo = facts.dims["K"], hw.value("tiles.attention.block_n")[0]
        params = [("BLOCK_M", tile_range(hw, "attention.block_m")), ("BLOCK_N", tile_range(hw, "attention.block_n")),
                  ("BLOCK_K", (head,)), ("num_warps", g.warps), ("num_stages", g.stages), *g.extra]
        constraints = [
            Constraint("shared memory (as a matmul)", f"(BM*BK + BK*BN) * {item} B * stages <= {smem} B",
                       lambda t: (t["BLOCK_M"] * t["BLOCK_K"] + t["BLOCK_K"] * t["BLOCK_N"]) * item * t["num_stages"] <= smem),
            Constraint("shared memory", f"(BM*{head} + stages*BN*2*{head} + BM*BN) * {item} B <= {smem} B",
                       lambda t: (t["BLOCK_M"] * head + t["num_stages"] * t["BLOCK_N"] * 2 * head
                                  + t["BLOCK_M"] * t["BLOCK_N"]) * item <= smem),
            Constraint("registers per thread", f"(BM*BN + BM*{head}) fp32 / (num_warps*{ws}) <= {pt}",
                       lambda t: t["BLOCK_M"] * (t["BLOCK_N"] + head) <= t["num_warps"] * ws * pt),
            Constraint("warp tiles", f"BM >= num_warps * {DOT_MIN}", lambda t: t["BLOCK_M"] >= t["num_warps"] * DOT_MIN),
            Constraint("no oversized key block", f"BN <= max({bn_lo}, K={keys} keys rounded up)",
                       lambda t: t["BLOCK_N"] <= max(bn_lo, next_pow2(keys))),
        ]
        return params, constraints

    @property
    def head(self) -> int:
        return self.BLOCK_K if self.BLOCK_K is not None else DOT_MIN

    def programs(self, plan: FusionPlan, gi: int) -> int:
        return _output_programs(plan, gi, self.BLOCK_M, self.BLOCK_N)

    def tie_break(self, warp_size: int) -> tuple[float, ...]:
        # 128 query rows, ~192 live fp32 (scores + accumulator) per thread, 2 stages (H200, Triton 3.6, head
        # dim 128: BLOCK_N=64 with 4 warps beat BLOCK_N=128 with 8 by 15%)
        live = self.BLOCK_M * (self.BLOCK_N + self.head) / (self.num_warps * warp_size)
        return (abs(math.log2(self.BLOCK_M) - 7), abs(math.log2(live / 192)) + 0.25 * abs(self.num_stages - 2),
                -self.BLOCK_N)

    def traffic_tile(self) -> tuple[int, int, int]:
        return self.BLOCK_M, self.BLOCK_N, MatmulTile.GROUP_SIZE_M

    def blocks_per_sm(self, hw: HardwareSpec) -> int:
        return _blocks_per_sm(hw, self.BLOCK_M, self.BLOCK_N, self.head, self.num_stages)
