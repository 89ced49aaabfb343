"""Symbolic tiling: tile parameters per fusion group, constrained by the hardware description.

Each group gets named parameters (``BLOCK_M``, ``TILE_N``, ``num_warps``, ...) with candidate values
and constraints read from ``data/hw_costs`` (never numbers in code): on-chip capacity per block or per
partition including multi-buffering, partition and matmul tile limits, PSUM banks, powers of two for
Triton block shapes, the search ranges of the ``tiles.*`` keys. Remainders are handled by masking, so
sizes need not divide. The spaces are the tile templates' (``extract/templates``: one typed dataclass
per kernel kind; ``space`` asks the one that applies to the group). ``TilingSpace.tilings``
enumerates every feasible assignment, prunes dominated ones (a smaller reduction tile that fits as
well) and hands each with its typed tile (``Tiling.typed``); this module keeps the function names the
tests and benchmarks use. ``rank_tilings`` orders a group's tilings (predicted cost, then the tile
template's tie-break) for the enumerator and the emitter's autotuning.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from axon_eg.backends.base import Backend
from axon_eg.hw import HardwareSpec

from .fusion import FusionPlan
from .templates import FP32, Constraint, Templates, Tile, Tiling, TilingSpace, knobs, pow2, reduced_operand

__all__ = ["COST_BUCKET", "FP32", "Constraint", "GroupSeconds", "Tiling", "TilingSpace", "bucket", "feasible",
           "group_cost", "pow2", "rank_tilings", "reduced_operand", "space", "stored_tie_break", "tilings",
           "typed_tile"]

COST_BUCKET = 1.03
"""Predicted costs within 3% of each other rank as equal (the model is not that accurate); the
tie-break (measured habits of the target) orders them."""


def space(plan: FusionPlan, gi: int, hw: HardwareSpec, templates: Templates) -> TilingSpace:
    """Group ``gi``'s tiling space on ``hw``: that of its template among the target's ``templates``
    (``Backend.templates``)."""
    return templates.space(plan, gi, hw)


def feasible(space: TilingSpace, assignment: dict[str, int | str]) -> list[str]:
    """Names of the constraints an assignment violates (empty: feasible): ``space.violated``."""
    return space.violated(assignment)


def tilings(space: TilingSpace, limit: int | None = None) -> tuple[list[Tiling], dict[str, int]]:
    """Feasible, non-dominated assignments and counts of what was pruned: ``space.tilings``."""
    return space.tilings(limit)


GroupSeconds = Callable[[FusionPlan, int, Tiling, HardwareSpec], float]
"""A group's predicted seconds alone at a tiling (``Backend.group_cost``, or a backend's own model)."""


def rank_tilings(plan: FusionPlan, gi: int, hw: HardwareSpec, templates: Templates, seconds_of: GroupSeconds,
                 options: list[Tiling] | None = None, *, bucketed: bool = True) -> list[Tiling]:
    """Group ``gi``'s tilings (``options``, default: every feasible one of its template in ``templates`` on
    ``hw``) best first: by predicted cost (``seconds_of``; ``bucketed``: costs within ``COST_BUCKET`` count as
    equal), then by the tile template's tie-break (measured habits of the target), then by value."""
    if options is None:
        options, _ = templates.space(plan, gi, hw).tilings()
    warp = knobs(hw).warp_size
    seconds = {t: _finite(seconds_of(plan, gi, t, hw)) for t in options}
    best = min(seconds.values(), default=math.inf)
    tolerance = templates.template_for(plan, gi, hw).cost_tolerance

    def key(t: Tiling) -> tuple:
        near = bucketed and math.isfinite(best) and seconds[t] <= best * tolerance  # equal to the model
        rank = -math.inf if near else bucket(seconds[t]) if bucketed else seconds[t]
        return (rank, *typed_tile(plan, gi, t, hw, templates).tie_break(warp), t.values)

    return sorted(options, key=key)


def typed_tile(plan: FusionPlan, gi: int, t: Tiling, hw: HardwareSpec, templates: Templates) -> Tile:
    tile = templates.tile_of(plan, gi, t, hw)
    return tile if tile is not None else templates.recover(plan.groups[gi].kind, (), hw)


def bucket(seconds: float) -> float:
    """``seconds``' cost bucket: predictions within ``COST_BUCKET`` of each other share one."""
    return round(math.log(seconds) / math.log(COST_BUCKET)) if 0 < seconds < math.inf else math.inf


def group_cost(plan: FusionPlan, gi: int, t: Tiling, hw: HardwareSpec, backend: Backend) -> float:
    """A group's cost alone (for ranking its tilings): roofline on GPUs, its own timeline on Trainium
    (``Backend.group_cost``)."""
    return _finite(backend.group_cost(plan, gi, t, hw))


def _finite(seconds: float) -> float:
    return seconds if math.isfinite(seconds) else float("inf")


def stored_tie_break(t: Tiling, templates: Templates, kind: str | None = None) -> tuple[float, ...]:
    """The tie-break of a stored tiling (its group's kind and values): ``templates.recover``'s tile's."""
    tile = t.typed if t.typed is not None else templates.recover(kind, t.values)
    return tile.tie_break(knobs().warp_size)
