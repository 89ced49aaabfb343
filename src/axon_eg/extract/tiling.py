"""Symbolic tiling: tile parameters per fusion group, constrained by the hardware description.

Each group gets named parameters (``BLOCK_M``, ``TILE_N``, ``num_warps``, ...) with candidate values
and constraints read from ``data/hw_costs`` (never numbers in code): on-chip capacity per block or per
partition including multi-buffering, partition and matmul tile limits, PSUM banks, powers of two for
Triton block shapes, the search ranges of the ``tiles.*`` keys. Remainders are handled by masking, so
sizes need not divide. The spaces are the tile templates' (``extract/templates``: one typed dataclass
per kernel kind; ``space`` asks the one that applies to the group). ``tilings`` enumerates every
feasible assignment, prunes dominated ones (same tile shape with less pipelining, or a smaller
reduction tile that fits as well) and hands each with its typed tile (``Tiling.typed``).
"""

from __future__ import annotations

import itertools

from axon_eg.hw import HardwareSpec

from .fusion import FusionPlan
from .templates import FP32, Constraint, Tiling, TilingSpace, pow2, reduced_operand, template_for

__all__ = ["FP32", "Constraint", "Tiling", "TilingSpace", "feasible", "pow2", "reduced_operand", "space", "tilings"]


def space(plan: FusionPlan, gi: int, hw: HardwareSpec) -> TilingSpace:
    """Group ``gi``'s tiling space on ``hw``: its template's (``templates.template_for``)."""
    return template_for(plan, gi, hw).space(plan, gi, hw)


def feasible(space: TilingSpace, assignment: dict[str, int | str]) -> list[str]:
    """Names of the constraints an assignment violates (empty: feasible)."""
    return [c.name for c in space.constraints if not c.holds(assignment)]


def tilings(space: TilingSpace, limit: int | None = None) -> tuple[list[Tiling], dict[str, int]]:
    """Feasible, non-dominated assignments (deterministic order) and counts of what was pruned."""
    names = [n for n, _ in space.params]
    feasible_list = []
    considered = 0
    for values in itertools.product(*(v for _, v in space.params)):
        considered += 1
        t = dict(zip(names, values))
        if not feasible(space, t):
            feasible_list.append(t)
    kept = _prune(feasible_list, space.template.monotone if space.template is not None else ())
    stats = {"considered": considered, "feasible": len(feasible_list), "kept": len(kept)}
    if limit is not None:
        kept = kept[:limit]
    template = space.template
    return [Tiling(space.group, tuple(t.items()), template.of(t, space.knobs) if template is not None else None)
            for t in kept], stats


def _prune(candidates: list[dict], monotone: tuple[str, ...]) -> list[dict]:
    """Drop an assignment when another equal in every parameter but a reduction tile (the template's
    ``monotone`` parameters: BLOCK_K, TILE_K) has a larger value there: longer K tiles that still fit
    never lose on a roofline.
    ``num_stages`` is not monotone: on the H200 a 128x128x64 matmul tile ran at 0.91x of cuBLAS with
    3 stages and 0.86x with 5, and flash attention was fastest with 2 (the tie-breaks pick them)."""
    if not candidates:
        return []
    if not monotone:
        return candidates
    best: dict[tuple, dict] = {}
    for t in candidates:
        key = tuple((k, v) for k, v in t.items() if k not in monotone)
        cur = best.get(key)
        if cur is None or tuple(t[k] for k in monotone) > tuple(cur[k] for k in monotone):
            best[key] = t
    return list(best.values())
