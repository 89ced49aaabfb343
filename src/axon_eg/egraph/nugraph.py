"""The νGraph: an egglog e-graph holding every equivalent variant of a program.

    g = NuGraph(program, rules)          # program: bound dims; composites are expanded on entry,
                                         # a concat of more than MAX_VARIADIC inputs nested (Program.nest_wide)
    report = g.saturate(Limits(iterations=20, nodes=50_000, seconds=2))
    variants = g.extract(k=5)            # the 5 cheapest distinct programs, cheapest first

Saturation runs one iteration at a time from Python so that the limits on iterations, e-nodes and
seconds are checked between iterations, with a back-off scheduler per rule (a rule whose matches
exceed its threshold is skipped and banned for a while, and its threshold doubles) so that
associativity-style rules cannot explode. A rewrite that equates tensors of different shapes or
dtypes raises :class:`UnsoundRewrite` naming the rule.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from egglog import bindings

from axon_eg.errors import AxonError
from axon_eg.ir import ops as O
from axon_eg.ir.program import Program

from . import convert, schema, views
from .check import inconsistencies
from .kbest import dag_cost, k_best, k_best_all
from .patterns import App, Rule, walk
from .rules import compile_rule, match_ruleset

# bytes-equivalent of one flop in the default cost: H200 bf16 peak over HBM bandwidth (~790e12/4.3e12),
# i.e. flops_per_byte(load("h200")); a caller that knows its target passes flops_per_byte(spec)
DEFAULT_FLOPS_PER_BYTE = 184


def flops_per_byte(hw: Any) -> int:
    """Bytes-equivalent of one flop on ``hw`` (a ``HardwareSpec``): its dense bf16 matmul rate over its
    memory bandwidth, measured figures where the file has them, rounded. GPU: tensor-core peak over HBM
    bandwidth (the H200: 790 / 4.3 TFLOP/s per TB/s = 184, ``DEFAULT_FLOPS_PER_BYTE``); Trainium: one
    NeuronCore's Tensor-engine peak over its DMA bandwidth (what it moves between HBM and SBUF)."""
    return hw.flops_per_byte()  # HardwareSpec: the figures each kind of hardware file has


class UnsoundRewrite(AxonError):
    """A rule equated tensors whose shapes or dtypes differ: it cannot be an equivalence."""

    def __init__(self, rule: str, detail: str):
        super().__init__(f"rule {rule!r} is not an equivalence: {detail}")
        self.rule = rule


@dataclass(frozen=True)
class Limits:
    iterations: int = 30
    nodes: int = 100_000
    seconds: float = 10.0
    match_limit: int = 1_000  # back-off: initial per-rule match threshold per iteration
    ban_length: int = 2  # back-off: iterations a rule sits out, doubled each time it is banned


@dataclass
class SaturationReport:
    iterations: int = 0
    enodes: int = 0
    eclasses: int = 0
    stop_reason: str = "not run"
    seconds: float = 0.0
    seconds_per_ruleset: dict[str, float] = field(default_factory=dict)
    matches_per_rule: dict[str, int] = field(default_factory=dict)
    bans: dict[str, int] = field(default_factory=dict)
    unbuildable: list[str] = field(default_factory=list)  # extracted terms whose symbolic rebuild failed, why

    def __str__(self) -> str:
        top = sorted(self.matches_per_rule.items(), key=lambda kv: -kv[1])[:8]
        rules = ", ".join(f"{k}: {v}" for k, v in top) or "none"
        return (f"{self.iterations} iterations, {self.enodes} e-nodes, {self.eclasses} e-classes, "
                f"stopped: {self.stop_reason}, {self.seconds:.3f} s; matches {rules}")


@dataclass(frozen=True)
class Variant:
    """One algebraic variant taken out of the νGraph, as a Program (so the reference can check it)."""

    program: Program
    cost: int | None  # tree cost (what extraction ranks by); None: the program as written, added after them
    dag_cost: int | None  # shared subterms counted once
    rank: int
    rules: tuple[str, ...] = ()  # the rules that created the e-nodes this variant is built from


def _merges(g: convert.SerializedGraph, made: set[str]) -> list[dict[str, str]]:
    """Consistent merges, each as {sibling e-class: the e-node that serves it}. A merge lands in each sibling's
    e-class as an e-node made by a rule with a context, over shared work (its costliest made descendant: the
    stacked weights, or the GEMM over them); each ordering (and each subset) of the siblings made its own, so
    the shared works are taken greedily, the widest first, then in id order, each only where none of its
    e-classes is served yet."""
    cls_of = {nid: c for c, ms in g.classes.items() for nid in ms}
    landed = [nid for nid in sorted(made) if any(m not in made for m in g.classes[cls_of[nid]])]
    by_work: dict[str, list[str]] = {}
    for nid in landed:
        below: set[str] = set()
        stack = [nid]
        while stack:
            for c in g.tensor_children(stack.pop()):
                for m in g.classes[c]:
                    if m in made and m not in below:
                        below.add(m)
                        stack.append(m)
        if below:
            by_work.setdefault(max(sorted(below), key=lambda m: g.cost[m]), []).append(nid)
    served: set[str] = set()
    out: list[dict[str, str]] = []
    for work in sorted(by_work, key=lambda w: (-len(by_work[w]), w)):
        merge = {cls_of[nid]: nid for nid in by_work[work]}
        if len(merge) == len(by_work[work]) and not merge.keys() & served:
            served |= merge.keys()
            out.append(merge)
    return out


def _nodes_of(term: Any) -> set[str]:
    found: set[str] = set()
    stack = [term]
    while stack:
        nid, kids = stack.pop()
        found.add(nid)
        stack.extend(kids)
    return found


def _tree_cost(g: convert.SerializedGraph, term: Any) -> int:
    nid, kids = term
    return g.cost[nid] + sum(_tree_cost(g, k) for k in kids)


def _rules_of(g: convert.SerializedGraph, term: Any) -> tuple[str, ...]:
    return tuple(sorted({rule for nid in _nodes_of(term) for rule in g.made_by.get(nid, ())}))


class NuGraph:
    def __init__(self, program: Program, rules: Iterable[Rule] = (), *,
                 flops_per_byte: int = DEFAULT_FLOPS_PER_BYTE):
        self.original = program
        # a concat wider than the constructors (schema.MAX_VARIADIC) enters as a balanced tree of concats
        self.program = program.expand().specialize_unit_dims().nest_wide(schema.MAX_VARIADIC)
        self.flops_per_byte = flops_per_byte
        self._egraph = bindings.EGraph()
        self._egraph.set_report_level(bindings.TimeOnly())  # per-rule and per-ruleset times in reports
        self._serialized: convert.SerializedGraph | None = None
        self._declared: set[str] = set()
        self._run(schema.prelude())
        text, self._names, self._root = convert.to_egglog(self.program)
        self._declare(schema.constructor_for(n.op, len(n.inputs)).name for n in self.program.nodes)
        self._run(text)
        self._saturate_analysis()
        self._root_class = self._eclass_of(self._root)
        self.rules: list[Rule] = []
        self._ruleset: dict[str, str] = {}
        self._stage: dict[str, str | None] = {}  # a rule's matching stage, run before its ruleset (rules.py)
        self._threshold: dict[str, int] = {}
        self._banned_until: dict[str, int] = {}
        self._times_banned: dict[str, int] = {}
        self._retired: set[str] = set()  # rules with a context, after the iteration they ran in
        self._iteration = 0
        self._broken = False
        self._limits = Limits()
        self.report = SaturationReport()
        self.add_rules(self.relevant(rules))

    # -- egglog plumbing -------------------------------------------------------------------------
    def _run(self, text: str) -> list:
        return self._egraph.run_program(*self._egraph.parse_program(text))

    def _declare(self, names: Iterable[str]) -> None:
        """Declare constructors (and their analyses) the first time a program or rule uses them."""
        todo = [n for n in dict.fromkeys(names) if n not in self._declared]
        for name in todo:  # one program per constructor: egglog takes a long program in more than linear time
            self._run(schema.constructor_block(name, self.flops_per_byte))
            self._declared.add(name)

    def _saturate_analysis(self) -> None:
        self._run(f"(run-schedule (saturate (run {schema.ANALYSIS})))")

    def _eclass_of(self, let_name: str) -> str:
        g = self.serialized()
        for cls, members in g.classes.items():
            if any(g.nodes[m]["op"].startswith("root__") for m in members):
                return cls
        raise AxonError(f"νGraph: no root e-class for {let_name}")

    def serialized(self) -> convert.SerializedGraph:
        """The current e-graph as Python data (cached until the next saturation)."""
        if self._serialized is None:
            span = bindings.PanicSpan()
            text = self._egraph.serialize([bindings.Var(span, self._root)]).to_json()
            self._serialized = convert.SerializedGraph.from_json(text)
        return self._serialized

    # -- rules -----------------------------------------------------------------------------------
    def relevant(self, rules: Iterable[Rule]) -> list[Rule]:
        """The rules that can ever match: those whose left-hand ops all occur in the program or in
        the right-hand side of another such rule (a fixed point). The others only cost time."""
        rules = list(rules)
        present = {n.op for n in self.program.nodes}
        lhs_ops = [{p.op for b in r.bound_patterns() for p in walk(b) if isinstance(p, App)} for r in rules]
        rhs_ops = [{p.op for p in walk(r.rhs) if isinstance(p, App)} for r in rules]
        keep = [False] * len(rules)
        changed = True
        while changed:
            changed = False
            for i in range(len(rules)):
                if not keep[i] and lhs_ops[i] <= present:
                    keep[i] = True
                    changed = True
                    present |= rhs_ops[i]
        return [r for r, k in zip(rules, keep) if k]

    def add_rules(self, rules: Iterable[Rule]) -> None:
        for rule in rules:
            if rule.name in self._ruleset:
                raise AxonError(f"νGraph: two rules named {rule.name!r}")
            rs = f"rule{len(self.rules)}"
            self._declare(schema.constructor_for(p.op, len(p.args)).name
                          for side in (rule.lhs, rule.rhs) for p in walk(side) if isinstance(p, App))
            self._run(f"(ruleset {rs})\n{compile_rule(rule, rs)}")
            self.rules.append(rule)
            self._ruleset[rule.name] = rs
            self._stage[rule.name] = match_ruleset(rule, rs)
            self._times_banned[rule.name] = 0
            self._banned_until[rule.name] = 0

    # -- saturation ------------------------------------------------------------------------------
    def enode_count(self) -> int:
        (sizes,) = self._run("(print-size)")
        names = schema.constructor_by_name()
        return sum(n for f, n in sizes.sizes if f in names)

    def saturate(self, limits: Limits = Limits()) -> SaturationReport:
        if self._broken:
            raise AxonError("this νGraph was left inconsistent by an unsound rule; build a new one")
        self._limits = limits
        report = self.report
        start = time.perf_counter()
        stop = "saturated"
        last = 0.0  # the previous iteration's duration: do not start one that would overrun the limit
        for _ in range(limits.iterations):
            if time.perf_counter() - start + last > limits.seconds:
                stop = "time limit"
                break
            began = time.perf_counter()
            if self.enode_count() > limits.nodes:
                stop = "node limit"
                break
            it = self._iteration
            active = [r for r in self.rules if self._banned_until[r.name] <= it and r.name not in self._retired]
            if not active:
                if any(self._banned_until[r.name] > it for r in self.rules):
                    self._iteration += 1
                    continue
                break
            changed = self._iterate(active, limits, report)
            self._retire(active)
            last = time.perf_counter() - began
            self._iteration += 1
            report.iterations += 1
            self._serialized = None
            banned_now = any(self._banned_until[r.name] > self._iteration for r in self.rules)
            if not changed and not banned_now:
                break
        else:
            stop = "iteration limit"
        report.seconds += time.perf_counter() - start
        report.stop_reason = stop
        report.enodes = self.enode_count()
        report.eclasses = sum(1 for c in self.serialized().classes if not c.startswith("Root"))
        return report

    def _iterate(self, active: Sequence[Rule], limits: Limits, report: SaturationReport) -> bool:
        """One iteration: every active rule once (under its back-off threshold), then the analyses.

        Rules run one egglog command per ruleset group (a rule's ``meta["family"]``), so the
        report has the time of each group; a rule whose matches exceed its threshold is skipped
        and banned, its threshold doubling each time."""
        groups: dict[str, list[Rule]] = {}
        for rule in active:
            groups.setdefault(str(rule.meta.get("family", "rules")), []).append(rule)
        changed = False
        current: Sequence[Rule] = ()
        try:
            for group, rules in groups.items():
                current = rules
                thresholds = {r.name: limits.match_limit << self._times_banned[r.name] for r in rules}
                lets = " ".join(f"(let-scheduler b{t} (back-off :match-limit {t} :ban-length 1))"
                                for t in sorted(set(thresholds.values())))
                runs = " ".join(self._stage_run(r.name) + f"(run-with b{thresholds[r.name]} {self._ruleset[r.name]})"
                                for r in rules)
                start = time.perf_counter()
                (out,) = self._run(f"(run-schedule {lets} (seq {runs}))")
                _add(report.seconds_per_ruleset, group, time.perf_counter() - start)
                changed |= out.report.updated
                for it in out.report.iterations:
                    for name, rule_reports in it.rule_set_report.rule_reports.items():
                        if name in thresholds and sum(r.num_matches for r in rule_reports) > thresholds[name]:
                            self._times_banned[name] += 1
                            ban = limits.ban_length << (self._times_banned[name] - 1)
                            self._banned_until[name] = self._iteration + 1 + ban
                            _add(report.bans, name, 1)
                for name, n in out.report.num_matches_per_rule.items():
                    if name in thresholds:
                        _add(report.matches_per_rule, name, n)
            current = ()
            start = time.perf_counter()
            self._saturate_analysis()
            _add(report.seconds_per_ruleset, schema.ANALYSIS, time.perf_counter() - start)
        except bindings.EggSmolError as e:
            self._broken = True
            raise self._diagnose(current or active, str(e)) from None
        return changed

    def _retire(self, ran: Sequence[Rule]) -> None:
        """After an iteration: the rules with a context that ran in it (not backed off) never run again
        (``Rule.context``: they make e-nodes their own context can match)."""
        self._retired |= {r.name for r in ran if r.context and self._banned_until[r.name] <= self._iteration}

    def _stage_run(self, name: str) -> str:
        """The schedule item of rule ``name``'s matching stage ("" for a rule of one stage)."""
        stage = self._stage.get(name)
        return f"(run {stage}) " if stage else ""

    def _diagnose(self, suspects: Sequence[Rule], message: str) -> Exception:
        """Name the rule that broke an analysis: replay the saturation up to the last good iteration
        on a fresh νGraph (no checkpoint is kept on the fast path), then run each suspect alone."""
        replay = NuGraph(self.original, self.rules, flops_per_byte=self.flops_per_byte)
        for _ in range(self._iteration):
            active = [r for r in replay.rules if replay._banned_until[r.name] <= replay._iteration
                      and r.name not in replay._retired]
            replay._iterate(active, self._limits, SaturationReport())
            replay._retire(active)
            replay._iteration += 1
        for rule in suspects:
            replay._run("(push)")
            try:
                replay._run(f"(run-schedule {replay._stage_run(rule.name)}(run {replay._ruleset[rule.name]}) "
                            f"(saturate (run {schema.ANALYSIS})))")
            except bindings.EggSmolError as e:
                return UnsoundRewrite(rule.name, f"it merges tensors of different shape or dtype ({_first_line(str(e))})")
            replay._run("(pop)")
        return UnsoundRewrite("+".join(r.name for r in suspects),
                              f"together they merge tensors of different shape or dtype ({_first_line(message)})")

    # -- extraction ------------------------------------------------------------------------------
    def extract(self, k: int = 1, *, modulo_commutativity: bool = False, structural: int = 0) -> list[Variant]:
        """The k cheapest distinct variants, cheapest first (fewer if fewer exist).

        With ``modulo_commutativity`` variants that differ only in the operand order of commutative
        ops (``mul(g, x)`` vs ``mul(x, g)``) count once, so the k slots go to different algebra.
        ``structural`` more variants follow them: the cheapest of the rest whose skeleton (its
        reductions, scans, contractions and library ops, ``skeleton_key``) none of the variants before
        it has. Re-associations of scalar factors cost the same as the original and can fill every one
        of the k slots; a loss's total taken as the sum of its rows' sums costs one node more and is the
        variant whose row sums fuse into the pass that makes the term."""
        g = self.serialized()
        if not hasattr(self, "_original_key"):
            self._original_key = self.program.canonical().hash
        out: list[Variant] = []
        seen: set = set()
        skeletons: set = set()
        wanted = (k + structural) * 8 if modulo_commutativity else k + structural * 8
        terms: list[Any] = []  # those the variants were built from, cheapest first
        for cost, term in k_best(g, wanted, self._root_class):
            try:
                program = convert.term_to_program(g, term, self.program)
            except AxonError as e:  # symbolic shapes disagree with the generic ones (a collision): never a variant
                self.report.unbuildable.append(f"{type(e).__name__}: {e}")
                continue
            if modulo_commutativity:
                key = commutative_key(program)
                if key in seen:
                    continue
                seen.add(key)
            skeleton = skeleton_key(program)
            if len(out) >= k and skeleton in skeletons:
                continue
            skeletons.add(skeleton)
            same = program.canonical().hash == self._original_key
            out.append(Variant(program, cost, dag_cost(g, term), len(out), () if same else _rules_of(g, term)))
            terms.append(term)
            if len(out) == k + structural:
                break
        if structural and (merged := self._merged(g, terms, skeletons)) is not None:
            out.append(replace(merged, rank=len(out)))
        return out

    def _merged(self, g: convert.SerializedGraph, terms: Sequence[Any], skeletons: set) -> Variant | None:
        """The first of ``terms`` (extracted, cheapest first) in which every sibling of some merge made by a rule
        with a context occurs, with those siblings taken from the merge (one GEMM over stacked weights), when
        its skeleton is new. Tree costs charge the merged GEMM once under every sibling it serves, and the
        weights' stack as a copy per call, which a frozen module builds once, so the k cheapest trees rarely
        hold it; it is ranked downstream at its real cost (``Variant.dag_cost`` and the backends' cost models)."""
        merging = {r.name for r in self.rules if r.context}
        made = {nid for nid, rules in g.made_by.items() if rules and rules <= merging and nid in g.cost}
        merges = _merges(g, made) if made else []
        if not merges:
            return None
        costs = dict(g.cost)  # the merged e-nodes below a serving one are preferred to anything else
        for nid in made:
            costs[nid] = 1
        serving = {nid: cls for merge in merges for cls, nid in merge.items()}
        below = k_best_all(replace(g, cost=costs), 1, classes=sorted({c for ch in serving
                                                                      for c in g.tensor_children(ch)}))
        cls_of = {nid: c for c, ms in g.classes.items() for nid in ms}
        for term in terms:
            present = {cls_of[nid] for nid in _nodes_of(term)}
            use = {cls: nid for merge in merges if merge.keys() <= present for cls, nid in merge.items()}
            if not use:
                continue

            def swap(t: Any) -> Any:
                nid, kids = t
                cls = cls_of[nid]
                if cls in use:
                    return (use[cls], tuple(below[c][0][1] for c in g.tensor_children(use[cls])))
                return (nid, tuple(swap(k) for k in kids))
            merged = swap(term)
            try:
                program = convert.term_to_program(g, merged, self.program)
            except AxonError as e:
                self.report.unbuildable.append(f"{type(e).__name__}: {e}")
                continue
            if skeleton_key(program) in skeletons:
                continue
            return Variant(program, _tree_cost(g, merged), dag_cost(g, merged), 0, _rules_of(g, merged))
        return None

    def best(self) -> Variant:
        return self.extract(1)[0]

    def check(self, seeds: Sequence[int] = (0, 1), rtol: float = 1e-7, atol: float = 1e-9) -> None:
        """Every e-node must compute its e-class's value (float64, random inputs).

        Raises :class:`UnsoundRewrite` naming the rules that created a disagreeing e-node."""
        for seed in seeds:
            bad = inconsistencies(self, seed, rtol, atol)
            if bad:
                rules = sorted({r for b in bad for r in b.rules}) or ["(unknown: an original node disagrees)"]
                first = bad[0]
                raise UnsoundRewrite(
                    "+".join(rules),
                    f"in e-class {first.eclass}, {first.enode} differs from the class value by "
                    f"{first.max_error:.3g} in float64 (seed {seed}); {len(bad)} e-node(s) disagree",
                )

    # -- views -----------------------------------------------------------------------------------
    def eclasses(self) -> list:
        return views.eclasses(self)

    def members(self, eclass: str) -> list[str]:
        return views.members(self, eclass)

    def render(self, center: str | None = None, radius: int = 2) -> str:
        """SVG of the e-graph or of a neighbourhood of ``center`` (text when graphviz is missing)."""
        return views.render(self, center, radius)

    def _repr_html_(self) -> str:
        return views.nugraph_html(self)

    def __repr__(self) -> str:
        g = self.serialized()
        return (f"<NuGraph {self.program.name}: {sum(len(m) for m in g.classes.values()) - 1} e-nodes in "
                f"{len(g.classes) - 1} e-classes, {len(self.rules)} rules>")


def commutative_key(program: Program) -> tuple:
    """A structural key of the program's outputs in which commutative ops' operands are unordered."""
    keys: list = []
    for n in program.nodes:
        kids = [keys[j] for j in n.inputs]
        if O.get(n.op).meta.get("commutative"):
            kids.sort(key=repr)
        keys.append((n.op, n.attrs["name"] if n.is_input else tuple(n.attrs.items()), tuple(kids)))
    return tuple(keys[o] for o in program.outputs)


def skeleton_key(program: Program) -> tuple:
    """The program's structure apart from its element-wise and layout algebra: the multiset of its
    reductions, scans, contractions and library ops, each with its attributes."""
    kinds = {O.OpKind.REDUCE, O.OpKind.SCAN, O.OpKind.CONTRACTION, O.OpKind.LIBRARY}
    return tuple(sorted(repr((n.op, sorted(n.attrs.items()))) for n in program.nodes
                         if O.get(n.op).kind in kinds))


def _add(table: dict, key: str, value: float) -> None:
    table[key] = table.get(key, 0) + value


def _first_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else text
