"""k-best extraction over a serialized e-graph.

egglog's own ``extract_multiple`` returns at most one term per e-node of the root, so we enumerate
here: every e-class keeps its k cheapest distinct terms (tree cost: an e-node's cost plus its
children's), combined per e-node by a lazy best-first walk over the children's sorted lists, and
the lists are relaxed to a fixed point along parent edges. Terms are finite trees, so cycles in the
e-graph only mean more candidates; with positive costs the fixed point is reached. Ties break on the
e-node ids, so the result is deterministic.
"""

from __future__ import annotations

import heapq
from collections import deque

from .convert import SerializedGraph, Term

Entry = tuple[int, Term]  # (tree cost, term)


class _Terms:
    """Interned terms: a term is an int id for (e-node, child ids), so comparing and hashing
    candidates costs O(arity), not O(term size)."""

    def __init__(self) -> None:
        self.ids: dict[tuple[str, tuple[int, ...]], int] = {}
        self.table: list[tuple[str, tuple[int, ...]]] = []
        self.keys: list[tuple] = []  # a deterministic sort key per term (e-node ids, depth first)

    def intern(self, nid: str, kids: tuple[int, ...]) -> int:
        key = (nid, kids)
        found = self.ids.get(key)
        if found is None:
            found = len(self.table)
            self.ids[key] = found
            self.table.append(key)
            self.keys.append((nid, tuple(self.keys[k] for k in kids)))
        return found

    def nested(self, tid: int) -> Term:
        nid, kids = self.table[tid]
        return (nid, tuple(self.nested(k) for k in kids))


def _combine(node_cost: int, nid: str, lists: list[list[tuple[int, int]]], k: int, terms: _Terms) -> list[tuple[int, int]]:
    """The k cheapest (cost, term id) for one e-node, choosing one entry from each child list."""
    if any(not lst for lst in lists):
        return []
    if not lists:
        return [(node_cost, terms.intern(nid, ()))]
    start = (0,) * len(lists)

    def total(idx: tuple[int, ...]) -> int:
        return node_cost + sum(lst[i][0] for lst, i in zip(lists, idx))

    heap = [(total(start), start)]
    seen = {start}
    out: list[tuple[int, int]] = []
    while heap and len(out) < k:
        cost, idx = heapq.heappop(heap)
        out.append((cost, terms.intern(nid, tuple(lst[i][1] for lst, i in zip(lists, idx)))))
        for j in range(len(idx)):
            if idx[j] + 1 < len(lists[j]):
                nxt = idx[:j] + (idx[j] + 1,) + idx[j + 1:]
                if nxt not in seen:
                    seen.add(nxt)
                    heapq.heappush(heap, (total(nxt), nxt))
    return out


def k_best(g: SerializedGraph, k: int, root: str | None = None) -> list[Entry]:
    """The k cheapest distinct terms of ``root`` (default: the graph's root), cheapest first."""
    root = root or g.root
    if root is None:
        raise ValueError("the serialized e-graph has no root e-class")
    return k_best_all(g, k, classes=[root])[root]


def k_best_all(g: SerializedGraph, k: int, classes: list[str] | None = None,
               max_rounds: int = 10_000) -> dict[str, list[Entry]]:
    """The k cheapest distinct terms of every e-class (returned for ``classes``, default all)."""
    terms = _Terms()
    best: dict[str, list[tuple[int, int]]] = {c: [] for c in g.classes}
    parents = g.parents()
    children = {nid: g.tensor_children(nid) for members in g.classes.values() for nid in members}
    queue = deque(sorted(g.classes))
    queued = set(queue)
    rounds = 0
    while queue:
        rounds += 1
        if rounds > max_rounds * max(1, len(g.classes)):
            raise RuntimeError("k-best extraction did not converge")
        cls = queue.popleft()
        queued.discard(cls)
        candidates: dict[int, int] = {t: c for c, t in best[cls]}
        for nid in g.classes[cls]:
            lists = [best[ch] for ch in children[nid]]
            for cost, t in _combine(g.cost[nid], nid, lists, k, terms):
                if t not in candidates:
                    candidates[t] = cost
        merged = sorted(((c, t) for t, c in candidates.items()), key=lambda e: (e[0], terms.keys[e[1]]))[:k]
        if merged != best[cls]:
            best[cls] = merged
            for p in parents.get(cls, ()):
                if p not in queued:
                    queued.add(p)
                    queue.append(p)
    wanted = classes if classes is not None else list(g.classes)
    return {c: [(cost, terms.nested(t)) for cost, t in best[c]] for c in wanted}
def dag_cost(g: SerializedGraph, term: Term) -> int:
    """Cost of a term with shared subterms counted once (what a DAG evaluation pays)."""
    seen: set[Term] = set()
    total = 0
    stack = [term]
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen.add(t)
        total += g.cost[t[0]]
        stack.extend(t[1])
    return total
