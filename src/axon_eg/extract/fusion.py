"""Fusion plans: partitions of a Variant's DAG into groups that one kernel runs, intermediates on chip.

Every compute node gets a role from the registry (element-wise, reduction, scan, contraction,
library, materializing layout); views (reshape, expand/squeeze, broadcast) ride along with their
consumer. Two groups may merge along a producer -> consumer edge when the pair of group kinds is in
``MERGES`` (element-wise chains; reductions with their producers and consumers, as in norms and
softmax; a matmul with an element-wise or row-reduction prologue and an element-wise or N-reduction
epilogue; matmul -> row reduction -> matmul as attention; a library op with its epilogue) and the
result stays convex (no path leaves the group and comes back). ``plans()`` returns several distinct
partitions, from unfused to greedily fused.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from axon_eg.ir import ops as O
from axon_eg.ir.program import FROZEN, Program

from .recognisers import recognise

ELEMENTWISE, REDUCTION, SCAN, MATMUL, ATTENTION, LIBRARY, LAYOUT = (
    "elementwise", "reduction", "scan", "matmul", "attention", "library", "layout")

# (producer group kind, consumer group kind) -> kind of the merged group
MERGES: dict[tuple[str, str], str] = {
    (ELEMENTWISE, ELEMENTWISE): ELEMENTWISE,
    (ELEMENTWISE, REDUCTION): REDUCTION,  # producers of a reduction (x*x before a mean)
    (REDUCTION, ELEMENTWISE): REDUCTION,  # consumers broadcasting the result back (normalize)
    (REDUCTION, REDUCTION): REDUCTION,  # softmax: max then sum over the same rows
    (ELEMENTWISE, SCAN): SCAN,
    (SCAN, ELEMENTWISE): SCAN,
    (LAYOUT, SCAN): SCAN,  # slice / concat / flip on load: an exclusive or reverse scan's input read in place
    (LAYOUT, ELEMENTWISE): ELEMENTWISE,  # transpose / slice / concat on load: index-mapped element-wise
    (ELEMENTWISE, LAYOUT): ELEMENTWISE,
    (LAYOUT, LAYOUT): LAYOUT,
    (ELEMENTWISE, MATMUL): MATMUL,  # prologue: row scale, activation of an operand
    (LAYOUT, MATMUL): MATMUL,  # transpose on load
    (REDUCTION, MATMUL): MATMUL,  # a row reduction feeding the matmul (rmsnorm + matmul)
    (MATMUL, ELEMENTWISE): MATMUL,  # epilogue: bias, activation, residual, scaling
    (MATMUL, REDUCTION): MATMUL,  # epilogue reduction across N (and softmax rows, see attention)
    (MATMUL, MATMUL): ATTENTION,  # scores -> softmax -> second matmul (only through a row reduction)
    (ATTENTION, ELEMENTWISE): ATTENTION,
    (LIBRARY, ELEMENTWISE): LIBRARY,  # conv / pool + epilogue
}


@functools.lru_cache(maxsize=4096)
def node_kind(op_name: str) -> str | None:
    """The fusion role of an op, from its registry kind (None: not a kernel of its own). Memoized per op
    name (the registry is fixed once an op is registered): the cost model asks it millions of times."""
    op = O.get(op_name)
    if op.kind is O.OpKind.SOURCE or O.is_view(op_name):
        return None
    if op.kind is O.OpKind.LAYOUT and op.meta.get("indices"):  # a gather: one load per element at a computed
        return ELEMENTWISE  # address, fused as element-wise work is (an embedding into the mean that reads it)
    return {
        O.OpKind.ELEMENTWISE: ELEMENTWISE, O.OpKind.REDUCE: REDUCTION, O.OpKind.SCAN: SCAN,
        O.OpKind.CONTRACTION: MATMUL, O.OpKind.LIBRARY: LIBRARY, O.OpKind.LAYOUT: LAYOUT,
    }[op.kind]


@dataclass(frozen=True)
class Group:
    kind: str
    nodes: tuple[int, ...]  # compute and view nodes, sorted

    def anchor(self, program: Program) -> int:
        """The node whose iteration space the kernel loops over: the (last) matmul / reduction /
        library op / scan, else the group's last node."""
        kinds = [node_kind(program.nodes[i].op) for i in self.nodes]
        for kind in (MATMUL, LIBRARY, REDUCTION, SCAN):
            hits = [i for i, k in zip(self.nodes, kinds) if k == kind]
            if hits:
                return hits[-1] if kind != REDUCTION else hits[0]
        return self.nodes[-1]


@dataclass(frozen=True)
class FusionPlan:
    program: Program
    groups: tuple[Group, ...]  # in a topological order

    @property
    def name(self) -> str:
        return "+".join(g.kind for g in self.groups)

    @cached_property
    def memo(self) -> dict[Any, Any]:
        """Facts derived from this plan alone, kept for its lifetime (the cost model's group costs, per
        hardware spec): a plan is immutable, and the enumerator asks the same group's cost at the same
        tiling and ISA choice once per ISA combination of the other groups. Not part of equality."""
        return {}

    def group_of(self) -> dict[int, int]:
        return {n: gi for gi, g in enumerate(self.groups) for n in g.nodes}

    def inputs_of(self, gi: int) -> list[int]:
        """Tensors a group reads from HBM: nodes outside it that its nodes use."""
        got = self.memo.get(("inputs_of", gi))
        if got is None:
            inside = set(self.groups[gi].nodes)
            got = self.memo[("inputs_of", gi)] = tuple(sorted({j for i in inside for j in self.program.nodes[i].inputs
                                                               if j not in inside}))
        return list(got)

    def feeding(self, gi: int, n: int) -> set[int]:
        """The nodes of group ``gi`` that node ``n`` reads, directly or not (e.g. a library op's prologue)."""
        inside, out, stack = set(self.groups[gi].nodes), set(), list(self.program.nodes[n].inputs)
        while stack:
            j = stack.pop()
            if j in inside and j not in out:
                out.add(j)
                stack.extend(self.program.nodes[j].inputs)
        return out

    def sibling_reductions(self, gi: int) -> list[int]:
        """Group ``gi``'s sum/mean/max/min reductions whose input reads no other reduction of the group, in
        node order: a chunked row lowering computes them in one pass over the row (one chunk loop)."""
        program = self.program
        return [n for n in sorted(self.groups[gi].nodes) if program.nodes[n].op in _simple_reductions()
                and not any(O.get(program.nodes[j].op).kind is O.OpKind.REDUCE for j in self.feeding(gi, n))]

    def welford_pairs(self, gi: int) -> list[tuple[int, int]]:
        """(mean, deviation reduction) pairs of group ``gi``: ``m = mean(x)`` one of the sibling reductions and
        ``s = mean|sum(square(x - m))`` over the same axes of the same ``x`` (a variance, a layer / group /
        instance norm): a chunked row lowering computes both in the siblings' pass with Welford's update, not
        in a second pass that re-reads the row."""
        program = self.program
        inside = set(self.groups[gi].nodes)
        means = {n for n in self.sibling_reductions(gi) if program.nodes[n].op == "mean"}
        pairs: list[tuple[int, int]] = []
        for n in sorted(inside - means):
            got = recognise("welford_square", program, n, inside=inside)
            got = recognise("welford_deviation", program, got.nodes["d"], inside=inside, given=got) if got else got
            m = got.nodes.get("m") if got else None
            if m in inside and program.nodes[m].op in ("reshape", "expand_dims", "mean"):
                m = _kept_mean(program, m)  # a mean without its kept axes: where they broadcast back in place
            if m not in means or any(m_ == m for m_, _ in pairs):
                continue
            if recognise("welford_mean", program, m, inside=inside, given=got):
                pairs.append((m, n))
        return pairs

    def online_pairs(self, gi: int) -> list[tuple[int, int]]:
        """(max, exp-sum) pairs of group ``gi``: ``m = max(x)`` one of the sibling reductions and
        ``s = sum(exp(x - m))`` over the same axes of the same ``x`` (softmax's and log-softmax's denominator): a
        chunked row lowering computes both in the siblings' pass, each lane's running sum rescaled by
        ``exp(m_old - m_new)`` when its running max grows (rule ``exp_online_rescale``), and a split reduction
        combines the slices' (max, sum) the same way, so the row is read once for its statistics."""
        program = self.program
        inside = set(self.groups[gi].nodes)
        maxes = {n for n in self.sibling_reductions(gi) if program.nodes[n].op == "max"}
        pairs: list[tuple[int, int]] = []
        for n in sorted(inside - maxes):
            got = recognise("online_exp_sum", program, n, inside=inside)
            if not got:
                continue
            found = [j for j in maxes if j in got.matched]
            if len(found) == 1 and not any(found[0] == m_ for m_, _ in pairs):
                pairs.append((found[0], n))
        return pairs

    def row_passes(self, gi: int, chunked: bool = True) -> int:
        """Passes over the row of a chunked row reduction of group ``gi``: one for the sibling reductions
        (:meth:`sibling_reductions`), the deviation reductions Welford's update computes with their means
        (:meth:`welford_pairs`) and the exp-sums computed online with their maxes (:meth:`online_pairs`), one
        per other reduction (a logsumexp's max and sum in one, online too). ``chunked=False``: the levels of
        dependent reductions a row held in one block combines across warps one after another (the online
        forms are for chunks: a softmax's max, then its sum; a logsumexp's likewise)."""
        program = self.program
        siblings = set(self.sibling_reductions(gi)) | {s for _, s in self.welford_pairs(gi)}
        if chunked:
            siblings |= {s for _, s in self.online_pairs(gi)}
        rest = sum(2 if program.nodes[n].op == "logsumexp" and not chunked else 1 for n in self.groups[gi].nodes
                   if n not in siblings and O.get(program.nodes[n].op).kind is O.OpKind.REDUCE)
        return (1 if siblings else 0) + rest

    def static_groups(self) -> frozenset[int]:
        """The groups that depend on frozen parameters alone: every value a group reads, followed through
        views and the groups that computed it, comes from an input whose role is ``frozen`` (module state the
        caller promised not to change behind the tensor's version counter: ``Program.frozen()``, the
        ``freeze`` option) or a constant, never from a user ``input``, at least one from a frozen input; and
        the group writes no program output. A backend may compute them once per version of the tensors they
        read and reuse the result at every call (a gain folded into the next GEMM's weight, a transposed
        weight), charging them nothing per call. Empty unless the program was frozen."""
        got = self.memo.get("static_groups")
        if got is not None:
            return got
        program = self.program
        roles = dict(program.roles)
        owner = self.group_of()
        outputs = set(program.outputs)
        static: set[int] = set()
        for gi, g in enumerate(self.groups):  # topological order: a group's producers are decided before it
            inside = set(g.nodes)
            ok, state = not any(n in outputs for n in inside), False
            seen: set[int] = set()
            stack = [j for n in inside for j in program.nodes[n].inputs if j not in inside]
            while ok and stack:
                j = stack.pop()
                if j in seen:
                    continue
                seen.add(j)
                node = program.nodes[j]
                if node.is_input:
                    ok = state = roles.get(node.attrs["name"], "input") == FROZEN
                elif j in owner:
                    ok = state = owner[j] in static
                elif not node.is_constant:  # a view outside every group: what it views
                    stack.extend(node.inputs)
            if ok and state:  # a group of constants alone (an iota) is not one: nothing would key its cache
                static.add(gi)
        got = self.memo["static_groups"] = frozenset(static)
        return got

    def outputs_of(self, gi: int) -> list[int]:
        """Tensors a group writes to HBM: used outside it, or program outputs."""
        got = self.memo.get(("outputs_of", gi))
        if got is None:
            inside = set(self.groups[gi].nodes)
            users = self.program.users()
            got = self.memo[("outputs_of", gi)] = tuple(sorted(
                i for i in inside if i in self.program.outputs or any(u not in inside for u in users[i])))
        return list(got)


@functools.cache
def _simple_reductions() -> frozenset[str]:
    return frozenset(O.simple_reductions())


def _compute_nodes(program: Program) -> list[int]:
    return [i for i, n in enumerate(program.nodes) if node_kind(n.op) is not None]


def _initial(program: Program) -> dict[int, list[int]]:
    """One group per compute node; each view joins the group of its (first) consumer."""
    owner: dict[int, int] = {i: i for i in _compute_nodes(program)}
    users = program.users()
    for i in reversed(range(len(program.nodes))):
        n = program.nodes[i]
        if O.is_source(n.op) or i in owner:
            continue
        consumers = [u for u in users[i] if u in owner]
        if consumers:
            owner[i] = owner[consumers[0]]
        elif viewed_output_source(program, i) is None:  # a view of an input as an output: a copy of its own
            owner[i] = i
        # else a flat view of a computed value as an output: no kernel, its group writes into the output
    groups: dict[int, list[int]] = {}
    for node, root in owner.items():
        groups.setdefault(root, []).append(node)
    return groups


def viewed_output_source(program: Program, o: int) -> int | None:
    """The computed value whose elements program output ``o`` holds in the same row-major order when ``o`` is a
    chain of flat views (reshape, expand_dims, squeeze) of it read by nothing else (a 3-D matmul's ``[B * M, N]``
    result viewed back as ``[B, M, N]``): the group computing it writes straight into the output's buffer, so the
    view is no kernel. None otherwise (an input's view, a value that is an output itself or read elsewhere)."""
    if o not in program.outputs:
        return None
    users = program.users()
    n = o
    while program.nodes[n].op in O.flat_views():
        n = program.nodes[n].inputs[0]
        if n in program.outputs or len(users[n]) != 1:
            return None
    return n if n != o and node_kind(program.nodes[n].op) is not None else None


def _kind(program: Program, nodes: Iterable[int]) -> str:
    kinds = {node_kind(program.nodes[i].op) for i in nodes} - {None}
    if kinds == {LAYOUT}:
        return LAYOUT  # a pure data movement kernel (transpose through shared-memory tiles)
    for k in (MATMUL, LIBRARY, SCAN, REDUCTION):
        if k in kinds:
            if k == MATMUL and sum(1 for i in nodes if node_kind(program.nodes[i].op) == MATMUL) > 1:
                return ATTENTION
            return k
    return ELEMENTWISE


def _allowed(program: Program, producer: set[int], consumer: set[int], allowed: set[tuple[str, str]]) -> bool:
    pair = (_kind(program, producer), _kind(program, consumer))
    if pair not in allowed:
        return False
    if MERGES[pair] == REDUCTION and len(_reduction_spaces(program, producer | consumer)) > 1:
        return False  # one kernel reduces one set of rows: a mean of the row sums is a second kernel
    if pair == (MATMUL, MATMUL):  # attention: the scores reach the second matmul through a row reduction
        has_reduction = any(node_kind(program.nodes[i].op) == REDUCTION for i in producer)
        second = [i for i in consumer if node_kind(program.nodes[i].op) == MATMUL]
        return has_reduction and any(program.nodes[i].inputs[0] in producer for i in second)
    return True


def _reduction_spaces(program: Program, nodes: Iterable[int]) -> set[tuple]:
    """The (input shape, reduced axes) of the group's reductions: a row-reduction kernel has one."""
    out = set()
    for i in nodes:
        n = program.nodes[i]
        if node_kind(n.op) == REDUCTION:
            shape = tuple(program.concrete_shape(n.inputs[0]))
            axes = tuple(sorted(a % len(shape) for a in n.attrs.get("axes", ()))) if shape else ()
            out.add((shape, axes or tuple(range(len(shape)))))
    return out


def _producers(program: Program, i: int) -> set[int]:
    """The compute nodes a node reads, looking through views (views are recomputed where used)."""
    out: set[int] = set()
    stack = list(program.nodes[i].inputs)
    while stack:
        j = stack.pop()
        if node_kind(program.nodes[j].op) is not None:
            out.add(j)
        elif not O.is_source(program.nodes[j].op):
            stack.extend(program.nodes[j].inputs)
    return out


def _compute_users(program: Program) -> list[list[int]]:
    users: list[list[int]] = [[] for _ in program.nodes]
    for i in range(len(program.nodes)):
        if node_kind(program.nodes[i].op) is not None:
            for j in _producers(program, i):
                users[j].append(i)
    return users


def _convex(program: Program, nodes: set[int]) -> bool:
    """No path (between compute nodes, through views) from the group to outside and back into it."""
    users = _compute_users(program)
    frontier = [u for i in nodes for u in users[i] if u not in nodes]
    seen: set[int] = set()
    while frontier:
        v = frontier.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in nodes:
            return False
        frontier.extend(users[v])
    return True


def _acyclic(program: Program, groups: list[set[int]]) -> bool:
    """Whether the groups can be run one after another: the quotient graph has no cycle (two convex
    groups can still depend on each other through different nodes)."""
    owner = {n: gi for gi, g in enumerate(groups) for n in g if node_kind(program.nodes[n].op) is not None}
    deps = {gi: {owner[j] for n in g for j in _producers(program, n) if j in owner} - {gi}
            for gi, g in enumerate(groups)}
    state: dict[int, int] = {}

    def visit(gi: int) -> bool:  # iterative DFS would be longer; group counts are small
        if state.get(gi) == 1:
            return False
        if state.get(gi) == 2:
            return True
        state[gi] = 1
        ok = all(visit(d) for d in deps[gi])
        state[gi] = 2
        return ok

    return all(visit(gi) for gi in deps)


def _fuse(program: Program, allowed: set[tuple[str, str]], start: list[set[int]] | None = None) -> list[set[int]]:
    """Groups merged greedily along producer -> consumer edges whose kinds are ``allowed``, from one group per
    compute node (or from ``start``), each merge convex and acyclic."""
    groups = [set(g) for g in _initial(program).values()] if start is None else [set(g) for g in start]
    changed = True
    while changed:
        changed = False
        owner = {n: gi for gi, g in enumerate(groups) for n in g}
        for gi in range(len(groups)):
            for n in sorted(groups[gi]):
                for j in sorted(_producers(program, n)):
                    pj = owner.get(j)
                    if pj is None or pj == gi:
                        continue
                    if not _allowed(program, groups[pj], groups[gi], allowed):
                        continue
                    merged = groups[pj] | groups[gi]
                    trial = [merged if k == gi else g for k, g in enumerate(groups) if k != pj]
                    if not _convex(program, merged) or not _acyclic(program, trial):
                        continue
                    groups[gi] = merged
                    groups[pj] = set()
                    changed = True
                    break
                if changed:
                    break
            if changed:
                break
        groups = [g for g in groups if g]
    return groups


def _plan(program: Program, sets: list[set[int]]) -> FusionPlan:
    """Groups in a topological order of the quotient graph (acyclic: every group is convex)."""
    groups = [Group(_kind(program, s), tuple(sorted(s))) for s in sets]
    owner = {n: gi for gi, g in enumerate(groups) for n in g.nodes if node_kind(program.nodes[n].op) is not None}
    deps = {gi: {owner[j] for n in g.nodes for j in _producers(program, n) if j in owner} - {gi}
            for gi, g in enumerate(groups)}
    order: list[Group] = []
    done: set[int] = set()
    while len(done) < len(groups):
        ready = sorted((gi for gi in deps if gi not in done and deps[gi] <= done), key=lambda gi: groups[gi].nodes[0])
        if not ready:
            raise AssertionError("fusion produced a cycle between groups")
        done.add(ready[0])
        order.append(groups[ready[0]])
    return FusionPlan(program, tuple(order))


def regroup(program: Program, sets: list[set[int]]) -> FusionPlan | None:
    """The plan of the given node sets (a backend's derived partition, e.g. a matmul group split around a
    library call), or None when a set is not convex or the sets depend on each other in a cycle."""
    if not all(_convex(program, s) for s in sets) or not _acyclic(program, sets):
        return None
    return _plan(program, sets)


ELEMENTWISE_MERGES = {(ELEMENTWISE, ELEMENTWISE), (LAYOUT, ELEMENTWISE), (ELEMENTWISE, LAYOUT)}
"""The merges of element-wise and data-movement groups alone (no reduction, matmul or library)."""


def merge_elementwise(plan: FusionPlan) -> FusionPlan | None:
    """The plan with its element-wise groups merged along producer -> consumer edges wherever the result
    stays convex and acyclic (``ELEMENTWISE_MERGES``); None when nothing merges. For plans derived by cutting
    groups apart: a matmul's epilogue split from a library GEMM (``silu(x @ g)``) and the next one's
    (``... * (x @ u)``) become one element-wise kernel once both GEMMs have run."""
    program = plan.program
    start = [set(g.nodes) for g in plan.groups]
    merged = _fuse(program, ELEMENTWISE_MERGES, start)
    if len(merged) == len(start):
        return None
    return regroup(program, merged)


def plans(program: Program) -> list[FusionPlan]:
    """Distinct fusion plans, from unfused to greedily fused (deterministic order; the greedy plan last), with the
    plans whose reduction groups are cut by dependency level (``_split_by_level``) before the greedy one."""
    program = program.expand()
    strategies = [
        set(),  # unfused: one kernel per compute op
        {(ELEMENTWISE, ELEMENTWISE), (LAYOUT, ELEMENTWISE)},
        {k for k in MERGES if MATMUL not in k and ATTENTION not in k},  # no matmul prologue/epilogue
        {k for k in MERGES if k != (REDUCTION, MATMUL) and k != (MATMUL, MATMUL)},
        # everything but computed prologues: attention whose q / k come from element-wise work (RoPE) stays an
        # attention group (its lowerings take views of the operands, not computed values), and the transposes
        # and head repeats of its operands stay views it reads, not copies the element-wise work writes
        set(MERGES) - {(ELEMENTWISE, MATMUL), (REDUCTION, MATMUL), (ELEMENTWISE, LAYOUT)},
        set(MERGES),  # greedy: everything the table allows
    ]
    fused = [_plan(program, _fuse(program, {k for k in allowed})) for allowed in strategies]
    # then each plan's reduction groups cut by dependency level, before the greedy plan, which stays last
    cut = [c for c in map(_split_by_level, fused) if c is not None]
    cut += [c for c in map(_sink_tails, fused) if c is not None]
    cut += [c for c in map(_absorb_flips, fused) if c is not None]
    out: list[FusionPlan] = []
    seen = {tuple(g.nodes for g in fused[-1].groups)}
    for plan in fused[:-1] + cut:
        key = tuple(g.nodes for g in plan.groups)
        if key not in seen:
            seen.add(key)
            out.append(plan)
    return out + fused[-1:]


def _reduction_levels(program: Program, nodes: Iterable[int]) -> list[set[int]]:
    """A reduction group's nodes by the dependency level of its reductions: level 0 holds the reductions
    that read no other reduction of the group (with what feeds them and what reads only their results),
    level 1 those reading a level-0 result, ... A node that feeds reductions goes with the first of them; one
    that feeds none with the last level it reads. ``(max(x) - mean(x)) / std(x)``: max, both means and the
    difference, then the squared deviations, their sum and the division."""
    inside = set(nodes)
    users = program.users()
    after: dict[int, int] = {}  # the highest reduction level a node's value depends on (-1: none)
    rlevel: dict[int, int] = {}
    for n in sorted(inside):
        ins = [j for j in program.nodes[n].inputs if j in inside]
        after[n] = max((rlevel[j] if j in rlevel else after[j] for j in ins), default=-1)
        if node_kind(program.nodes[n].op) == REDUCTION:
            rlevel[n] = after[n] + 1
    level: dict[int, int] = dict(rlevel)
    for n in sorted(inside, reverse=True):  # consumers first: a producer goes with the first reduction it feeds
        if n in rlevel:
            continue
        feeds = [level[u] for u in users[n] if u in inside and u in level and _feeds_reduction(u, rlevel, users, inside)]
        level[n] = min(feeds) if feeds else max(after[n], 0)
    out: dict[int, set[int]] = {}
    for n, lv in level.items():
        out.setdefault(lv, set()).add(n)
    return [out[k] for k in sorted(out)]


def _feeds_reduction(n: int, rlevel: dict[int, int], users: list[list[int]], inside: set[int]) -> bool:
    """Whether node ``n`` is a reduction of the group or reaches one inside it."""
    stack, seen = [n], set()
    while stack:
        j = stack.pop()
        if j in rlevel:
            return True
        if j in seen:
            continue
        seen.add(j)
        stack.extend(u for u in users[j] if u in inside)
    return False


def _split_by_level(plan: FusionPlan) -> FusionPlan | None:
    """The plan with each reduction group whose reductions read each other cut into one group per level
    (``_reduction_levels``): every level's reductions are then siblings, which a split reduction can spread
    over the GPU when the rows are few (a statistic of a whole tensor), at one more pass over the input.
    None when no group has two levels, or a cut is not a valid plan."""
    program = plan.program
    sets: list[set[int]] = []
    cut = False
    for g in plan.groups:
        levels = _reduction_levels(program, g.nodes) if g.kind == REDUCTION else [set(g.nodes)]
        cut = cut or len(levels) > 1
        sets.extend(levels)
    return regroup(program, sets) if cut else None


def _sink_tails(plan: FusionPlan) -> FusionPlan | None:
    """The plan with each reduction group's full-width tail (element-wise nodes after its reductions, wider
    than their results, that feed none of them) moved into the one scan group that reads it: the scan then
    computes ``cumsum(x / norm)`` from ``x`` and the row statistic, instead of the reduction group writing the
    normalized tensor for the scan to read back (an L1-normalized cumulative sum: two full-size passes less).
    None when no group has such a tail, or the move is not a valid plan."""
    program = plan.program
    users, owner = program.users(), plan.group_of()
    sets = [set(g.nodes) for g in plan.groups]
    outputs = set(program.outputs)
    moved = False
    for gi, g in enumerate(plan.groups):
        if g.kind != REDUCTION:
            continue
        inside = set(g.nodes)
        reductions = [n for n in inside if node_kind(program.nodes[n].op) == REDUCTION]
        fed = set(reductions).union(*(plan.feeding(gi, r) for r in reductions))
        widest = max(math.prod(program.concrete_shape(r)) for r in reductions)
        tail = {n for n in inside - fed if math.prod(program.concrete_shape(n)) > widest}
        if not tail or tail & outputs:
            continue
        readers = {owner[u] for n in tail for u in users[n] if u not in inside and u in owner}
        if len(readers) != 1 or plan.groups[next(iter(readers))].kind != SCAN:
            continue
        h = readers.pop()
        sets[gi] -= tail
        sets[h] |= tail
        moved = True
    return regroup(program, sets) if moved else None


def _kept_mean(program: Program, view: int) -> int | None:
    """The mean that ``view`` is or views: a mean with its kept axes (itself), or ``mean(x, axes,
    keepdims=False)`` whose shape (its own, or that of reshapes and expand_dims of it) broadcasts against ``x`` as the
    kept mean does (``[C] -> [C, 1, 1]`` for a mean over axes 0, 2 and 3 of ``[N, C, H, W]``: what batch norm in
    training mode subtracts); None otherwise."""
    mean = view
    while program.nodes[mean].op in ("reshape", "expand_dims"):
        mean = program.nodes[mean].inputs[0]
    node = program.nodes[mean]
    if node.op != "mean":
        return None
    if node.attrs.get("keepdims"):
        return mean if view == mean else None
    xs = tuple(program.concrete_shape(node.inputs[0]))
    axes = {int(a) % max(1, len(xs)) for a in node.attrs["axes"]}
    kept = [1 if a in axes else d for a, d in enumerate(xs)]
    vs = list(program.concrete_shape(view))
    if len(vs) > len(kept) or kept[len(kept) - len(vs):] != vs or any(k != 1 for k in kept[:len(kept) - len(vs)]):
        return None
    return mean


def _absorb_flips(plan: FusionPlan) -> FusionPlan | None:
    """The plan with each group that is one ``flip`` along a scan's axis of a scan group's value moved into that
    scan group: the sweep stores the line reversed (``flip(cumsum(flip(x)))``, a reverse scan, in one kernel
    instead of a scan and a copy). None when there is no such group."""
    program = plan.program
    owner = plan.group_of()
    sets = [set(g.nodes) for g in plan.groups]
    moved = False
    for gi, g in enumerate(plan.groups):
        if g.kind != LAYOUT or len(g.nodes) != 1 or program.nodes[g.nodes[0]].op != "flip":
            continue
        n = g.nodes[0]
        h = owner.get(program.nodes[n].inputs[0])
        if h is None or plan.groups[h].kind != SCAN:
            continue
        scans = [j for j in plan.groups[h].nodes if node_kind(program.nodes[j].op) == SCAN]
        shape = program.concrete_shape(n)
        axis = int(program.nodes[scans[-1]].attrs["axis"]) % max(1, len(shape))
        if tuple(program.nodes[n].attrs["axes"]) != (axis,) or shape != program.concrete_shape(scans[-1]):
            continue
        sets[h].add(n)
        sets[gi] = set()
        moved = True
    return regroup(program, [s_ for s_ in sets if s_]) if moved else None


def is_pool(op: str) -> bool:
    """A pooling op (the registry's shape family): a window a kernel of ours may compute output by output."""
    return O.get(op).meta.get("shape_family") == "pool"


def window_producers(plan: FusionPlan, gi: int) -> set[int]:
    """The element-wise nodes of group ``gi`` that feed its pooling (a window kernel computes them again at
    every window position)."""
    program = plan.program
    pools = [n for n in plan.groups[gi].nodes if is_pool(program.nodes[n].op)]
    return {j for p in pools for j in plan.feeding(gi, p) if node_kind(program.nodes[j].op) == ELEMENTWISE}


def reads_through_window(plan: FusionPlan, gi: int, node: int) -> bool:
    """Whether group ``gi`` reads ``node`` only through its one pooling and the pooling's element-wise producers
    (``window_producers``), over the same batch and channel axes: each output element gathers its window from
    ``node``, which a window kernel may then read in another layout (a channels-last conv output)."""
    program = plan.program
    inside = set(plan.groups[gi].nodes)
    pools = [n for n in inside if is_pool(program.nodes[n].op)]
    readers = set(program.users()[node])
    if len(pools) != 1 or not readers or not readers <= {pools[0]} | window_producers(plan, gi):
        return False
    shape, out = program.concrete_shape(node), program.concrete_shape(pools[0])
    return len(shape) == len(out) and tuple(shape[:2]) == tuple(out[:2])


def window_reader(plan: FusionPlan, gi: int) -> int | None:
    """The next group, when it is a pooling group that alone reads library group ``gi``'s library op output,
    through its windows (``reads_through_window``); None otherwise."""
    program = plan.program
    libs = [n for n in plan.groups[gi].nodes if node_kind(program.nodes[n].op) == LIBRARY]
    if len(libs) != 1 or gi + 1 >= len(plan.groups) or libs[0] in program.outputs:
        return None
    nxt = gi + 1
    ok = plan.groups[nxt].kind == LIBRARY and reads_through_window(plan, nxt, libs[0])
    return nxt if ok else None


def into_windows(plan: FusionPlan, windowed: Callable[[FusionPlan, int], bool]) -> FusionPlan | None:
    """The plan with the element-wise values a pooling reads moved into the pooling's group when nothing else
    reads them (a conv's bias and activation before a max pool), for the pooling groups a backend computes
    window by window (``windowed(plan, gi)``, before and after the move): its kernel computes them at each
    window position from the values they are made of, instead of a kernel of their own writing the activated
    tensor for the pooling to read back (a full-size write and read less, the producers' arithmetic once per
    window position). None when no pooling group has such producers, or the move is not a valid plan."""
    program = plan.program
    users, owner = program.users(), plan.group_of()
    sets = [set(g.nodes) for g in plan.groups]
    outputs = set(program.outputs)
    targets = []
    for gi, g in enumerate(plan.groups):
        libs = [n for n in g.nodes if node_kind(program.nodes[n].op) == LIBRARY]
        if g.kind != LIBRARY or len(libs) != 1 or not is_pool(program.nodes[libs[0]].op) or not windowed(plan, gi):
            continue
        size = len(sets[gi])
        frontier = list(program.nodes[libs[0]].inputs)
        while frontier:
            j = frontier.pop()
            node = program.nodes[j]
            if j in sets[gi]:  # a view of the group's own: look through it
                frontier.extend(node.inputs)
                continue
            if O.is_source(node.op) or j in outputs or node_kind(node.op) not in (ELEMENTWISE, None):
                continue
            if any(u not in sets[gi] for u in users[j]):
                continue  # read elsewhere too (or by a node not moved yet: seen again through it)
            sets[owner[j]].discard(j)
            sets[gi].add(j)
            frontier.extend(node.inputs)
        if len(sets[gi]) > size:
            targets.append(libs[0])
    if not targets:
        return None
    moved = regroup(program, [s for s in sets if s])
    if moved is None:
        return None
    where = moved.group_of()
    return moved if all(windowed(moved, where[p]) for p in targets) else None


def check_plan(plan: FusionPlan) -> None:
    """Each compute node in exactly one group; groups ordered so that dependencies come first."""
    program = plan.program
    owner: dict[int, int] = {}
    for gi, g in enumerate(plan.groups):
        for n in g.nodes:
            if n in owner:
                raise AssertionError(f"node {n} in groups {owner[n]} and {gi}")
            owner[n] = gi
    for i in _compute_nodes(program):
        if i not in owner:
            raise AssertionError(f"compute node {i} ({program.nodes[i].op}) is in no group")
    for gi, g in enumerate(plan.groups):
        for n in g.nodes:
            for j in _producers(program, n):
                if owner[j] > gi:
                    raise AssertionError(f"group {gi} reads node {j} computed later by group {owner[j]}")
