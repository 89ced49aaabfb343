"""Domains of partial functions: the conditions under which a normal-form term is defined.

``nf.fn`` (log, sqrt, ``pow[e]``) and ``nf.recip`` register the condition on their argument
(``fn_domain``: p > 0, p >= 0, p != 0) with the innermost ``domain_scope`` when the term is built,
as canonical "dom" atoms (``condition``; bound indices added by ``forall``, index guards by
``guarded``); the Evaluator (``ops``) memoizes each node's conditions next to its value, and the
prover compares the two sides' sets (``prover.domain_mismatch``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction

from .nf import ONE, Atom, Binder, Ix, Mono, Poly, _next_index, _poly_bound, _subst_atom, atom_symbols, ite

# ------------------------------------------------------------------------------------------------
# Domains of partial functions
# ------------------------------------------------------------------------------------------------
# A condition is an atom ("dom", rel, binders, body): for every value of the binders in range (a binder
# of an empty range makes it vacuous), ``body rel 0``, rel one of ">0", ">=0", "!=0". A library op whose
# operands have conditions contributes ("dom", "lib", binders, Poly.atom(("lib", op, attrs, lams, idx)))
# with each lambda's body the product of that operand's conditions: "the op's output at idx is defined",
# an uninterpreted predicate (only ever matched syntactically). Conditions are built canonically (the
# argument scaled, factors known positive or nonzero dropped, binders renamed as sums are), so the same
# condition built twice compares equal; trivially true ones (exp(u) > 0, a dim count != 0) are dropped.
RELS = (">0", ">=0", "!=0")


def fn_domain(name: str) -> str | None:
    """The relation ``p rel 0`` that ``name(p)`` requires, or None for a total function."""
    if name == "log":
        return ">0"
    if name == "sqrt":
        return ">=0"
    if name.startswith("pow[") and name.endswith("]"):
        e = float(name[4:-1])
        if e != int(e):
            return ">=0" if e > 0 else ">0"
        return "!=0" if e < 0 else None
    return None


@dataclass
class Domain:
    """The conditions required while terms are built inside ``domain_scope``; ``positive`` / ``negative``:
    atoms known positive / negative (constrained symbolic scalars), ``dims``: names known >= 1 (other
    index symbols are >= 0)."""

    positive: frozenset = frozenset()
    negative: frozenset = frozenset()
    dims: frozenset = frozenset()
    conditions: set = field(default_factory=set)


_SCOPES: list[Domain] = []


@contextmanager
def domain_scope(positive: Iterable[Atom] = (), negative: Iterable[Atom] = (),
                 dims: Iterable[str] = ()) -> Iterator[Domain]:
    """Collect the conditions that ``fn`` / ``recip`` (and ``require``) register while the block runs."""
    d = Domain(frozenset(positive), frozenset(negative), frozenset(dims))
    _SCOPES.append(d)
    try:
        yield d
    finally:
        _SCOPES.pop()


def require(rel: str, p: Poly) -> None:
    """Register ``p rel 0`` with the innermost ``domain_scope`` (none: nothing to do)."""
    if _SCOPES:
        d = _SCOPES[-1]
        d.conditions.update(conditions(rel, p, d))


def require_all(conds: Iterable[Atom]) -> None:
    if _SCOPES:
        _SCOPES[-1].conditions.update(conds)


def _lower(n: Ix, dims: frozenset) -> int | None:
    """A lower bound of an index expression (dims >= 1, other symbols >= 0), or None."""
    total = n.const
    for s, c in n.terms:
        if c < 0:
            return None
        if isinstance(s, str):
            total += c * (1 if s in dims else 0)
        elif s[0] == "mul":
            a, b = _lower(s[1], dims), _lower(s[2], dims)
            if a is None or b is None:
                return None
            total += c * a * b
        else:
            return None
    return total


def _atom_sign_dom(a: Atom, d: Domain) -> int:
    if (a[0] == "fn" and a[1] == "exp") or a in d.positive:
        return 1
    if a in d.negative:
        return -1
    if a[0] == "dim":
        return 1 if (_lower(a[1], d.dims) or 0) >= 1 else 0
    if a[0] == "recip":
        return _poly_sign(a[1], d)
    return 0


def _poly_sign(p: Poly, d: Domain) -> int:
    """+1 / -1 when every monomial is known positive / negative (a sum over a range not known to be
    non-empty is not), else 0."""
    signs = set()
    for m in p.monos:
        sign = 1 if m.coeff > 0 else -1
        for f in m.factors:
            sign *= _atom_sign_dom(f, d)
        if any((_lower(n, d.dims) or 0) < 1 for _, n in m.binders):
            sign = 0
        signs.add(sign)
    return signs.pop() if len(signs) == 1 else 0


def _nonnegative(p: Poly, d: Domain) -> bool:
    """Every monomial >= 0: a positive coefficient times positive atoms, sqrt atoms (>= 0 where defined)
    and atoms of even multiplicity."""
    for m in p.monos:
        if m.coeff < 0:
            return False
        counts: dict[Atom, int] = {}
        for f in m.factors:
            counts[f] = counts.get(f, 0) + 1
        for f, k in counts.items():
            if k % 2 and _atom_sign_dom(f, d) <= 0 and not (f[0] == "fn" and f[1] == "sqrt"):
                return False
    return True


def conditions(rel: str, p: Poly, d: Domain | None = None) -> list[Atom]:
    """Canonical conditions equivalent to ``p rel 0`` (given the conditions the atoms of ``p`` require
    themselves), binder-free; [] when it is known to hold."""
    d = d if d is not None else Domain()
    if rel == "!=0":
        if _poly_sign(p, d):
            return []
        if len(p.monos) == 1 and not p.monos[0].binders:  # c * f * g != 0 iff f != 0 and g != 0
            out: list[Atom] = []
            for f in sorted(set(p.monos[0].factors), key=repr):
                if _atom_sign_dom(f, d) or f[0] == "recip":  # 1/q is never 0 (q != 0 is its own condition)
                    continue
                if f[0] == "fn" and f[1] == "sqrt":  # sqrt(q) != 0 iff q != 0, given q >= 0
                    out += conditions("!=0", f[2], d)
                    continue
                out.append(condition("!=0", (), Poly.atom(f), d.dims))
            return out
        return [condition("!=0", (), p.scale(1 / p.monos[0].coeff) if p.monos else p, d.dims)]
    if rel not in (">0", ">=0"):
        raise ValueError(f"unknown relation {rel!r}")
    if _poly_sign(p, d) > 0 or (rel == ">=0" and _nonnegative(p, d)):
        return []
    if len(p.monos) == 1:  # scale by |c| and drop the positive factors (outside the monomial's sum)
        m = p.monos[0]
        bound = {v for v, _ in m.binders}
        keep = tuple(f for f in m.factors if not (_atom_sign_dom(f, d) > 0 and not atom_symbols(f) & bound))
        if m.coeff > 0 and not m.binders and len(keep) == 1 and keep[0][0] == "fn" and keep[0][1] == "sqrt":
            return conditions(rel, keep[0][2], d) if rel == ">0" else []  # sqrt(q) > 0 iff q > 0
        p = Poly._build([Mono(Fraction(1 if m.coeff > 0 else -1), m.binders, keep)])
    return [condition(rel, (), p, d.dims)]


def condition(rel: str, binders: Iterable[Binder], body: Poly, dims: Iterable[str] = ()) -> Atom:
    """The condition atom "for all binders: body rel 0", canonical: a binder the body does not use is
    dropped when its range is known non-empty, the others get canonical names (any order)."""
    dims = frozenset(dims)
    binders = list(binders)
    while True:
        used = body.free_index_symbols().union(*(n.symbols() for _, n in binders))
        unused = [k for k, (v, n) in enumerate(binders) if v not in used and (_lower(n, dims) or 0) >= 1]
        if not unused:
            break
        binders.pop(unused[0])
    if not binders:
        return ("dom", rel, (), body)
    own = {v for v, _ in binders}
    base = _next_index(_poly_bound(body) | (body.free_index_symbols() - own))
    names = [f"b{base + i}" for i in range(len(binders))]
    best = None
    for perm in itertools.permutations(range(len(binders))) if len(binders) <= 4 else [range(len(binders))]:
        mapping = {binders[p][0]: Ix.of(names[i]) for i, p in enumerate(perm)}
        new_body = body.subst(mapping)
        new_binders = tuple((names[i], binders[p][1].subst(mapping)) for i, p in enumerate(perm))
        key = (repr(new_body), repr(new_binders))
        if best is None or key < best[0]:
            best = (key, new_binders, new_body)
    assert best is not None
    return ("dom", rel, best[1], best[2])


def forall(binders: Iterable[Binder], conds: Iterable[Atom], dims: Iterable[str] = ()) -> set[Atom]:
    """The conditions, each required for every value of ``binders`` (a reduction's, a sum's)."""
    binders = tuple(binders)
    single = {v: Ix(0) for v, n in binders if n == Ix(1)}  # a range of one element: that element
    rest = tuple(b for b in binders if b[0] not in single)
    out = set()
    for c in conds:
        if single:
            c = _subst_atom(c, single)
        out.add(condition(c[1], rest + c[2], c[3], dims))
    return out


def guarded(op: str, x: Ix | Poly, y: Ix | Poly, conds: Iterable[Atom], dims: Iterable[str] = (),
            holds: bool = True) -> set[Atom]:
    """The conditions, each required only where the comparison ``x op y`` holds (``holds=False``: only
    where it fails): an index comparison (the part of a concat, the kept part of a causal mask) or a real
    one (the selected branch of a ``where``: ``c != 0`` for the first, ``c == 0`` for the second)."""
    out = set()
    for c in conds:  # ONE satisfies every relation (and is no library atom)
        body = ite(op, x, y, c[3], ONE) if holds else ite(op, x, y, ONE, c[3])
        if body != ONE:
            out.add(condition(c[1], c[2], body, dims))
    return out


def normalize_conditions(conds: Iterable[Atom]) -> frozenset[Atom]:
    """The set with implied relations on the same term merged: ``> 0`` subsumes ``>= 0`` and ``!= 0``,
    which together are ``> 0``."""
    by_term: dict[tuple, set[str]] = {}
    for c in conds:
        by_term.setdefault((c[2], c[3]), set()).add(c[1])
    out = set()
    for (binders, body), rels in by_term.items():
        if ">0" in rels or {">=0", "!=0"} <= rels:
            rels = (rels - {">=0", "!=0"}) | {">0"}
        out |= {("dom", r, binders, body) for r in rels}
    return frozenset(out)


def condition_str(c: Atom) -> str:
    rel, binders, body = c[1], c[2], c[3]
    head = f"for {', '.join(f'{v} < {n!r}' for v, n in binders)}: " if binders else ""
    if rel == "lib":
        return f"{head}{body!r} is defined"
    return f"{head}{body!r} {rel[:-1]} 0"
