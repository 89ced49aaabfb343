"""Symbolic tiling: tile parameters per fusion group, constrained by the hardware description.

Each group gets named parameters (``BLOCK_M``, ``TILE_N``, ``num_warps``, ...) with candidate values
and constraints read from ``data/hw_costs`` (never numbers in code): on-chip capacity per block or per
partition including multi-buffering, partition and matmul tile limits, PSUM banks, powers of two for
Triton block shapes, the search ranges of the ``tiles.*`` keys. Remainders are handled by masking, so
sizes need not divide. The spaces are the tile templates' (``extract/templates``: one typed dataclass
per kernel kind; ``space`` asks the one that applies to the group). ``TilingSpace.tilings``
enumerates every feasible assignment, prunes dominated ones (a smaller reduction tile that fits as
well) and hands each with its typed tile (``Tiling.typed``); this module keeps the function names the
tests and benchmarks use.
"""

from __future__ import annotations

from axon_eg.hw import HardwareSpec

from .fusion import FusionPlan
from .templates import FP32, Constraint, Templates, Tiling, TilingSpace, pow2, reduced_operand

__all__ = ["FP32", "Constraint", "Tiling", "TilingSpace", "feasible", "pow2", "reduced_operand", "space", "tilings"]


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
