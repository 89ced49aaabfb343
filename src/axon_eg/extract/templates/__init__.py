"""Typed tile templates: what every target's templates share (``base``). A template is a frozen dataclass
whose fields are a kernel kind's tiling parameters (with defaults), and which owns when it applies to a
fusion group (``applies``), its search space (``space``: ranges from the ``tiles.*`` keys of
``data/hw_costs``, constraints from the rest of the file), its program count (``programs``), its tie-break
(``tie_break``) and what the cost model reads of it (``traffic_tile``, ``in_flight``, ``blocks_per_sm``,
``scratch_bytes``, ``launches``).

Each target owns its templates, as a :class:`Templates` set (``Backend.templates``): the GPU's in
``backends/triton/templates`` (``ElementwiseTile``, ``LayoutTile``, ``ScanTile``, ``RowsTile``,
``MatmulTile``, ``GemvTile``, ``SplitKTile``, ``AttentionTile``), Trainium's in ``backends/nki/templates.py``
(``TrnMatmulTile``, ``TrnRowsTile``). Exactly one of a set applies to each group (``Templates.template_for``).
A ``Tiling`` the planner enumerates carries its typed tile (``tiling.typed``); ``Templates.tile_of`` reads one
built by hand, ``Templates.recover`` one read back from storage (a manifest keeps the group kind and the values
only).

    >>> tiling = tilings(TRITON.templates.space(plan, gi, load("h200")))[0][0]
    >>> tiling.typed.BLOCK_M, tiling.typed.programs(plan, gi), tiling.typed.tie_break(32)
"""

from __future__ import annotations

from .base import (
    DOT_MIN,
    FP32,
    LAUNCH_KNOBS,
    SCHEME_KNOBS,
    Constraint,
    GpuTile,
    GroupFacts,
    Knobs,
    Templates,
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

__all__ = ["DOT_MIN", "FP32", "LAUNCH_KNOBS", "SCHEME_KNOBS", "Constraint", "GpuTile", "GroupFacts", "Knobs", "Templates", "Tile",
           "Tiling", "TilingSpace", "Values", "group_dims", "group_facts", "is_gemv", "knobs", "next_pow2", "pow2",
           "reduced_operand", "streams"]
