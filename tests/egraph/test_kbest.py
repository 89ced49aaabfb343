"""k-best extraction (``egraph/kbest.py``) against brute force on random e-graphs with cycles: every class's
list holds k distinct terms of that class, each of the cost it is listed at, cheapest first, and their costs
are the k smallest there are, whatever the graph's shape, the relaxation's order and the e-nodes it skips.
(Which of several terms tied at the k-th cost is kept follows the children's lists, not a global order.)"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from axon_eg.egraph.kbest import k_best_all


class _Graph:
    """The part of a serialized e-graph extraction reads: classes, e-node costs, tensor children, parents."""

    def __init__(self, classes: dict[str, list[str]], cost: dict[str, int], kids: dict[str, list[str]]):
        self.classes, self.cost, self.kids = classes, cost, kids

    def tensor_children(self, nid: str) -> list[str]:
        return self.kids[nid]

    def parents(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for cls, members in self.classes.items():
            for nid in members:
                for ch in set(self.kids[nid]):
                    out.setdefault(ch, []).append(cls)
        return out


@st.composite
def graphs(draw):
    n = draw(st.integers(1, 5))
    names = [f"c{i}" for i in range(n)]
    classes: dict[str, list[str]] = {}
    cost: dict[str, int] = {}
    kids: dict[str, list[str]] = {}
    for c in names:
        classes[c] = []
        for j in range(draw(st.integers(1, 3))):
            nid = f"{c}.{j}"
            classes[c].append(nid)
            cost[nid] = draw(st.integers(1, 4))
            kids[nid] = draw(st.lists(st.sampled_from(names), max_size=2))  # cycles allowed
    return _Graph(classes, cost, kids)


def _brute(g: _Graph, k: int) -> dict[str, list]:
    """Every class's terms of cost at most a bound raised until k of them exist (or no more appear), sorted."""
    def key(term):
        return (term[0], tuple(key(c) for c in term[1]))

    bound = 1
    while True:
        terms: dict[str, dict] = {c: {} for c in g.classes}
        changed = True
        while changed:  # every term of cost <= bound, built bottom up
            changed = False
            for c, members in g.classes.items():
                for nid in members:
                    combos = [((), g.cost[nid])]
                    for ch in g.kids[nid]:
                        combos = [(kids + (t,), c0 + ct) for kids, c0 in combos for t, ct in terms[ch].items()
                                  if c0 + ct <= bound]
                    for kids, total in combos:
                        term = (nid, kids)
                        if total <= bound and term not in terms[c]:
                            terms[c][term] = total
                            changed = True
        out = {c: sorted(((cost, t) for t, cost in ts.items()), key=lambda e: (e[0], key(e[1])))[:k]
               for c, ts in terms.items()}
        if all(len(v) >= k for v in out.values()) or bound >= 12:
            return out
        bound += 1


def _cost(g: _Graph, cls: str, term) -> int | None:
    """The term's tree cost when it is a term of class ``cls`` (each e-node of its class, children in order)."""
    nid, kids = term
    if nid not in g.classes[cls] or len(kids) != len(g.kids[nid]):
        return None
    total = g.cost[nid]
    for ch, kid in zip(g.kids[nid], kids):
        c = _cost(g, ch, kid)
        if c is None:
            return None
        total += c
    return total


@settings(max_examples=150, deadline=None)
@given(graphs(), st.integers(1, 6))
def test_every_class_gets_its_k_cheapest_terms(g, k):
    got = k_best_all(g, k, classes=sorted(g.classes))
    want = _brute(g, k)
    for c in g.classes:
        terms = [t for _, t in got[c]]
        assert len(set(terms)) == len(terms), c
        assert all(_cost(g, c, t) == cost for cost, t in got[c]), c
        assert [cost for cost, _ in got[c]] == sorted(cost for cost, _ in got[c])
        # brute force stops at a bound: compare the costs both have under it (all of a class with fewer terms)
        bound = max((cost for cost, _ in want[c]), default=0)
        assert [cost for cost, _ in got[c] if cost <= bound] == [cost for cost, _ in want[c]], c
