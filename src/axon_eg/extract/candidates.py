"""``enumerate_candidates``: the k best Candidates by predicted cost across algebraic variants x
fusion plans x tilings x ISA choices, deterministic, with counts of what each level considered and
pruned.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from axon_eg.egraph.nugraph import NuGraph, Variant
from axon_eg.hw import HardwareSpec, load

from .cost import CostReport, cost, gpu_group_cost, trainium_group_work
from .fusion import ATTENTION, LAYOUT, MATMUL, FusionPlan, plans
from .tiling import Tiling, space, tilings


@dataclass(frozen=True)
class Candidate:
    variant: Variant
    plan: FusionPlan
    tilings: tuple[Tiling, ...]
    isa: tuple[tuple[int, str], ...]  # (group, instruction choice)
    predicted_seconds: float
    report: CostReport = field(compare=False, repr=False)

    @property
    def key(self) -> tuple:
        return (self.variant.program.hash, tuple(g.nodes for g in self.plan.groups),
                tuple(t.values for t in self.tilings), self.isa)


@dataclass
class EnumerationSummary:
    variants: int = 0
    plans: int = 0
    tilings_considered: int = 0
    tilings_feasible: int = 0
    tilings_kept: int = 0
    candidates: int = 0
    kept: int = 0
    errors: dict[tuple, str] = field(default_factory=dict)
    """Candidate key -> the error of the backend's ``fallback`` probe that raised on one of its groups
    (``error_line``); the candidate is ranked as if that group ran as torch, and must not be emitted."""


def error_line(exc: BaseException) -> str:
    """An exception as one line for a table row: its type and the last line of its message, then its notes."""
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    text = f"{type(exc).__name__}: {lines[-1].strip()}" if lines else type(exc).__name__
    notes = [n for n in getattr(exc, "__notes__", ()) if n]
    return text + (f" ({'; '.join(notes)})" if notes else "")


def isa_choices(plan: FusionPlan, hw: HardwareSpec) -> list[tuple[tuple[int, str], ...]]:
    """Instruction choices per group: on Trainium a transpose runs on the Tensor engine
    (``nc_transpose``) or, where the chip has it, in the DMA (``dma_transpose``); on GPUs a matmul
    with a single output column (a GEMV after the νGraph's rewrite) may skip ``tl.dot``."""
    options: list[list[tuple[int, str]]] = []
    for gi, g in enumerate(plan.groups):
        program = plan.program
        if hw.kind == "trainium" and g.kind == LAYOUT:
            opts = [(gi, "nc_transpose")] + ([(gi, "dma_transpose")] if hw.value("features.dma_transpose") else [])
            options.append(opts)
        elif hw.kind != "trainium" and g.kind == ATTENTION and hw.get("features.tma"):
            options.append([(gi, "tl.dot"), (gi, "tl.dot+tma")])  # Hopper: q/k/v tiles through tensor descriptors
        elif hw.kind != "trainium" and g.kind == MATMUL:
            anchor = g.anchor(program)
            narrow = program.concrete_shape(anchor)[-1] < 16
            # a GEMV's thin tilings (BLOCK_M < 16) only suit fma_reduce: tl.dot needs 16 x 16 tiles
            # Hopper: operand tiles through tensor descriptors (TMA) as an alternative to pointer loads
            dot = [(gi, "tl.dot")] + ([(gi, "tl.dot+tma")] if hw.get("features.tma") else [])
            options.append([(gi, "fma_reduce")] if narrow else dot)
    combos = [()]
    for opts in options:
        combos = [c + (o,) for c in combos for o in opts]
    return combos


Fallback = Callable[[FusionPlan, int, Tiling, "str | None"], bool]
"""``(plan, group, tiling, isa choice) -> True`` when the backend cannot lower the group and would run it
as fp32 torch code (one kernel per op)."""
COST_BUCKET = 1.03
"""Predicted costs within 3% of each other rank as equal (the model is not that accurate); the
tie-break (measured habits of the target) orders them."""


def enumerate_candidates(nugraph: NuGraph, target: str | HardwareSpec, k: int = 8, *, variants: int = 8,
                         tilings_per_group: int = 4,
                         fallback: Fallback | None = None) -> tuple[list[Candidate], EnumerationSummary]:
    """The k candidates to measure. ``fallback`` (from the backend) marks groups it would run as torch
    code; their predicted cost is charged as one fp32 kernel per op, so a plan the backend lowers
    whole outranks an equal-looking one it cannot. A probe that raises counts as such a group, and the
    candidates concerned are listed with the error in ``summary.errors`` (the caller must not emit them)."""
    hw = load(target) if not isinstance(target, HardwareSpec) else target
    lowers: dict[tuple, bool] = {}

    failed: dict[tuple, str] = {}  # probe key -> the error of a probe that raised

    def torch_penalty(plan: FusionPlan, chosen: tuple[Tiling, ...],
                      isa: tuple[tuple[int, str], ...]) -> tuple[float, str | None]:
        """The extra predicted cost of the groups the backend would run as torch, and the first error
        of a probe that raised (such a group counts as one the backend cannot lower)."""
        if fallback is None:
            return 0.0, None
        extra, error = 0.0, None
        by_group = dict(isa)
        for gi, t in enumerate(chosen):
            key = (tuple(g.nodes for g in plan.groups), plan.program.hash, gi, t.values, by_group.get(gi))
            if key not in lowers:
                try:
                    lowers[key] = bool(fallback(plan, gi, t, by_group.get(gi)))
                except Exception as exc:  # a crashing lowering rejects this candidate, never the enumeration
                    lowers[key] = True
                    failed[key] = f"{error_line(exc)} (lowering group {gi}, {plan.groups[gi].kind}, at {dict(t.values)})"
            error = error or failed.get(key)
            if lowers[key]:
                ops = sum(1 for n in plan.groups[gi].nodes if plan.program.nodes[n].op not in _FREE)
                extra += _group_cost(plan, gi, t, hw) * (2 * max(1, ops) - 1)
        return extra, error
    summary = EnumerationSummary()
    found: dict[tuple, Candidate] = {}
    for variant in nugraph.extract(variants, modulo_commutativity=True):
        summary.variants += 1
        for plan in plans(variant.program):
            summary.plans += 1
            per_group: list[list[Tiling]] = []
            for gi in range(len(plan.groups)):
                sp = space(plan, gi, hw)
                options, stats = tilings(sp)
                summary.tilings_considered += stats["considered"]
                summary.tilings_feasible += stats["feasible"]
                kind = plan.groups[gi].kind
                ranked = sorted(options, key=lambda t, gi=gi, kind=kind: (_bucket(_group_cost(plan, gi, t, hw)),
                                                                         *_tie_break(t, kind), t.values))
                kept = _distinct_shapes(ranked, max(tilings_per_group, k))
                summary.tilings_kept += len(kept)
                per_group.append(kept)
            if any(not opts for opts in per_group):
                continue  # some group has no feasible tiling on this target
            best = [opts[0] for opts in per_group]
            # the best tiling everywhere, then alternatives for the most expensive group
            costs = [_group_cost(plan, gi, best[gi], hw) for gi in range(len(best))]
            worst = max(range(len(best)), key=lambda gi: costs[gi])
            for alt in per_group[worst]:
                chosen = tuple(alt if gi == worst else best[gi] for gi in range(len(best)))
                for isa in isa_choices(plan, hw):
                    report = cost(plan, chosen, hw)
                    penalty, error = torch_penalty(plan, chosen, isa)
                    c = Candidate(variant, plan, chosen, isa, report.seconds + penalty, report)
                    summary.candidates += 1
                    found.setdefault(c.key, c)
                    if error is not None:
                        summary.errors.setdefault(c.key, error)
    # equal-looking candidates (costs within COST_BUCKET) by the tilings' tie-breaks, group by group
    # then fewer operations (a variant that recomputes a row max the model does not charge runs slower)
    ranked = sorted(found.values(), key=lambda c: (_bucket(c.predicted_seconds), tuple(
        _tie_break(t, g.kind) for t, g in zip(c.tilings, c.plan.groups)), _ops(c), c.predicted_seconds, c.key))
    chosen = _diverse(ranked, k)
    summary.kept = len(chosen)
    return chosen, summary


_FREE = ("reshape", "expand_dims", "squeeze", "broadcast_to", "constant")  # views: no kernel of their own


def _ops(c: Candidate) -> int:
    """Compute operations in the candidate's variant (views are free)."""
    return sum(1 for n in c.variant.program.nodes if n.op not in _FREE and n.op != "input")


def _bucket(seconds: float) -> float:
    return round(math.log(seconds) / math.log(COST_BUCKET)) if 0 < seconds < math.inf else math.inf


def _distinct_shapes(ranked: list[Tiling], n: int) -> list[Tiling]:
    """The first ``n`` tilings, preferring distinct tile shapes (launch knobs aside): measuring four
    warp counts of one tile shape teaches less than four tile shapes."""
    knobs = ("num_warps", "num_stages", "grf_mode")
    seen: set[tuple] = set()
    kept: list[Tiling] = []
    for t in ranked:
        shape = tuple((key, v) for key, v in t.values if key not in knobs)
        if shape not in seen and len(kept) < n:
            seen.add(shape)
            kept.append(t)
    return kept + [t for t in ranked if t not in kept][:n - len(kept)]


def _diverse(ranked: list[Candidate], k: int) -> list[Candidate]:
    """The k to measure: the best candidate of each distinct fusion structure (group kinds) and ISA
    choice first, for up to half of the slots (the cost model cannot rank fusion reliably, so
    measurement should see the alternatives), then the rest by predicted cost (other variants and
    tilings of the best ones). Ordered by predicted cost."""
    picked: list[Candidate] = []
    seen: set[tuple] = set()
    for c in ranked:
        shape = (c.plan.name, tuple(i for _, i in c.isa))
        if shape not in seen and len(picked) < max(1, (k + 1) // 2):
            seen.add(shape)
            picked.append(c)
    # then by predicted cost, first one per (plan, tilings, ISA): algebraic variants that differ only
    # in operand order emit the same kernel shape and would be measured twice
    signatures = {_signature(c) for c in picked}
    for second_pass in (False, True):
        for c in ranked:
            if len(picked) >= k:
                break
            if c not in picked and (second_pass or _signature(c) not in signatures):
                signatures.add(_signature(c))
                picked.append(c)
    return sorted(picked, key=lambda c: (c.predicted_seconds, c.key))


def _signature(c: Candidate) -> tuple:
    return (c.plan.name, tuple(t.values for t in c.tilings), c.isa)


def _tie_break(t: Tiling, kind: str | None = None) -> tuple[float, ...]:
    """Among tilings the cost model cannot tell apart: attention as in the fused-attention tutorial; matmul
    by accumulators per thread; otherwise prefer whole rows in one block (one pass over
    HBM, nothing re-read), then about 16 elements per thread (a few 128-bit loads each: enough loads
    in flight without spilling registers), then more elements per program."""
    v = dict(t.values)
    if kind == ATTENTION and {"BLOCK_M", "BLOCK_N", "BLOCK_K"} <= set(v):
        # flash attention: 128 query rows, ~192 live fp32 (scores + accumulator) per thread, 2 stages
        # (H200, Triton 3.6, head dim 128: BLOCK_N=64 with 4 warps beat BLOCK_N=128 with 8 by 15%)
        live = int(v["BLOCK_M"]) * (int(v["BLOCK_N"]) + int(v["BLOCK_K"])) / (int(v.get("num_warps", 4)) * 32)
        return (abs(math.log2(int(v["BLOCK_M"])) - 7),
                abs(math.log2(live / 192)) + 0.25 * abs(int(v.get("num_stages", 2)) - 2), -int(v["BLOCK_N"]))
    if "SPLIT_K" in v:  # split-K GEMV: 16-row K slices (~2 programs per SM), 16K-element tiles, ~64 per thread
        # (H200, sum_matmul 4096^3: SPLIT_K=16, BLOCK_R=1024, 8 warps 34.5 us; SPLIT_K=32 tilings 41-69 us;
        # one run with unsteady timings, benchmarks/results/2026-12-01-sweeps/sum_matmul-splitk)
        tile = int(v["SPLIT_K"]) * int(v["BLOCK_R"])
        per_thread = tile / (int(v.get("num_warps", 4)) * 32)
        return (abs(math.log2(int(v["SPLIT_K"])) - 4), abs(math.log2(tile) - 14), abs(math.log2(per_thread) - 6))
    if kind == MATMUL and int(v.get("BLOCK_N", 16)) < 16 and "BLOCK_K" in v:
        # a GEMV on CUDA cores: ~32 streamed elements per thread per K step (a few 16-byte loads in flight),
        # long contiguous K tiles, then thin row bands (more programs)
        per_thread = int(v["BLOCK_M"]) * int(v["BLOCK_K"]) / (int(v.get("num_warps", 4)) * 32)
        return (abs(math.log2(per_thread) - 5), -int(v["BLOCK_K"]), int(v["BLOCK_M"]))
    if "BLOCK_M" in v:  # matmul tiles: ~64 fp32 accumulators per thread, then deeper pipelines, bigger tiles
        # (H200, Triton 3.6, bf16 4096^3, 128x128 tiles, 8 warps: BLOCK_K=64 at 5 stages 200 us, 4 stages 208,
        # BLOCK_K=128 at 3 stages 221, 2 stages 359; benchmarks/tile_sweep.py)
        acc = int(v["BLOCK_M"]) * int(v["BLOCK_N"])
        per_thread = acc / (int(v.get("num_warps", 4)) * 32)
        return (abs(math.log2(per_thread) - 6) - 0.1 * int(v.get("num_stages", 3)), -acc)
    elems = int(v.get("BLOCK", 1)) * int(v.get("BLOCK_N", 1)) * int(v.get("ROWS_PER_PROGRAM", 1))
    per_thread = elems / (int(v.get("num_warps", 4)) * 32)
    return (0 if "BLOCK_N" not in v else -int(v["BLOCK_N"]), abs(math.log2(max(per_thread, 1e-9)) - 4), -elems)


def _group_cost(plan: FusionPlan, gi: int, t: Tiling, hw: HardwareSpec) -> float:
    """A group's cost alone (for ranking its tilings): roofline on GPUs, its own timeline on Trainium."""
    if hw.kind == "trainium":
        dma, _, compute, _ = trainium_group_work(plan, gi, t, hw)
        seconds = 2 * dma + compute
    else:
        seconds = gpu_group_cost(plan, gi, t, hw).seconds
    return seconds if math.isfinite(seconds) else float("inf")
