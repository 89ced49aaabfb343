"""``enumerate_candidates``: the k best Candidates by predicted cost across algebraic variants x
fusion plans x tilings x ISA choices, deterministic, with counts of what each level considered and
pruned. What it considers is bounded by counts (``Budget``, scaled by the program's size: variants, ISA
combinations per plan (``isa_subset`` past the budget instead of the product over the groups), families
whose worst group gets alternative tilings, lowering probes), never by the clock; ``enumerate_all`` returns
everything the budget allowed, ranked. ``tiling.rank_tilings`` orders one group's tilings (predicted cost,
then its tile template's tie-break) for the enumerator and for the emitter's autotuning;
``tiling.group_cost`` is a group's predicted cost alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from axon_eg.backends.base import Backend
from axon_eg.backends.base import Fallback as BackendFallback
from axon_eg.egraph.nugraph import NuGraph, Variant
from axon_eg.hw import HardwareSpec, load
from axon_eg.ir import ops as O
from axon_eg.ir.program import Program, with_names

from .cost import CostReport
from .fusion import FusionPlan, plans
from .templates import LAUNCH_KNOBS, SCHEME_KNOBS, Tiling, knobs
from .tiling import bucket, group_cost, rank_tilings, typed_tile


@dataclass(frozen=True)
class Candidate:
    variant: Variant
    plan: FusionPlan
    tilings: tuple[Tiling, ...]
    isa: tuple[tuple[int, str], ...]  # (group, instruction choice)
    predicted_seconds: float
    report: CostReport = field(compare=False, repr=False)
    precision: str = "ieee"  # the fp32 matmul policy it was built under (``validate.PRECISIONS``)

    @property
    def key(self) -> tuple:
        return (self.variant.program.hash, tuple(g.nodes for g in self.plan.groups),
                tuple(t.values for t in self.tilings), self.isa) + ((self.precision,) if self.precision != "ieee" else ())


@dataclass
class EnumerationSummary:
    variants: int = 0
    plans: int = 0
    tilings_considered: int = 0
    tilings_feasible: int = 0
    tilings_kept: int = 0
    candidates: int = 0
    kept: int = 0
    hopeless: int = 0
    """Candidates predicted more than ``HOPELESS`` times the fastest prediction: not measured."""
    isa_pruned: int = 0
    """ISA combinations of the plans' products the budget left out (``Budget.isa_combos``, ``isa_subset``)."""
    families_pruned: int = 0
    """(plan, ISA) families whose worst group got no alternative tilings (``Budget.families``)."""
    errors: dict[tuple, str] = field(default_factory=dict)
    """Candidate key -> the error of the backend's ``fallback`` probe that raised on one of its groups
    (``error_line``); the candidate is ranked as if that group ran as torch, and must not be emitted."""

    def counts(self) -> dict[str, int]:
        """The counts (everything but the errors, which are counted), for a record of the run."""
        return {**{k: v for k, v in vars(self).items() if k != "errors"}, "errors": len(self.errors)}


def error_line(exc: BaseException) -> str:
    """An exception as one line for a table row: its type and the last line of its message, then its notes."""
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    text = f"{type(exc).__name__}: {lines[-1].strip()}" if lines else type(exc).__name__
    notes = [n for n in getattr(exc, "__notes__", ()) if n]
    return text + (f" ({'; '.join(notes)})" if notes else "")


def isa_options(plan: FusionPlan, hw: HardwareSpec, backend: Backend,
                precision: str = "ieee") -> list[tuple[int, list[str]]]:
    """Each group that has an instruction choice, with its choices in the backend's order
    (``Backend.isa_options``): ``(group, [choice, ...])``."""
    out: list[tuple[int, list[str]]] = []
    for gi in range(len(plan.groups)):
        opts = backend.isa_options(plan, gi, hw, precision)
        if opts is not None:
            out.append((gi, list(opts)))
    return out


def isa_choices(plan: FusionPlan, hw: HardwareSpec, backend: Backend,
                precision: str = "ieee") -> list[tuple[tuple[int, str], ...]]:
    """Instruction choices per group: on Trainium a transpose runs on the Tensor engine
    (``nc_transpose``) or, where the chip has it, in the DMA (``dma_transpose``); on GPUs a matmul
    may be ``tl.dot`` (with TMA loads on Hopper), a GEMV on CUDA cores, or the vendor library. Every
    combination (the product over the groups; the enumerator takes a subset of it past
    ``Budget.isa_combos``, ``isa_subset``)."""
    return _product(isa_options(plan, hw, backend, precision))


def _product(options: list[tuple[int, list[str]]]) -> list[tuple[tuple[int, str], ...]]:
    combos: list[tuple[tuple[int, str], ...]] = [()]
    for gi, opts in options:
        combos = [c + ((gi, o),) for c in combos for o in opts]
    return combos


def isa_subset(options: list[tuple[int, list[str]]], estimate: dict[int, dict[str, float]],
               limit: int) -> list[tuple[tuple[int, str], ...]]:
    """At most ``limit`` ISA combinations out of the product of ``options`` (each group's choices), chosen
    by ``estimate`` (group -> choice -> its predicted seconds there; a plan's cost is a sum over its groups),
    in the product's order. First the combination of each group's cheapest choice, then each choice on every
    group that has it (the others at their cheapest: every matmul as the library GEMM, every one as TMA
    loads, ...), then every group at each of its other choices alone, cheapest first. Linear in the choices,
    where the product is exponential in the groups: three fp32 GEMMs on Hopper have 7^3 = 343 combinations,
    this keeps 1 + 7 + 18 of them."""
    cheapest = {gi: min(opts, key=lambda o: (estimate[gi][o], opts.index(o))) for gi, opts in options}
    base_combo = tuple((gi, cheapest[gi]) for gi, _ in options)
    names: list[str] = []
    for _, opts in options:
        names += [o for o in opts if o not in names]
    uniform = [tuple((gi, o if o in opts else cheapest[gi]) for gi, opts in options) for o in names]

    def total(combo: tuple[tuple[int, str], ...]) -> float:
        return sum(estimate[gi][o] for gi, o in combo)

    single = [tuple((g, o if g == gi else cheapest[g]) for g, _ in options)
              for gi, opts in options for o in opts if o != cheapest[gi]]
    single = sorted(single, key=total)  # stable: equal estimates keep the product's order
    picked: list[tuple[tuple[int, str], ...]] = []
    for combo in [base_combo, *uniform, *single]:
        if combo not in picked and len(picked) < limit:
            picked.append(combo)
    radix = [len(opts) for _, opts in options]

    def position(combo: tuple[tuple[int, str], ...]) -> int:
        index = 0
        for (_, o), (_, opts), n in zip(combo, options, radix):
            index = index * n + opts.index(o)
        return index

    return sorted(picked, key=position)


@dataclass(frozen=True)
class Budget:
    """What one enumeration may consider, in counts (never the clock: the same program and options give the
    same candidates, so the same cache keys). :meth:`for_program` scales them by the program's size.

    ``variants`` and ``structural``: algebraic variants planned (``NuGraph.extract``; the program as written
    is always planned too, ``with_original``). ``isa_combos``: ISA combinations per fusion plan; past it, the
    subset ``isa_subset`` keeps (each group's cheapest choice, each choice on every group, each group's other
    choices alone); the product when it fits. ``families``: the (variant, plan, ISA) families per plan whose
    most expensive group also gets its alternative tilings (the plan's cheapest by predicted cost at the best
    tilings; every family still gets its best tilings). ``tilings_per_group``: the tilings kept per group
    (``max(tilings_per_group, k)``, distinct shapes first). Every plan of every variant is enumerated (the
    one-group-per-op plan and the library-GEMM splits, ``Backend.derived_plans``, among them), each at least
    with its cheapest ISA combination and the library GEMM on every matmul where the library can run it."""

    variants: int = 8
    structural: int = 4
    isa_combos: int = 64
    families: int = 16
    tilings_per_group: int = 4
    probes: int = 24

    @classmethod
    def for_program(cls, program: Program) -> Budget:
        """The budget for a program of ``n`` compute ops: the defaults up to ``SMALL_REGION`` ops, then variants
        (6 + 3 at ``SMALL_REGION``), ISA combinations and families in proportion to ``SMALL_REGION / n`` (each
        variant of a larger program costs more: more plans of more groups), at least 2 + 1 variants, 16
        combinations and 4 families (an LSTM step of 18 ops: 2 + 1 variants, 28 combinations, 7 families)."""
        n = compute_ops(program)
        if n <= SMALL_REGION:
            return cls()
        return cls(variants=max(2, 6 * SMALL_REGION // n), structural=max(1, 3 * SMALL_REGION // n),
                   isa_combos=max(16, 64 * SMALL_REGION // n), families=max(4, 16 * SMALL_REGION // n))


SMALL_REGION = 8
"""Compute ops up to which an enumeration gets the full default ``Budget``."""


def compute_ops(program: Program) -> int:
    """The program's compute ops (views, inputs and constants aside): the size budgets scale by."""
    return sum(1 for n in program.nodes if n.op not in _FREE and not n.is_input)


Fallback = BackendFallback
"""``(plan, group, tiling, isa choice) -> True`` when the backend cannot lower the group and would run it
as fp32 torch code (one kernel per op): ``Backend.fallback``."""
HOPELESS = 8.0
"""A candidate predicted more than this many times the fastest prediction gets no measured slot, not even
as the only one of its instruction kinds (measured: fp32 Triton kernels with TMA loads at 264 ms next to a
2.7 ms library GEMM, 30 s of timing for nothing)."""


def renamed(c: Candidate, names: dict[str, str], title: str) -> Candidate:
    """Candidate ``c`` of a canonical program (``canonical_inputs``) for the program its inputs are named from:
    its variant and plan programs with the inputs renamed by ``names`` and the program's name ``title``; the
    plan's groups, the tilings, the ISA choices and the predicted cost are the same."""
    variant = replace(c.variant, program=with_names(c.variant.program, names, title))
    plan = FusionPlan(with_names(c.plan.program, names, title), c.plan.groups)
    return replace(c, variant=variant, plan=plan)


def with_original(nugraph: NuGraph, variants: list[Variant]) -> list[Variant]:
    """``variants`` and, when none of them is it, the program as written: extraction ranks terms by tree
    cost, which counts a shared value once per use, so a re-association can tie with or undercut the original
    and crowd it out (the Llama MLP's ``(x + attn) + mlp``, whose ``x + attn`` the norm computes anyway, came
    out as ``attn + (x + mlp)``: one add more, and the library GEMM lost its fused residual)."""
    original = nugraph.program.canonical().hash
    if any(v.program.canonical().hash == original for v in variants):
        return variants
    return [*variants, Variant(nugraph.program, None, None, len(variants), ())]


def enumerate_candidates(nugraph: NuGraph, target: str | HardwareSpec, k: int = 8, *, backend: Backend,
                         variants: int | None = None,
                         structural: int | None = None, tilings_per_group: int | None = None,
                         fallback: Fallback | None = None, precision: str = "ieee",
                         budget: Budget | None = None) -> tuple[list[Candidate], EnumerationSummary]:
    """The k candidates to measure: of every candidate ``enumerate_all`` ranks, those predicted within
    ``HOPELESS`` times the fastest, picked for coverage (``_diverse``). The arguments are ``enumerate_all``'s."""
    ranked, summary = enumerate_all(nugraph, target, k, backend=backend, variants=variants, structural=structural,
                                    tilings_per_group=tilings_per_group, fallback=fallback, precision=precision,
                                    budget=budget)
    fastest = min((c.predicted_seconds for c in ranked), default=math.inf)
    hopeful = [c for c in ranked if c.predicted_seconds <= HOPELESS * fastest]
    summary.hopeless = len(ranked) - len(hopeful)
    merging = frozenset(r.name for r in nugraph.rules if r.context)
    chosen = _diverse(hopeful or ranked, k, backend, merging)
    summary.kept = len(chosen)
    return chosen, summary


def enumerate_all(nugraph: NuGraph, target: str | HardwareSpec, k: int = 8, *, backend: Backend,
                  variants: int | None = None,
                  structural: int | None = None, tilings_per_group: int | None = None,
                  fallback: Fallback | None = None, precision: str = "ieee",
                  budget: Budget | None = None) -> tuple[list[Candidate], EnumerationSummary]:
    """Every candidate the budget allows, ranked (best first), and the counts of what was considered.
    ``fallback`` (from the backend) marks groups it would run as torch code; their predicted cost is charged
    as one fp32 kernel per op, so a plan the backend lowers whole outranks an equal-looking one it cannot. A
    probe that raises counts as such a group, and the candidates concerned are listed with the error in
    ``summary.errors`` (the caller must not emit them). ``precision`` is the fp32 matmul policy (``ieee``, or
    ``tf32`` where the user allows it). The plans are the registry's (``fusion.plans``) and the backend's
    derived ones (``Backend.derived_plans``: a matmul group split around a library GEMM). The variants planned
    are the ``variants`` cheapest and up to ``structural`` more of skeletons those lack (``NuGraph.extract``),
    and the program as written (``with_original``).

    What is considered is bounded by ``budget`` (default ``Budget.for_program`` of the program: counts scaled
    by its size, never the clock, so the same program always gives the same candidates); ``variants``,
    ``structural`` and ``tilings_per_group`` given here override its fields. Per plan: at most
    ``budget.isa_combos`` ISA combinations at the groups' best tilings, then the most expensive group's other
    kept tilings for the ``budget.families`` cheapest of them. ``summary`` counts what the budget left out."""
    hw = load(target) if not isinstance(target, HardwareSpec) else target
    budget = budget or Budget.for_program(nugraph.program)
    budget = replace(budget, **{name: value for name, value in (("variants", variants), ("structural", structural),
                                                                   ("tilings_per_group", tilings_per_group))
                                if value is not None})
    kept_programs: list = []  # keeps the programs the caches below key by identity alive for the enumeration
    lowers: dict[tuple, bool] = {}
    failed: dict[tuple, str] = {}  # probe key -> the error of a probe that raised
    replaced: dict[tuple, Tiling | None] = {}  # (group, ISA choice) -> the tiling ``for_isa`` puts there

    def probe(plan: FusionPlan, gi: int, t: Tiling, isa_i: str | None) -> tuple:
        """The probe key of group ``gi`` at ``t`` and ``isa_i``, probed once (``lowers[key]``: runs as torch).
        Whether a group lowers depends on the group alone (its nodes in its program), not on the plan around
        it: the key is the group's, so the same group in another plan of the variant is not probed again."""
        g = plan.groups[gi]
        key = (id(plan.program), g.kind, g.nodes, t.values, isa_i)
        if key not in lowers:
            kept_programs.append(plan.program)
            try:
                lowers[key] = bool(fallback(plan, gi, t, isa_i)) if fallback is not None else False
            except Exception as exc:  # a crashing lowering rejects this candidate, never the enumeration
                lowers[key] = True
                failed[key] = f"{error_line(exc)} (lowering a {g.kind} group at {dict(t.values)})"
        return key

    def for_isa(plan: FusionPlan, chosen: tuple[Tiling, ...], isa: tuple[tuple[int, str], ...],
                options: list[list[Tiling]]) -> tuple[Tiling, ...]:
        """Each group's tiling, or where its ISA choice cannot lower it (a split-K tile for a persistent
        kernel), the best-ranked one of the group's tilings that it can."""
        if fallback is None:
            return chosen
        by_group = dict(isa)
        out = list(chosen)
        for gi, t in enumerate(chosen):
            if gi in by_group and lowers[probe(plan, gi, t, by_group[gi])]:
                g = plan.groups[gi]
                scan = (id(plan.program), g.kind, g.nodes, by_group[gi])
                if scan not in replaced:
                    replaced[scan] = first_lowering(plan, gi, options[gi], by_group[gi])
                found = replaced[scan]
                out[gi] = t if found is None else found if found.group == gi else replace(found, group=gi)
        return tuple(out)

    def first_lowering(plan: FusionPlan, gi: int, ranked: list[Tiling], isa_i: str) -> Tiling | None:
        """The best-ranked of the group's tilings that ISA choice ``isa_i`` lowers, asking the backend about at
        most ``budget.probes`` tile shapes (a shape that failed is not asked again at other launch knobs)."""
        failed_shapes: set[tuple] = set()
        for o in ranked:
            shape = tuple((name, v) for name, v in o.values if name not in LAUNCH_KNOBS)
            if shape in failed_shapes:
                continue
            if not lowers[probe(plan, gi, o, isa_i)]:
                return o
            failed_shapes.add(shape)
            if len(failed_shapes) >= budget.probes:
                return None
        return None

    def torch_penalty(plan: FusionPlan, chosen: tuple[Tiling, ...],
                      isa: tuple[tuple[int, str], ...]) -> tuple[list[float], str | None]:
        """The extra predicted cost of each group the backend would run as torch (0 for the others and for the
        plan's static groups, which run once per version of the parameters: ``FusionPlan.static_groups``), and the
        first error of a probe that raised (such a group counts as one the backend cannot lower)."""
        extra = [0.0] * len(chosen)
        if fallback is None:
            return extra, None
        error = None
        by_group = dict(isa)
        for gi, t in enumerate(chosen):
            key = probe(plan, gi, t, by_group.get(gi))
            if error is None and key in failed:
                error = f"{failed[key]} (group {gi})"
            if lowers[key] and gi not in plan.static_groups():  # a static group runs once, as torch or not
                ops = sum(1 for n in plan.groups[gi].nodes if plan.program.nodes[n].op not in _FREE)
                extra[gi] = group_cost(plan, gi, t, hw, backend) * (2 * max(1, ops) - 1)
        return extra, error

    ranked_groups: dict[tuple, tuple[list[Tiling], dict[str, int]]] = {}

    def group_tilings(plan: FusionPlan, gi: int) -> tuple[list[Tiling], dict[str, int]]:
        """Group ``gi``'s feasible tilings ranked (``rank_tilings``) and its space's counts, computed once per
        group of a variant (the same group in another plan of the variant has the same tilings and costs)."""
        g = plan.groups[gi]
        key = (id(plan.program), g.kind, g.nodes)
        got = ranked_groups.get(key)
        if got is None:
            kept_programs.append(plan.program)
            options, stats = backend.templates.space(plan, gi, hw).tilings()
            got = ranked_groups[key] = (rank_tilings(plan, gi, hw, backend.templates, backend.group_cost, options),
                                        stats)
        ranked, stats = got
        return [t if t.group == gi else replace(t, group=gi) for t in ranked], stats

    summary = EnumerationSummary()
    found: dict[tuple, Candidate] = {}

    def add(c: Candidate, error: str | None) -> None:
        summary.candidates += 1
        found.setdefault(c.key, c)
        if error is not None:
            summary.errors.setdefault(c.key, error)

    def evaluate(plan: FusionPlan, variant: Variant, tiled: tuple[Tiling, ...], best: list[Tiling],
                 isa: tuple[tuple[int, str], ...], every: list[list[Tiling]]) -> tuple[Candidate, list[float], str | None]:
        # a library call has no tiling of ours: its group keeps the best, so alternatives collapse
        chosen = tuple(best[gi] if backend.library_call(dict(isa).get(gi)) else t for gi, t in enumerate(tiled))
        chosen = for_isa(plan, chosen, isa, every)
        report = backend.cost(plan, chosen, hw, isa=isa)
        penalty, error = torch_penalty(plan, chosen, isa)
        c = Candidate(variant, plan, chosen, isa, report.seconds + sum(penalty), report, precision)
        if len(report.groups) == len(plan.groups):
            per_group = [g.seconds + p for g, p in zip(report.groups, penalty)]
        else:  # a cost model without per-group seconds: each group charged the whole
            per_group = [c.predicted_seconds] * len(plan.groups)
        return c, per_group, error

    planned = with_original(nugraph, nugraph.extract(budget.variants, modulo_commutativity=True,
                                                     structural=budget.structural))
    for variant in planned:
        summary.variants += 1
        base_plans = plans(variant.program)
        derived = [d for p in base_plans for d in backend.derived_plans(p)]
        seen_plans: set[tuple] = set()
        for plan in base_plans + derived:
            if (shape := tuple(g.nodes for g in plan.groups)) in seen_plans:
                continue
            seen_plans.add(shape)
            summary.plans += 1
            per_group: list[list[Tiling]] = []
            every: list[list[Tiling]] = []  # each group's feasible tilings, ranked (``for_isa`` searches them)
            for gi in range(len(plan.groups)):
                ranked, stats = group_tilings(plan, gi)
                summary.tilings_considered += stats["considered"]
                summary.tilings_feasible += stats["feasible"]
                kept = _distinct_shapes(ranked, max(budget.tilings_per_group, k))
                summary.tilings_kept += len(kept)
                per_group.append(kept)
                every.append(ranked)
            if any(not opts for opts in per_group):
                continue  # some group has no feasible tiling on this target
            best = [opts[0] for opts in per_group]
            # the best tiling everywhere, then alternatives for the most expensive group
            costs = [group_cost(plan, gi, best[gi], hw, backend) for gi in range(len(best))]
            # (no group: nothing to compute, the program returns an input as it is, dropout at p=0 say)
            worst = max(range(len(best)), key=lambda gi: costs[gi], default=-1)
            options = isa_options(plan, hw, backend, precision)
            combos = _product(options) if math.prod(len(o) for _, o in options) <= budget.isa_combos else None
            head = tuple(best)
            if combos is None:  # past the budget: each group's choices priced alone, then ``isa_subset``
                estimate: dict[int, dict[str, float]] = {gi: {} for gi, _ in options}
                for j in range(max(len(o) for _, o in options)):  # priced, not kept (unless isa_subset keeps it)
                    column = tuple((gi, opts[min(j, len(opts) - 1)]) for gi, opts in options)
                    _, per, _ = evaluate(plan, variant, head, best, column, every)
                    for gi, o in column:
                        estimate[gi].setdefault(o, per[gi])
                combos = isa_subset(options, estimate, budget.isa_combos)
                summary.isa_pruned += math.prod(len(o) for _, o in options) - len(combos)
            heads: list[tuple[float, int]] = []
            for i, isa in enumerate(combos):
                c, _, error = evaluate(plan, variant, head, best, isa, every)
                add(c, error)
                heads.append((c.predicted_seconds, i))
            alternatives = per_group[worst][1:] if best else []
            if not alternatives:
                continue
            # alternative tilings of the worst group for the plan's cheapest families (a library call on the
            # worst group has no tiling of ours: its alternatives would all be its head)
            chosen_families = sorted(i for _, i in sorted(heads)[:budget.families]
                                     if not backend.library_call(dict(combos[i]).get(worst)))
            summary.families_pruned += len(combos) - len(sorted(heads)[:budget.families])
            for alt in alternatives:
                tiled = tuple(alt if gi == worst else best[gi] for gi in range(len(best)))
                for i in chosen_families:
                    c, _, error = evaluate(plan, variant, tiled, best, combos[i], every)
                    add(c, error)
    # equal-looking candidates (costs within ``tiling.COST_BUCKET``) by more library GEMMs first (measured on the H200:
    # cuBLAS 186.7 us at 4096^3 bf16 where the model calls our kernels equal, 192.7-201.3 us), then by the
    # tilings' tie-breaks, group by group
    # then fewer operations (a variant that recomputes a row max the model does not charge runs slower)
    # A family (variant, plan, ISA choice) ranks by its cheapest member; inside it the members keep the order
    # they were made in, which is their tilings' rank (``rank_tilings``: equal costs by the tie-break)
    warp = knobs(hw).warp_size
    order = {key: i for i, key in enumerate(found)}
    families: dict[tuple, list[Candidate]] = {}
    for c in found.values():
        families.setdefault(_family(c), []).append(c)
    head = {f: min(members, key=lambda c: order[c.key]) for f, members in families.items()}
    best = {f: min(c.predicted_seconds for c in members) for f, members in families.items()}

    def rank(c: Candidate) -> tuple:
        first = head[_family(c)]
        return (bucket(best[_family(c)]), -sum(backend.library_call(i) for _, i in c.isa),
                tuple(typed_tile(first.plan, gi, t, hw, backend.templates).tie_break(warp)
                      for gi, t in enumerate(first.tilings)),
                _ops(c), best[_family(c)], order[first.key], order[c.key])

    return sorted(found.values(), key=rank), summary


_FREE = (*O.views(), "constant")  # views: no kernel of their own


def _family(c: Candidate) -> tuple:
    return (c.variant.program.hash, tuple(g.nodes for g in c.plan.groups), c.isa)


def _ops(c: Candidate) -> int:
    """Compute operations in the candidate's variant (views are free)."""
    return sum(1 for n in c.variant.program.nodes if n.op not in _FREE and not n.is_input)


def scheme(t: Tiling) -> tuple[str, ...]:
    """The algorithms a tiling chooses: its ``SCHEME_KNOBS`` away from the plain kernel's value (a split above 1,
    a look-back); () for the plain kernel."""
    return tuple(key for key, v in t.values if key in SCHEME_KNOBS and v is not None and v != SCHEME_KNOBS[key])


def _distinct_shapes(ranked: list[Tiling], n: int) -> list[Tiling]:
    """``n`` tilings in rank order: the best of each scheme (:func:`scheme`) first, then distinct tile shapes
    (launch knobs aside; measuring four warp counts of one tile shape teaches less than four tile shapes),
    then the rest by rank."""
    seen: set[tuple] = set()
    kept: list[Tiling] = []
    schemes: set[tuple] = set()
    for t in ranked:
        if scheme(t) not in schemes and len(kept) < n:
            schemes.add(scheme(t))
            seen.add(tuple((key, v) for key, v in t.values if key not in LAUNCH_KNOBS))
            kept.append(t)
    for t in ranked:
        shape = tuple((key, v) for key, v in t.values if key not in LAUNCH_KNOBS)
        if shape not in seen and len(kept) < n:
            seen.add(shape)
            kept.append(t)
    kept += [t for t in ranked if t not in kept][:n - len(kept)]
    return sorted(kept, key=ranked.index)


MERGE_SLOT = 1.5
"""A variant made by a rule with a context (sibling GEMMs merged) gets a slot when its best candidate is
predicted within this factor of the fastest (``_diverse``)."""


def _diverse(ranked: list[Candidate], k: int, backend: Backend, merging: frozenset[str] = frozenset()) -> list[Candidate]:
    """The k to measure, in three passes over the ranking. Where k > 1 and some variant was built by the rules
    ``merging`` (rules with a context: sibling GEMMs merged into one over stacked weights), its best candidate
    goes first when predicted within ``MERGE_SLOT`` of the fastest: a merge trades two library GEMMs for one
    wider GEMM and a fused epilogue for a stack a frozen module builds once, which the cost model ranks no
    better than it ranks fusion against a library. Then coverage: in rank order, each candidate
    that measures a (group, instruction choice) pair no earlier pick measures (a group named by its kind,
    ops and anchor's shape, so the same fusion decision in two variants or two plans is one group): each
    group with a choice under each of its choices (the library GEMM, TMA, persistent and pointer-load
    kernels of every matmul group, fused or split around a library call), as far as k goes.
    The cost model cannot rank fusion or a library against our kernels reliably, so measurement should see
    every alternative before a second tiling of one of them. Then each distinct fusion plan and ISA choice,
    then the rest by rank (other variants and tilings of the best ones). Ordered by predicted cost."""
    picked: list[Candidate] = []
    covered: set[tuple] = set()
    if k > 1 and merging and ranked:
        merged = next((c for c in ranked if merging & set(c.variant.rules)), None)
        if merged is not None and merged.predicted_seconds <= MERGE_SLOT * ranked[0].predicted_seconds:
            picked.append(merged)
            covered |= _teaches(merged, backend)
    for c in ranked:
        if len(picked) >= k:
            break
        if not _teaches(c, backend) <= covered:
            picked.append(c)
            covered |= _teaches(c, backend)
    seen = {(c.plan.name, tuple(i for _, i in c.isa)) for c in picked}
    for c in ranked:
        if len(picked) >= k:
            break
        if (shape := (c.plan.name, tuple(i for _, i in c.isa))) not in seen and c not in picked:
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


def _teaches(c: Candidate, backend: Backend) -> frozenset[tuple]:
    """The (group, instruction choice) pairs measuring ``c`` teaches: each group as its compute ops and its
    anchor's shape, with the group's ISA choice (precision suffix aside); a group without a choice teaches
    its tiling's scheme as its choice when it has one (``"scheme:LOOKBACK"``, :func:`scheme`), else nothing."""
    program, by_group = c.plan.program, dict(c.isa)
    schemes = {t.group: scheme(t) for t in c.tilings}
    pairs = set()
    for gi, g in enumerate(c.plan.groups):
        if gi in by_group:
            choice = backend.isa_family(by_group[gi])
        elif schemes.get(gi):
            choice = "scheme:" + "+".join(schemes[gi])
        else:
            continue
        ops = tuple(sorted(program.nodes[n].op for n in g.nodes if program.nodes[n].op not in _FREE))
        pairs.add((g.kind, ops, tuple(program.concrete_shape(g.anchor(program))), choice))
    return frozenset(pairs)


def _signature(c: Candidate) -> tuple:
    return (c.plan.name, tuple(t.values for t in c.tilings), c.isa)
