"""The GPU tile templates (``TRITON.templates``): one typed template per kernel kind, each a frozen dataclass
whose fields are the kind's tiling parameters and which owns when it applies to a fusion group, its search
space from the ``tiles.*`` keys of ``data/hw_costs``, its program count and tie-break, and what the cost model
reads of it. Memory-bound kinds in :mod:`.streaming` (``ElementwiseTile``, ``LayoutTile``, ``ScanTile``,
``RowsTile``), contractions in :mod:`.contraction` (``MatmulTile``, ``GemvTile``, ``SplitKTile``,
``AttentionTile``); what every target's templates share is ``extract/templates/base.py``.
"""

from __future__ import annotations

from typing import Any

from axon_eg.extract.fusion import ATTENTION, LAYOUT, MATMUL, REDUCTION, SCAN
from axon_eg.extract.templates.base import DOT_MIN, Knobs, Templates, Tile, Values

from .contraction import AttentionTile, GemvTile, MatmulTile, SplitKTile
from .streaming import ElementwiseTile, LayoutTile, RowsTile, ScanTile


def decode(kind: str | None, values: Values, launch: Knobs | None = None) -> Tile:
    """A stored GPU tiling's values as its template's tile (the group's ``kind`` where the names alone do not
    tell): the one place that tells the GPU templates apart by their parameter names."""
    v: dict[str, Any] = dict(values)
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


TEMPLATES = Templates((SplitKTile, GemvTile, MatmulTile, AttentionTile, RowsTile, ScanTile, LayoutTile,
                       ElementwiseTile), decode)
"""The GPU's templates, in the order ``template_for`` asks them (their ``applies`` exclude each other)."""

__all__ = ["TEMPLATES", "AttentionTile", "ElementwiseTile", "GemvTile", "LayoutTile", "MatmulTile", "RowsTile",
           "ScanTile", "SplitKTile", "decode"]
