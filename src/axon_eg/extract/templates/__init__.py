"""Typed tile templates, one per kernel kind: a frozen dataclass whose fields are the kind's tiling
parameters (with defaults), and which owns when it applies to a fusion group (``applies``), its search
space (``space``: ranges from the ``tiles.*`` keys of ``data/hw_costs``, constraints from the rest of the
file), its program count (``programs``), its tie-break (``tie_break``) and what the cost model reads of
it (``traffic_tile``, ``in_flight``, ``blocks_per_sm``, ``scratch_bytes``, ``launches``).

GPU: ``ElementwiseTile``, ``LayoutTile``, ``ScanTile``, ``RowsTile`` (``streaming``), ``MatmulTile``,
``GemvTile``, ``SplitKTile``, ``AttentionTile`` (``contraction``); Trainium: ``TrnMatmulTile``,
``TrnRowsTile`` (``trainium``). Exactly one applies to each group on a target (``template_for``). A
``Tiling`` the planner enumerates carries its typed tile (``tiling.typed``); ``tile_of`` reads one built
by hand, ``recover`` one read back from storage (a manifest keeps the group kind and the values only).

    >>> tiling = tilings(space(plan, gi, load("h200")))[0][0]
    >>> tiling.typed.BLOCK_M, tiling.typed.programs(plan, gi), tiling.typed.tie_break(32)
"""

from __future__ import annotations

from typing import Any

from axon_eg.hw import HardwareSpec

from ..fusion import ATTENTION, LAYOUT, MATMUL, REDUCTION, SCAN, FusionPlan
from .base import (
    DOT_MIN,
    FP32,
    LAUNCH_KNOBS,
    Constraint,
    GpuTile,
    GroupFacts,
    Knobs,
    Tile,
    Tiling,
    TilingSpace,
    Values,
    group_dims,
    group_facts,
    is_gemv,
    knobs,
    next_pow2,
    pow2,
    reduced_operand,
    streams,
)
from .contraction import AttentionTile, GemvTile, MatmulTile, SplitKTile
from .streaming import ElementwiseTile, LayoutTile, RowsTile, ScanTile
from .trainium import TrnMatmulTile, TrnRowsTile

__all__ = ["DOT_MIN", "FP32", "LAUNCH_KNOBS", "TEMPLATES", "AttentionTile", "Constraint",
           "ElementwiseTile", "GemvTile", "GpuTile", "GroupFacts", "Knobs", "LayoutTile", "MatmulTile", "RowsTile",
           "ScanTile", "SplitKTile", "Tile", "Tiling", "TilingSpace", "TrnMatmulTile", "TrnRowsTile", "Values",
           "group_dims", "group_facts", "is_gemv", "knobs", "next_pow2", "pow2", "recover", "reduced_operand",
           "streams", "template_for", "tile_of"]

TEMPLATES: tuple[type[Tile], ...] = (TrnMatmulTile, TrnRowsTile, SplitKTile, GemvTile, MatmulTile, AttentionTile,
                                     RowsTile, ScanTile, LayoutTile, ElementwiseTile)
"""Every template; their ``applies`` conditions exclude each other."""


def template_for(plan: FusionPlan, gi: int, hw: HardwareSpec | None = None) -> type[Tile]:
    """The template that tiles group ``gi`` on ``hw`` (None: a GPU)."""
    for template in TEMPLATES:
        if template.applies(plan, gi, hw):
            return template
    raise AssertionError(f"no tile template for a {plan.groups[gi].kind} group")


def tile_of(plan: FusionPlan, gi: int, tiling: Tiling | Tile | None, hw: HardwareSpec | None = None) -> Tile | None:
    """The typed tile of group ``gi``'s tiling: the one it was enumerated with, else (a Tiling built by
    hand) its values read by the template that applies to the group, defaults for what they lack. None for
    no tiling, or one without values."""
    if tiling is None or isinstance(tiling, Tile):
        return tiling
    if tiling.typed is not None:
        return tiling.typed
    if not tiling.values:
        return None
    return template_for(plan, gi, hw).of(tiling.values, knobs(hw) if hw is not None else None)


def recover(kind: str | None, values: Values, hw: HardwareSpec | None = None) -> Tile:
    """The typed tile of a tiling read back from storage (a manifest or a table keeps the fusion group's
    kind and the values): the one place that tells templates apart by their parameter names. ``kind``
    None: by the names alone."""
    v: dict[str, Any] = dict(values)
    launch = knobs(hw) if hw is not None else None
    if "TILE_K" in v:
        return TrnMatmulTile.of(v)
    if "TILE_P" in v or "TILE_F" in v:
        return TrnRowsTile.of(v)
    if "SPLIT_K" in v:
        return SplitKTile.of(v, launch)
    if kind == ATTENTION and {"BLOCK_M", "BLOCK_N", "BLOCK_K"} <= set(v):
        return AttentionTile.of(v, launch)
    if kind == MATMUL and int(v.get("BLOCK_N", DOT_MIN)) < DOT_MIN:
        return GemvTile.of(v, launch)
    if "BLOCK_M" in v:
        return MatmulTile.of(v, launch)
    if kind == REDUCTION or "ROWS_PER_PROGRAM" in v or "BLOCK_N" in v:
        return RowsTile.of(v, launch)
    return {SCAN: ScanTile, LAYOUT: LayoutTile}.get(kind or "", ElementwiseTile).of(v, launch)
