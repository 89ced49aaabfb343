"""Element-level terms in a normal form: polynomials whose monomials may sum over bound indices.

One module (over the ~450-line guide) on purpose: every stored rule proof records the semantics hash
(``axon_eg.proofs.semantics_hash``), which hashes ``semantics/*.py`` file by file, so moving code out of
this module would make the whole rule store stale without changing a single meaning; and its parts are
one term algebra (index forms whose div/mod atoms nest index forms, atoms that hold polynomials,
binder renaming and canonical order over both, the constructors that apply the lemmas while building).

A tensor program's value at a symbolic index is a :class:`Poly`: a sum of monomials
``coeff * SUM_{b in binders} PROD factors``. Building terms applies, as rewriting steps, the lemmas
of :mod:`axon_eg.semantics.lemmas` (each proved once by induction): sums distribute over +
(additivity), constant factors stay outside their sum (linearity), nested sums are one binder set in
a canonical order (sum swap / Fubini), a sum whose body ignores its index is a multiple of its
length, and exp of a sum is a product of exps. Two programs are then compared by subtracting their
normal forms and asking Z3 about what is left, with every remaining sum replaced by a fresh variable
("purification"). Index expressions are integer affine forms over dims and index variables.

Partial functions carry their domains: ``fn("log", p)``, ``fn("sqrt", p)``, ``fn("pow[e]", p)`` and
``recip(p)`` register the condition on ``p`` they need with the innermost ``domains.domain_scope``
(see :mod:`axon_eg.semantics.domains`), when the term is *built*, so a condition survives even when
its term cancels (log(x) - log(x) is 0 and still needs x > 0).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Union

# ------------------------------------------------------------------------------------------------
# Integer index expressions: const + sum(coeff * symbol); a symbol is a name or a (div|mod) atom
# ------------------------------------------------------------------------------------------------
ISym = Union[str, tuple]


@dataclass(frozen=True, order=True)
class Ix:
    const: int
    terms: tuple[tuple[Any, int], ...] = ()  # sorted (symbol, coeff), coeff != 0

    @staticmethod
    def of(x: int | str | Ix) -> Ix:
        if isinstance(x, Ix):
            return x
        if isinstance(x, int):
            return Ix(x)
        return Ix(0, ((x, 1),))

    @staticmethod
    def _build(const: int, acc: Mapping[Any, int]) -> Ix:
        return Ix(const, tuple(sorted(((s, c) for s, c in acc.items() if c), key=lambda t: repr(t[0]))))

    def __add__(self, other: int | str | Ix) -> Ix:
        o = Ix.of(other)
        acc = dict(self.terms)
        for s, c in o.terms:
            acc[s] = acc.get(s, 0) + c
        return Ix._build(self.const + o.const, acc)

    __radd__ = __add__

    def __neg__(self) -> Ix:
        return Ix(-self.const, tuple((s, -c) for s, c in self.terms))

    def __sub__(self, other: int | str | Ix) -> Ix:
        return self + (-Ix.of(other))

    def scale(self, k: int) -> Ix:
        return Ix._build(self.const * k, {s: c * k for s, c in self.terms})

    def __mul__(self, other: int | Ix) -> Ix:
        """Affine forms multiply only when one side is constant; otherwise the product is an atom."""
        o = Ix.of(other)
        if not o.terms:
            return self.scale(o.const)
        if not self.terms:
            return o.scale(self.const)
        return Ix.of(("mul", self, o))

    def floordiv(self, d: Ix) -> Ix:
        if not d.terms and d.const == 1:
            return self
        if not self.terms and not d.terms:
            return Ix(self.const // d.const)
        return Ix.of(("div", self, d))

    def mod(self, d: Ix) -> Ix:
        if not d.terms and d.const == 1:
            return Ix(0)
        return Ix.of(("mod", self, d))

    @property
    def is_const(self) -> bool:
        return not self.terms

    def symbols(self) -> set[str]:
        out: set[str] = set()
        for s, _ in self.terms:
            if isinstance(s, str):
                out.add(s)
            else:
                out |= s[1].symbols() | s[2].symbols()
        return out

    def subst(self, mapping: Mapping[str, Ix]) -> Ix:
        out = Ix(self.const)
        for s, c in self.terms:
            if isinstance(s, str):
                out = out + (mapping[s] if s in mapping else Ix.of(s)).scale(c)
            else:
                a, b = s[1].subst(mapping), s[2].subst(mapping)
                atom = {"div": a.floordiv, "mod": a.mod}.get(s[0])
                out = out + (atom(b) if atom else a * b).scale(c)
        return out

    def __repr__(self) -> str:
        parts = [f"{c}*{s}" if c != 1 else str(s) for s, c in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)


# ------------------------------------------------------------------------------------------------
# Atoms, monomials, polynomials
# ------------------------------------------------------------------------------------------------
# Atom forms (hashable tuples):
#   ("in", name, (Ix, ...))                 an input tensor element
#   ("sym", name)                           a symbolic scalar (a constant with a variable value)
#   ("dim", Ix)                             an integer expression used as a real (e.g. a mean's n)
#   ("fn", name, Poly)                      an uninterpreted function (exp, log, tanh, erf, ...)
#   ("recip", Poly)                         1 / poly
#   ("ite", (op, Poly|Ix, Poly|Ix), Poly, Poly)   if-then-else on a real or integer comparison
#   ("red", kind, binders, Poly)            max / min reduction over binders
#   ("lib", op, attrs, (Lam, ...), (Ix, ...))     opaque library op of whole input tensors
#   ("dom", rel, binders, Poly)             a domain condition (never in a value; see "Domains" below)
Atom = tuple
Binder = tuple[str, Ix]  # (bound variable, length)


@dataclass(frozen=True)
class Mono:
    coeff: Fraction
    binders: tuple[Binder, ...]
    factors: tuple[Atom, ...]  # sorted, with repetition

    def key(self) -> tuple:
        return (self.binders, self.factors)


@dataclass(frozen=True)
class Poly:
    monos: tuple[Mono, ...]

    # -- construction ----------------------------------------------------------------------------
    @staticmethod
    def const(c: int | float | Fraction) -> Poly:
        c = Fraction(c)
        return Poly((Mono(c, (), ()),)) if c else ZERO

    @staticmethod
    def atom(a: Atom) -> Poly:
        return Poly((Mono(Fraction(1), (), (a,)),))

    @staticmethod
    def _build(monos: Iterable[Mono]) -> Poly:
        acc: dict[tuple, Fraction] = {}
        for m in monos:
            m = _canonical(m)
            acc[m.key()] = acc.get(m.key(), Fraction(0)) + m.coeff
        return Poly(tuple(Mono(c, b, f) for (b, f), c in sorted(acc.items(), key=lambda kv: repr(kv[0])) if c))

    def __add__(self, other: Poly) -> Poly:
        return Poly._build(self.monos + other.monos)

    def __neg__(self) -> Poly:
        return Poly(tuple(Mono(-m.coeff, m.binders, m.factors) for m in self.monos))

    def __sub__(self, other: Poly) -> Poly:
        return self + (-other)

    def __mul__(self, other: Poly) -> Poly:
        out = []
        for a in self.monos:
            for b in other.monos:
                b = _rename_apart(b, {v for v, _ in a.binders} | _bound_names(a))
                out.append(Mono(a.coeff * b.coeff, a.binders + b.binders, tuple(sorted(a.factors + b.factors, key=repr))))
        return Poly._build(out)

    def scale(self, c: Fraction | int | float) -> Poly:
        return Poly._build(Mono(m.coeff * Fraction(c), m.binders, m.factors) for m in self.monos)

    @property
    def is_zero(self) -> bool:
        return not self.monos

    def as_const(self) -> Fraction | None:
        if not self.monos:
            return Fraction(0)
        if len(self.monos) == 1 and not self.monos[0].factors and not self.monos[0].binders:
            return self.monos[0].coeff
        return None

    def free_index_symbols(self) -> set[str]:
        out: set[str] = set()
        for m in self.monos:
            inner: set[str] = set()
            for _, length in m.binders:
                inner |= length.symbols()  # may mention another binder (a sum of a cumsum)
            for f in m.factors:
                inner |= atom_symbols(f)
            out |= inner - {v for v, _ in m.binders}
        return out

    def subst(self, mapping: Mapping[str, Ix]) -> Poly:
        return Poly._build(_subst_mono(m, mapping) for m in self.monos)

    def __repr__(self) -> str:
        return " + ".join(_mono_str(m) for m in self.monos) or "0"


ZERO = Poly(())
ONE = Poly.const(1)


def _mono_str(m: Mono) -> str:
    body = " * ".join([str(m.coeff)] + [_atom_str(f) for f in m.factors])
    if m.binders:
        return f"SUM[{', '.join(f'{v}<{n!r}' for v, n in m.binders)}]({body})"
    return body


def _atom_str(a: Atom) -> str:
    tag = a[0]
    if tag == "in":
        return f"{a[1]}[{', '.join(map(repr, a[2]))}]"
    if tag in ("sym", "dim"):
        return f"{a[1]!r}" if tag == "dim" else a[1]
    if tag == "fn":
        return f"{a[1]}({a[2]!r})"
    if tag == "recip":
        return f"1/({a[1]!r})"
    if tag == "red":
        return f"{a[1]}[{', '.join(f'{v}<{n!r}' for v, n in a[2])}]({a[3]!r})"
    if tag == "dom":
        from .domains import condition_str  # lazy: domains builds on this module's terms

        return condition_str(a)
    return repr(a)


# ------------------------------------------------------------------------------------------------
# Bound variables: substitution, renaming apart, canonical names (Fubini: binder order is free)
# ------------------------------------------------------------------------------------------------
_fresh = itertools.count()


def fresh(prefix: str = "k") -> str:
    return f"{prefix}{next(_fresh)}"


def atom_symbols(a: Atom) -> set[str]:
    """Free index symbols of an atom."""
    tag = a[0]
    if tag == "in":
        return set().union(*(ix.symbols() for ix in a[2])) if a[2] else set()
    if tag == "dim":
        return a[1].symbols()
    if tag == "sym":
        return set()
    if tag in ("fn",):
        return a[2].free_index_symbols()
    if tag == "recip":
        return a[1].free_index_symbols()
    if tag == "ite":
        (_, x, y), t, e = a[1], a[2], a[3]
        return _sym(x) | _sym(y) | t.free_index_symbols() | e.free_index_symbols()
    if tag == "red":
        inner = a[3].free_index_symbols()
        lengths = set().union(*(n.symbols() for _, n in a[2]))
        return (inner - {v for v, _ in a[2]}) | lengths
    if tag == "dom":  # a binder's length may mention another binder of the same condition
        inner = a[3].free_index_symbols() | set().union(*(n.symbols() for _, n in a[2]))
        return inner - {v for v, _ in a[2]}
    if tag == "lib":
        out = set().union(*(ix.symbols() for ix in a[4])) if a[4] else set()
        for lam in a[3]:
            out |= lam[1].free_index_symbols() - set(lam[0])
        return out
    raise ValueError(f"unknown atom {tag}")


def _sym(x: Poly | Ix) -> set[str]:
    return x.symbols() if isinstance(x, Ix) else x.free_index_symbols()


def _bound_names(m: Mono) -> set[str]:
    """Names bound anywhere inside the monomial's atoms (to rename apart from)."""
    out: set[str] = set()
    for f in m.factors:
        out |= _atom_bound(f)
    return out


def _atom_bound(a: Atom) -> set[str]:
    tag = a[0]
    if tag == "fn":
        return _poly_bound(a[2])
    if tag == "recip":
        return _poly_bound(a[1])
    if tag == "ite":
        out = _poly_bound(a[2]) | _poly_bound(a[3])
        for side in a[1][1:]:
            if isinstance(side, Poly):
                out |= _poly_bound(side)
        return out
    if tag in ("red", "dom"):
        return {v for v, _ in a[2]} | _poly_bound(a[3])
    if tag == "lib":
        out = set()
        for lam in a[3]:
            out |= set(lam[0]) | _poly_bound(lam[1])
        return out
    return set()


def _poly_bound(p: Poly) -> set[str]:
    out: set[str] = set()
    for m in p.monos:
        out |= {v for v, _ in m.binders} | _bound_names(m)
    return out


def _subst_atom(a: Atom, mapping: Mapping[str, Ix]) -> Atom:
    tag = a[0]
    if tag == "in":
        return ("in", a[1], tuple(ix.subst(mapping) for ix in a[2]))
    if tag == "dim":
        return ("dim", a[1].subst(mapping))
    if tag == "sym":
        return a
    if tag == "fn":
        return ("fn", a[1], a[2].subst(mapping))
    if tag == "recip":
        return ("recip", a[1].subst(mapping))
    if tag == "ite":
        op, x, y = a[1]
        return ("ite", (op, x.subst(mapping), y.subst(mapping)), a[2].subst(mapping), a[3].subst(mapping))
    if tag == "red":
        inner = {k: v for k, v in mapping.items() if k not in {b for b, _ in a[2]}}
        return ("red", a[1], tuple((b, n.subst(mapping)) for b, n in a[2]), a[3].subst(inner))
    if tag == "dom":
        inner = {k: v for k, v in mapping.items() if k not in {b for b, _ in a[2]}}
        return ("dom", a[1], tuple((b, n.subst(inner)) for b, n in a[2]), a[3].subst(inner))
    if tag == "lib":
        lams = tuple((lam[0], lam[1].subst({k: v for k, v in mapping.items() if k not in lam[0]})) for lam in a[3])
        return ("lib", a[1], a[2], lams, tuple(ix.subst(mapping) for ix in a[4]))
    raise ValueError(f"unknown atom {tag}")


def _subst_mono(m: Mono, mapping: Mapping[str, Ix]) -> Mono:
    bound = {v for v, _ in m.binders}
    inner = {k: v for k, v in mapping.items() if k not in bound}
    return Mono(m.coeff, tuple((v, n.subst(inner)) for v, n in m.binders),
                tuple(sorted((_subst_atom(f, inner) for f in m.factors), key=repr)))


def _rename_apart(m: Mono, avoid: set[str]) -> Mono:
    clash = [v for v, _ in m.binders if v in avoid]
    if not clash:
        return m
    mapping = {v: Ix.of(fresh("k")) for v in clash}
    binders = tuple((mapping[v].terms[0][0] if v in mapping else v, n.subst(mapping)) for v, n in m.binders)
    return Mono(m.coeff, binders, tuple(sorted((_subst_atom(f, mapping) for f in m.factors), key=repr)))


def _canonical(m: Mono) -> Mono:
    """Drop unused binders (a sum of a constant is a multiple of the length) and rename the rest to
    canonical names, trying every order (sum swap), so equal sums compare equal."""
    factors = list(m.factors)
    coeff = m.coeff
    binders = list(m.binders)
    while True:  # a binder is used by a factor or by another binder's length (a sum of a cumsum)
        used = set().union(*(atom_symbols(f) for f in factors), *(n.symbols() for _, n in binders))
        unused = [k for k, (v, _) in enumerate(binders) if v not in used]
        if not unused:
            break
        v, n = binders.pop(unused[0])  # SUM_{v<n} c = n * c  (lemma: sum of a constant)
        if n.is_const:
            coeff *= n.const
        else:
            factors.append(("dim", n))
    if not binders:
        return Mono(coeff, (), tuple(sorted(factors, key=repr)))
    bound = {v for v, _ in binders}
    dependent = [f for f in factors if atom_symbols(f) & bound]
    independent = [f for f in factors if not atom_symbols(f) & bound]
    # names fresh w.r.t. binders inside the dependent factors (independent ones never mention ours)
    base = _next_index(_bound_names(Mono(coeff, (), tuple(dependent))))
    names = [f"b{base + i}" for i in range(len(binders))]
    best = None
    for perm in itertools.permutations(range(len(binders))) if len(binders) <= 4 else [range(len(binders))]:
        mapping = {binders[p][0]: Ix.of(names[i]) for i, p in enumerate(perm)}
        new_dependent = sorted((_subst_atom(f, mapping) for f in dependent), key=repr)
        new_binders = tuple((names[i], binders[p][1].subst(mapping)) for i, p in enumerate(perm))
        key = (repr(new_dependent), repr(new_binders))  # independent factors do not change under renaming
        if best is None or key < best[0]:
            best = (key, new_binders, new_dependent)
    assert best is not None
    return Mono(coeff, best[1], tuple(sorted(best[2] + independent, key=repr)))


def _next_index(names: set[str]) -> int:
    """1 + the largest n among canonical names b<n>, so new canonical names never capture."""
    best = -1
    for n in names:
        if n[:1] == "b" and n[1:].isdigit():
            best = max(best, int(n[1:]))
    return best + 1


def canonical_binders(binders: tuple[Binder, ...], body: Poly) -> tuple[tuple[Binder, ...], Poly]:
    """Canonical names for the binders of a reduction atom (any order; smallest text wins)."""
    base = _next_index(_poly_bound(body))
    names = [f"b{base + i}" for i in range(len(binders))]
    best = None
    for perm in itertools.permutations(range(len(binders))) if len(binders) <= 4 else [range(len(binders))]:
        mapping = {binders[p][0]: Ix.of(names[i]) for i, p in enumerate(perm)}
        new_body = body.subst(mapping)
        new_binders = tuple((names[i], binders[p][1]) for i, p in enumerate(perm))
        key = (repr(new_body), repr(new_binders))
        if best is None or key < best[0]:
            best = (key, new_binders, new_body)
    assert best is not None
    return best[1], best[2]


# ------------------------------------------------------------------------------------------------
# Operations the op semantics use
# ------------------------------------------------------------------------------------------------
def sum_over(var: str, length: Ix, body: Poly) -> Poly:
    """SUM_{var < length} body: each monomial gains the binder (additivity, linearity).
    A sum over one element is that element (sum_range_split with a = 1, n = 0)."""
    if length == Ix(1):
        return body.subst({var: Ix(0)})
    out = []
    for m in body.monos:
        m = _rename_apart(m, {var})
        out.append(Mono(m.coeff, m.binders + ((var, length),), m.factors))
    return Poly._build(out)


def exp(p: Poly) -> Poly:
    """exp of a sum is the product of the exps of its monomials (exp(a+b) = exp(a) exp(b))."""
    out = ONE
    for m in p.monos:
        if not m.factors and not m.binders and m.coeff == 0:
            continue
        out = out * Poly.atom(("fn", "exp", Poly((m,))))
    return out


def fn(name: str, p: Poly) -> Poly:
    """``name(p)``; a partial function (log, sqrt, ``pow[e]``) requires its domain (``require``)."""
    from .domains import fn_domain, require  # lazy: domains builds on this module's terms

    rel = fn_domain(name)
    if rel is not None:
        require(rel, p)
    if name == "log" and len(p.monos) == 1:
        m = p.monos[0]  # log(exp(u) * r) = u + log(r): exp factors (outside any sum: linearity) leave
        bound = {v for v, _ in m.binders}
        exps = [f for f in m.factors if f[0] == "fn" and f[1] == "exp" and not atom_symbols(f) & bound]
        if exps:
            rest = Poly._build([Mono(m.coeff, m.binders, tuple(f for f in m.factors if f not in exps))])
            out = ZERO if rest == ONE else Poly.atom(("fn", "log", rest))
            for e in exps:
                out = out + e[2]
            return out
    return Poly.atom(("fn", name, p))


def recip(p: Poly) -> Poly:
    """1 / p; requires p != 0 (``require``)."""
    from .domains import require  # lazy: domains builds on this module's terms

    c = p.as_const()
    if c is not None and c != 0:
        return Poly.const(1 / c)
    require("!=0", p)
    return Poly.atom(("recip", p))


def ite(op: str, x: Poly | Ix, y: Poly | Ix, then: Poly, other: Poly) -> Poly:
    if then == other:
        return then
    if isinstance(x, Ix) and isinstance(y, Ix) and x.is_const and y.is_const:
        holds = {"<": x.const < y.const, "<=": x.const <= y.const, "==": x.const == y.const}[op]
        return then if holds else other
    if isinstance(x, Poly) and isinstance(y, Poly):
        cx, cy = x.as_const(), y.as_const()
        if cx is not None and cy is not None:
            holds = {"<": cx < cy, "<=": cx <= cy, "==": cx == cy}[op]
            return then if holds else other
    return Poly.atom(("ite", (op, x, y), then, other))


def _sign(a: Atom, positive: frozenset, negative: frozenset) -> int:
    """+1 / -1 when an atom is known positive / negative (symbolic scalars and their reciprocals)."""
    if a in positive or (a[0] == "fn" and a[1] == "exp"):
        return 1
    if a in negative:
        return -1
    if a[0] == "recip" and len(a[1].monos) == 1:
        m = a[1].monos[0]
        if not m.binders and len(m.factors) == 1:
            inner = _sign(m.factors[0], positive, negative)
            return inner * (1 if m.coeff > 0 else -1) if inner else 0
    return 0


def reduce_max(kind: str, binders: tuple[Binder, ...], body: Poly, positive: frozenset = frozenset(),
               negative: frozenset = frozenset()) -> Poly:
    """max/min over binders; a part of the body that ignores the binders comes out
    (max(x + c) = max(x) + c), as does a constant factor (max(c x) = c max(x) for c > 0, c min(x)
    for c < 0), numeric or an atom in ``positive`` (symbolic scalars constrained to be positive)."""
    single = {v: Ix(0) for v, n in binders if n == Ix(1)}  # max over one element is that element
    if single:
        body = body.subst(single)
        binders = tuple(b for b in binders if b[0] not in single)
    bound = {v for v, _ in binders}
    if not binders:
        return body
    inside, outside = [], []
    for m in body.monos:
        syms = set().union(*(n.symbols() for _, n in m.binders))  # max over r of SUM_{c<r+1} x[c]
        for f in m.factors:
            syms |= atom_symbols(f)
        (inside if syms & bound else outside).append(m)
    if not inside:
        return Poly(tuple(outside)) if outside else ZERO
    inner = Poly(tuple(inside))
    scale = Fraction(1)
    if len(inner.monos) == 1 or len({m.coeff for m in inner.monos}) == 1:
        c = inner.monos[0].coeff
        if all(m.coeff == c for m in inner.monos) and c != 0:
            scale = c
            if c < 0:
                kind = "min" if kind == "max" else "max"
            inner = inner.scale(1 / c)
    factor = ONE
    for a in sorted({f for m in inner.monos for f in m.factors}, key=repr):
        sign = _sign(a, positive, negative)  # a signed, binder-free factor common to every monomial
        if sign and not atom_symbols(a) & bound and all(  # nor bound by the monomial's own sum
                a in m.factors and not atom_symbols(a) & {v for v, _ in m.binders} for m in inner.monos):
            inner = Poly._build(Mono(m.coeff, m.binders, _remove_one(m.factors, a)) for m in inner.monos)
            factor = factor * Poly.atom(a)
            if sign < 0:
                kind = "min" if kind == "max" else "max"
    if len(inner.monos) == 1 and inner.monos[0].coeff == 1 and not inner.monos[0].binders \
            and len(inner.monos[0].factors) == 1 and inner.monos[0].factors[0][:2] == ("red", kind):
        nested = inner.monos[0].factors[0]  # max of a max: one max over both binder sets
        binders, inner = tuple(binders) + nested[2], nested[3]
    names, inner = canonical_binders(tuple(binders), inner)
    atom = Poly.atom(("red", kind, names, inner))
    return (atom * factor).scale(scale) + Poly(tuple(outside))


def _remove_one(factors: tuple[Atom, ...], a: Atom) -> tuple[Atom, ...]:
    out = list(factors)
    out.remove(a)
    return tuple(out)
