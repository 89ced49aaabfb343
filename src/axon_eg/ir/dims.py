"""Symbolic dimensions: named sizes (`M`, `K`) and the integer expressions shape rules build from them.

A dimension is either a plain ``int`` or a :class:`Sym`, a polynomial with integer coefficients over
atoms, where an atom is a dimension name or a floor division that could not be simplified. The
polynomial form is canonical, so ``M*N == N*M`` and ``(M + 1) - 1 == M`` hold structurally, which is
what shape checks (matmul contraction, reshape sizes, broadcasting) rely on. Dims that turn out to be
constants are returned as plain ``int``.
"""

from __future__ import annotations

import ast
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Union

from axon_eg.errors import ShapeError

Dim = Union[int, "Sym"]
Shape = tuple[Dim, ...]


@dataclass(frozen=True)
class FloorDiv:
    """An atom ``num // den`` that did not simplify (``den`` > 1, ``num`` not a multiple of it)."""

    num: Dim
    den: Dim

    def __str__(self) -> str:
        return f"({self.num})//{_paren(self.den)}"


Atom = Union[str, FloorDiv]
Monomial = tuple[Atom, ...]


def _atom_key(atom: Atom) -> str:
    return atom if isinstance(atom, str) else "~" + str(atom)


def _paren(d: Dim) -> str:
    s = str(d)
    return s if isinstance(d, int) or s.isidentifier() else f"({s})"


@dataclass(frozen=True)
class Sym:
    """A canonical integer polynomial over dimension atoms: ``terms`` is ((monomial, coeff), ...)."""

    terms: tuple[tuple[Monomial, int], ...]

    # -- construction -------------------------------------------------------------------------
    @staticmethod
    def _build(acc: dict[Monomial, int]) -> Dim:
        terms = tuple(
            sorted(((m, c) for m, c in acc.items() if c != 0), key=lambda t: [_atom_key(a) for a in t[0]])
        )
        if not terms:
            return 0
        if len(terms) == 1 and terms[0][0] == ():
            return terms[0][1]
        return Sym(terms)

    @staticmethod
    def _as_terms(d: Dim) -> dict[Monomial, int]:
        if isinstance(d, Sym):
            return dict(d.terms)
        if isinstance(d, bool) or not isinstance(d, int):
            raise TypeError(f"not a dimension: {d!r}")
        return {(): d} if d else {}

    # -- arithmetic ---------------------------------------------------------------------------
    def __add__(self, other: Dim) -> Dim:
        return add(self, other)

    __radd__ = __add__

    def __sub__(self, other: Dim) -> Dim:
        return add(self, mul(other, -1))

    def __rsub__(self, other: Dim) -> Dim:
        return add(other, mul(self, -1))

    def __mul__(self, other: Dim) -> Dim:
        return mul(self, other)

    __rmul__ = __mul__

    def __floordiv__(self, other: Dim) -> Dim:
        return floordiv(self, other)

    def __rfloordiv__(self, other: Dim) -> Dim:
        return floordiv(other, self)

    def __str__(self) -> str:
        parts: list[str] = []
        for mono, coeff in self.terms:
            factors = [_paren(a) if isinstance(a, FloorDiv) else a for a in mono]
            if not factors:
                body = str(abs(coeff))
            elif abs(coeff) == 1:
                body = "*".join(factors)
            else:
                body = "*".join([str(abs(coeff)), *factors])
            if not parts:
                parts.append(body if coeff > 0 else f"-{body}")
            else:
                parts.append(f"+ {body}" if coeff > 0 else f"- {body}")
        return " ".join(parts)

    def __repr__(self) -> str:
        return f"Sym({str(self)!r})"


def sym(name: str) -> Sym:
    """The dimension named ``name``."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ShapeError(f"dimension names must be identifiers, got {name!r}")
    return Sym((((name,), 1),))


def as_dim(d: object) -> Dim:
    """Accept an int, a name or a Sym and return the canonical Dim."""
    if isinstance(d, bool):
        raise ShapeError(f"not a dimension: {d!r}")
    if isinstance(d, int):
        if d < 0:
            raise ShapeError(f"dimension must be >= 0, got {d}")
        return d
    if isinstance(d, str):
        return as_dim(parse_dim(d))  # "-3" is as negative as -3
    if isinstance(d, Sym):
        return d
    if isinstance(d, numbers.Real) and not isinstance(d, numbers.Integral):  # int(2.5) would give 2
        raise ShapeError(f"not a dimension: {d!r} (dimensions are ints)")
    try:  # numpy integers, torch.SymInt with a hint, ...
        return as_dim(int(d))  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise ShapeError(f"not a dimension: {d!r}") from None


def add(a: Dim, b: Dim) -> Dim:
    acc = Sym._as_terms(a)
    for m, c in Sym._as_terms(b).items():
        acc[m] = acc.get(m, 0) + c
    return Sym._build(acc)


def mul(a: Dim, b: Dim) -> Dim:
    acc: dict[Monomial, int] = {}
    for ma, ca in Sym._as_terms(a).items():
        for mb, cb in Sym._as_terms(b).items():
            m = tuple(sorted(ma + mb, key=_atom_key))
            acc[m] = acc.get(m, 0) + ca * cb
    return Sym._build(acc)


def floordiv(a: Dim, b: Dim) -> Dim:
    if b == 0:
        raise ShapeError("dimension division by zero")
    if b == 1:
        return a
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    if isinstance(b, int) and all(c % b == 0 for c in Sym._as_terms(a).values()):
        return Sym._build({m: c // b for m, c in Sym._as_terms(a).items()})
    if a == b:
        return 1
    exact = _divide_by_monomial(a, b)
    if exact is not None:
        return exact
    return Sym((((FloorDiv(a, b),), 1),))


def _divide_by_monomial(a: Dim, b: Dim) -> Dim | None:
    """``a // b`` when ``b`` is one monomial that divides every term of ``a`` exactly (``(H*G)//H``)."""
    if not isinstance(b, Sym) or len(b.terms) != 1:
        return None
    (mono_b, coeff_b), = b.terms
    acc: dict[Monomial, int] = {}
    for mono, coeff in Sym._as_terms(a).items():
        rest = list(mono)
        for atom in mono_b:
            if atom not in rest:
                return None
            rest.remove(atom)
        if coeff % coeff_b:
            return None
        acc[tuple(rest)] = coeff // coeff_b
    return Sym._build(acc)


def ceildiv(a: Dim, b: Dim) -> Dim:
    return floordiv(add(a, add(b, -1)), b)


def product(dims: tuple[Dim, ...] | list[Dim]) -> Dim:
    out: Dim = 1
    for d in dims:
        out = mul(out, d)
    return out


def names(d: Dim) -> set[str]:
    """The dimension names that occur in ``d``."""
    out: set[str] = set()
    if isinstance(d, Sym):
        for mono, _ in d.terms:
            for atom in mono:
                if isinstance(atom, str):
                    out.add(atom)
                else:
                    out |= names(atom.num) | names(atom.den)
    return out


def evaluate(d: Dim, bindings: Mapping[str, int]) -> int:
    """The integer value of ``d`` with every name bound; raises ShapeError naming an unbound dim."""
    if isinstance(d, int):
        return d
    total = 0
    for mono, coeff in d.terms:
        value = coeff
        for atom in mono:
            if isinstance(atom, str):
                if atom not in bindings:
                    raise ShapeError(f"dimension {atom!r} has no size bound")
                value *= bindings[atom]
            else:
                value *= evaluate(atom.num, bindings) // evaluate(atom.den, bindings)
        total += value
    return total


def substitute(d: Dim, bindings: Mapping[str, Dim]) -> Dim:
    """Replace names by dims (partial bindings allowed)."""
    if isinstance(d, int):
        return d
    total: Dim = 0
    for mono, coeff in d.terms:
        value: Dim = coeff
        for atom in mono:
            if isinstance(atom, str):
                value = mul(value, bindings.get(atom, sym(atom)))
            else:
                value = mul(value, floordiv(substitute(atom.num, bindings), substitute(atom.den, bindings)))
        total = add(total, value)
    return total


_BINOPS = {ast.Add: add, ast.Sub: lambda a, b: add(a, mul(b, -1)), ast.Mult: mul, ast.FloorDiv: floordiv}


def parse_dim(text: str) -> Dim:
    """Parse ``"M"``, ``"128"`` or ``"(H - 3)//2 + 1"`` back into a Dim (the inverse of ``str``)."""

    def walk(node: ast.AST) -> Dim:
        if isinstance(node, ast.Name):
            return sym(node.id)
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return mul(walk(node.operand), -1)
        raise ShapeError(f"cannot parse dimension expression {text!r}")

    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise ShapeError(f"cannot parse dimension expression {text!r}") from None
    return walk(tree.body)


def format_shape(shape: Shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"
