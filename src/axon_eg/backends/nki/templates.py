"""Trainium templates: the NKI kernels' tiles, bounded by the NeuronCore's limits.

- ``TrnMatmulTile(TILE_K, TILE_M, TILE_N, BLOCK_M, BLOCK_N)``: matmul and attention groups on the Tensor
  engine; ``TILE_K`` on the partition dim (<= partitions and the contraction limit), ``TILE_M`` stationary
  and ``TILE_N`` moving free sizes (``TILE_N`` fp32 fill one PSUM bank at most), ``BLOCK_M x BLOCK_N``
  tiles per accumulation block (<= accumulation groups and PSUM banks), double-buffered in SBUF
  (``tiles.matmul.*``).
- ``TrnRowsTile(TILE_P, TILE_F)``: every other group on the Vector / Scalar engines: ``TILE_P`` partitions
  by ``TILE_F`` free elements, double-buffered (``tiles.vector.*``); a row reduction's row in one free
  tile or in passes.

An NKI kernel is one launch that loops over its tiles (``programs`` is 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from axon_eg.extract.fusion import ATTENTION, MATMUL, REDUCTION, FusionPlan
from axon_eg.extract.templates.base import FP32, Constraint, GroupFacts, Templates, Tile, Values, next_pow2, tile_range
from axon_eg.hw import HardwareSpec

BUFFERS = 2  # SBUF buffers per tile: load the next while computing this one


@dataclass(frozen=True, kw_only=True)
class TrnMatmulTile(Tile):
    """Tensor-engine tiles of a matmul (or attention) group."""

    kind: ClassVar[str] = "trn_matmul"
    monotone: ClassVar[tuple[str, ...]] = ("TILE_K",)
    TILE_K: int = 128
    TILE_M: int = 128
    TILE_N: int = 512
    BLOCK_M: int = 1
    BLOCK_N: int = 1

    @classmethod
    def applies(cls, plan: FusionPlan, gi: int, hw: HardwareSpec | None) -> bool:
        return plan.groups[gi].kind in (MATMUL, ATTENTION)

    @classmethod
    def params(cls, facts: GroupFacts, hw: HardwareSpec):
        item = facts.item
        pmax = int(hw.value("limits.partition_max"))
        sbuf, bank = hw.value("memory.sbuf.per_partition"), hw.value("memory.psum.bank")
        banks = int(hw.value("memory.psum.banks"))
        kmax = int(hw.value("limits.matmul.contraction_max"))
        smax = int(hw.value("limits.matmul.stationary_free_max"))
        mmax = int(hw.value("limits.matmul.moving_free_max"))
        groups = int(hw.value("limits.matmul.accumulation_groups"))
        blocks = tile_range(hw, "matmul.blocks")
        params = [("TILE_K", tile_range(hw, "matmul.tile_k")), ("TILE_M", tile_range(hw, "matmul.tile_m")),
                  ("TILE_N", tile_range(hw, "matmul.tile_n")), ("BLOCK_M", blocks), ("BLOCK_N", blocks)]
        constraints = [
            Constraint("partition dim", f"TILE_K <= partitions {pmax} and contraction limit {kmax}",
                       lambda t: t["TILE_K"] <= min(pmax, kmax)),
            Constraint("stationary tile", f"TILE_M <= {smax}", lambda t: t["TILE_M"] <= smax),
            Constraint("moving tile", f"TILE_N <= {mmax}", lambda t: t["TILE_N"] <= mmax),
            Constraint("PSUM bank", f"TILE_N * 4 B <= bank {bank} B", lambda t: t["TILE_N"] * FP32 <= bank),
            Constraint("accumulation groups", f"BLOCK_M*BLOCK_N <= min({groups} groups, {banks} banks)",
                       lambda t: t["BLOCK_M"] * t["BLOCK_N"] <= min(groups, banks)),
            Constraint("SBUF per partition", f"{BUFFERS} buffers * (BM*TM + BN*TN) * {item} B <= {sbuf} B",
                       lambda t: BUFFERS * (t["BLOCK_M"] * t["TILE_M"] + t["BLOCK_N"] * t["TILE_N"]) * item <= sbuf),
        ]
        return params, constraints

    def tie_break(self, warp_size: int) -> tuple[float, ...]:
        # More tiles per accumulation block first. The values are those of the key-name ranking this template
        # replaced (a GPU matmul's accumulators per thread at 4 warps of 32 and 3 stages): the candidate
        # ranking compares tie-breaks across groups, so they stay as they were.
        acc = self.BLOCK_M * self.BLOCK_N
        return (abs(math.log2(acc / 128) - 6) - 0.1 * 3, -acc)


@dataclass(frozen=True, kw_only=True)
class TrnRowsTile(Tile):
    """Vector / Scalar engine tiles: ``TILE_P`` partitions (None: all) by ``TILE_F`` free elements (None:
    the whole row)."""

    kind: ClassVar[str] = "trn_rows"
    TILE_P: int | None = None
    TILE_F: int | None = None

    @classmethod
    def applies(cls, plan: FusionPlan, gi: int, hw: HardwareSpec | None) -> bool:
        return plan.groups[gi].kind not in (MATMUL, ATTENTION)

    @classmethod
    def params(cls, facts: GroupFacts, hw: HardwareSpec):
        item, live = facts.item, facts.live
        pmax, sbuf = int(hw.value("limits.partition_max")), hw.value("memory.sbuf.per_partition")
        free_max = int(hw.value("limits.vector.free_max_sbuf"))
        f_lo = hw.value("tiles.vector.tile_f")[0]
        params = [("TILE_P", tile_range(hw, "vector.tile_p")), ("TILE_F", tile_range(hw, "vector.tile_f"))]
        constraints = [
            Constraint("partition dim", f"TILE_P <= {pmax}", lambda t: t["TILE_P"] <= pmax),
            Constraint("vector free size", f"TILE_F <= {free_max}", lambda t: t["TILE_F"] <= free_max),
            Constraint("SBUF per partition", f"{BUFFERS} buffers * {live} tiles * TILE_F * {item} B <= {sbuf} B",
                       lambda t: BUFFERS * live * t["TILE_F"] * item <= sbuf),
        ]
        if facts.kind == REDUCTION:  # a row must fit one tile's free dim, or be reduced in passes
            cols = facts.dims["COLS"]
            constraints.append(Constraint("row in passes", "TILE_F <= next power of two >= COLS",
                                          lambda t: t["TILE_F"] <= max(f_lo, next_pow2(cols))))
        return params, constraints

    def tie_break(self, warp_size: int) -> tuple[float, ...]:
        # No preference (the cost decides). The values are those of the key-name ranking this template
        # replaced (one element per thread at 4 warps of 32); kept because the candidate ranking compares
        # tie-breaks across groups.
        return (0, 11.0, -1)


def decode(kind: str | None, values: Values, launch: object = None) -> Tile:
    """A stored Trainium tiling's values as its template's tile: a matmul's ``TILE_K``, else the rows tile."""
    v = dict(values)
    return TrnMatmulTile.of(v) if "TILE_K" in v else TrnRowsTile.of(v)


TEMPLATES = Templates((TrnMatmulTile, TrnRowsTile), decode)
"""The NeuronCore's templates (``NKI.templates``): matmul and attention on the Tensor engine, the rest on the
Vector / Scalar engines."""
