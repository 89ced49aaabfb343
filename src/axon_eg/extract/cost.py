"""What every target's cost model shares: the report a model returns (``CostReport``: seconds per fusion
group, and on targets with engine queues a timeline), a group's HBM traffic and flops (``group_traffic``),
and the calibration that fits a target's coefficients on measurements. Every number comes from the hardware
description (``data/hw_costs``).

The models themselves belong to their targets, behind ``Backend.cost`` / ``Backend.group_cost``: the GPU
roofline with waves and launches in :mod:`axon_eg.backends.triton.cost`, the Trainium engine timeline in
:mod:`axon_eg.backends.nki.cost`. Nothing here knows which target it prices for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from axon_eg.ir import ops as O
from axon_eg.ir.library_ops import CONV_FAMILIES
from axon_eg.ir.program import Program

from .fusion import ATTENTION, LAYOUT, MATMUL, REDUCTION, FusionPlan, is_pool, node_kind, window_producers
from .templates import Tile


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


def node_bytes(plan: FusionPlan, node: int) -> float:
    n = plan.program.nodes[node]
    if n.is_constant:
        return 0.0
    return float(math.prod(plan.program.concrete_shape(node)) * n.dtype.itemsize)


def conv_flops(program: Program, i: int, family: str) -> float:
    """A convolution's multiply-adds, as the νGraph's cost counts them (``egraph.schema._FLOPS``): 2 per output
    element (conv) or per input element (conv_transpose) per weight element of one output (input) channel."""
    node = program.nodes[i]
    w = program.concrete_shape(node.inputs[1])
    per = math.prod(w) / max(1, w[0])
    elems = math.prod(program.concrete_shape(i) if family == "conv" else program.concrete_shape(node.inputs[0]))
    return 2.0 * elems * per


def group_traffic(plan: FusionPlan, gi: int, tile: Tile | None, l2_bytes: float,
                  wave: int = 1) -> tuple[float, float, float]:
    """(HBM bytes, matmul flops, other flops) of one group at its typed ``tile`` (None: the operands read once).
    ``wave``: programs running at once."""
    program = plan.program
    reads = [node_bytes(plan, j) for j in plan.inputs_of(gi)]
    writes = sum(node_bytes(plan, j) for j in plan.outputs_of(gi))
    mm_flops = other = 0.0
    recomputed = window_producers(plan, gi)  # computed again at every window position of each pooled output
    per_window = max((math.prod(program.nodes[p].attrs["kernel_size"]) * math.prod(program.concrete_shape(p))
                      for p in plan.groups[gi].nodes if is_pool(program.nodes[p].op)), default=0)
    for i in plan.groups[gi].nodes:
        n = program.nodes[i]
        out = per_window if i in recomputed else math.prod(program.concrete_shape(i))
        kind = node_kind(n.op)
        if kind == MATMUL:
            k = program.concrete_shape(n.inputs[0])[-1]
            mm_flops += 2.0 * out * k
        elif (family := O.get(n.op).meta.get("shape_family")) in CONV_FAMILIES:
            mm_flops += conv_flops(program, i, family)
        elif kind in (REDUCTION,) or O.get(n.op).kind is O.OpKind.SCAN:
            other += math.prod(program.concrete_shape(n.inputs[0]))
        elif kind is not None and kind != LAYOUT:
            other += out
    if plan.groups[gi].kind == ATTENTION:  # key blocks past a causal diagonal are skipped, not computed
        mm_flops *= causal_fraction(plan, gi)
    total_read = sum(reads)
    out_tile = tile.traffic_tile() if tile is not None and mm_flops and total_read > l2_bytes else None
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


def causal_fraction(plan: FusionPlan, gi: int) -> float:
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
