"""Numeric evaluation of normal-form terms: a test oracle for the op semantics.

``evaluate_poly(poly, dims, inputs, index)`` gives the float64 value of a :class:`~axon_eg.semantics.nf.Poly`
at concrete dims, input arrays and output index values. Every atom gets its real meaning: input
elements (index expressions are bounds-checked, so an index map that runs off a tensor is an error,
not NumPy wrap-around), symbolic scalars, dims used as reals, the uninterpreted functions of
:mod:`axon_eg.semantics.op_semantics` (exp, log, sqrt, tanh, erf, ``pow[e]``), reciprocals, if-then-else,
max/min reductions, sums over binders (loops; a binder's length may mention another binder of the
same sum, as a cumsum inside a sum does) and library ops, evaluated through the registry reference
on input arrays rebuilt from their lambdas. Comparing the result with
:func:`axon_eg.ir.interpret.interpret` checks the semantics against the reference interpreter.

Values are kept as ``a * exp(e)`` while they are multiplied and added, so that the normal form's
splitting of ``exp(x - m)`` into ``exp(x) * exp(-m)``, and ``log`` of a sum of exps, evaluate without
overflow wherever the reference (which shifts by the max) stays finite.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from axon_eg.ir import ops as O
from axon_eg.ir.interpret import apply_op

from . import nf
from .nf import Ix, Mono, Poly

Scaled = tuple[float, float]  # (a, e) stands for a * exp(e)

DEFAULT_SYMBOLS: dict[str, float] = {"-inf": -math.inf}  # causal_mask's fill


class EvaluationError(ValueError):
    """A term that cannot be evaluated: an unbound index symbol, an out-of-range input index, ..."""


def _erf(x: float) -> float:
    return math.erf(x) if not math.isnan(x) else math.nan


FUNCTIONS: dict[str, Callable[[float], float]] = {
    "exp": lambda x: float(np.exp(x)),
    "log": lambda x: float(np.log(x)),
    "sqrt": lambda x: float(np.sqrt(x)),
    "tanh": math.tanh,
    "erf": _erf,
    "sin": lambda x: float(np.sin(x)),
    "cos": lambda x: float(np.cos(x)),
}


def function(name: str, uf: Mapping[str, Callable[[float], float]] | None = None) -> Callable[[float], float]:
    """The meaning of an uninterpreted function name of the normal form (``uf`` overrides)."""
    if uf and name in uf:
        return uf[name]
    if name in FUNCTIONS:
        return FUNCTIONS[name]
    if name.startswith("pow[") and name.endswith("]"):
        e = float(name[4:-1])
        return lambda x: float(np.power(x, e))
    raise EvaluationError(f"no numeric meaning for the function {name!r}; pass it in uf")


def evaluate_ix(e: Ix, env: Mapping[str, int]) -> int:
    """An integer index expression at concrete values (floor division and modulo, as in Z3 for d > 0)."""
    total = e.const
    for s, c in e.terms:
        if isinstance(s, str):
            try:
                v = env[s]
            except KeyError:
                raise EvaluationError(f"index symbol {s!r} is not bound (in {e!r})") from None
        else:
            a, b = evaluate_ix(s[1], env), evaluate_ix(s[2], env)
            if s[0] == "mul":
                v = a * b
            elif b == 0:
                raise EvaluationError(f"division by zero in {e!r}")
            else:
                v = a // b if s[0] == "div" else a % b
        total += c * v
    return total


def _to_float(x: Scaled) -> float:
    a, e = x
    if e == 0.0:
        return a
    if a == 0.0 and math.isfinite(e):
        return a
    return a * (math.exp(e) if e < 709.0 else math.inf)


def _add(x: Scaled, y: Scaled) -> Scaled:
    (a1, e1), (a2, e2) = x, y
    if a2 == 0.0 and math.isfinite(e2):
        return x
    if a1 == 0.0 and math.isfinite(e1):
        return y
    if not (math.isfinite(e1) and math.isfinite(e2)):
        return (_to_float(x) + _to_float(y), 0.0)
    if e1 >= e2:
        return (a1 + a2 * math.exp(e2 - e1), e1)
    return (a1 * math.exp(e1 - e2) + a2, e2)


def _mul(x: Scaled, y: Scaled) -> Scaled:
    return (x[0] * y[0], x[1] + y[1])


def _binder_order(binders: tuple[nf.Binder, ...]) -> tuple[nf.Binder, tuple[nf.Binder, ...]]:
    """A binder whose length mentions no other binder of the set (outermost first), and the rest."""
    names = {v for v, _ in binders}
    for i, (v, n) in enumerate(binders):
        if not n.symbols() & (names - {v}):
            return (v, n), binders[:i] + binders[i + 1:]
    raise EvaluationError(f"binder lengths depend on each other cyclically: {binders}")


class PolyEvaluator:
    """Evaluates terms at concrete dims and inputs; caches atoms by their free symbols' values."""

    def __init__(self, dims: Mapping[str, int], inputs: Mapping[str, np.ndarray],
                 uf: Mapping[str, Callable[[float], float]] | None = None,
                 symbols: Mapping[str, float] | None = None):
        self.dims = dict(dims)
        self.inputs = {k: np.asarray(v, dtype=np.float64) for k, v in inputs.items()}
        self.uf = dict(uf or {})
        self.symbols = {**DEFAULT_SYMBOLS, **(symbols or {})}
        # id(atom) -> (atom, its free symbols, {values of those symbols: value}); the atom is kept
        # alive so that its id is never reused for another term while cached
        self._cache: dict[int, tuple[nf.Atom, tuple[str, ...], dict[tuple[int, ...], Scaled]]] = {}
        self._syms: dict[int, tuple[Any, frozenset[str]]] = {}
        self._lib: dict[tuple, tuple[Any, Any, np.ndarray]] = {}  # library results, by lambdas and free values

    # -- public ------------------------------------------------------------------------------------
    def evaluate(self, poly: Poly, index: Mapping[str, int]) -> float:
        with np.errstate(all="ignore"):
            return float(_to_float(self.poly(poly, {**self.dims, **index})))

    # -- terms -------------------------------------------------------------------------------------
    def poly(self, p: Poly, env: Mapping[str, int]) -> Scaled:
        total: Scaled = (0.0, 0.0)
        for m in p.monos:
            total = _add(total, self.mono(m, env))
        return total

    def mono(self, m: Mono, env: Mapping[str, int]) -> Scaled:
        value = self._sum(m.binders, m.factors, env)
        return (float(m.coeff) * value[0], value[1])

    def _sum(self, binders: tuple[nf.Binder, ...], factors: tuple[nf.Atom, ...], env: Mapping[str, int]) -> Scaled:
        if not binders:
            return self._product(factors, env)
        bound = {v for v, _ in binders}
        outside = tuple(f for f in factors if not self._symbols(f) & bound)
        inside = tuple(f for f in factors if self._symbols(f) & bound)
        groups = self._independent(binders, inside)
        if len(groups) > 1:  # SUM_{a,b} f(a) g(b) = SUM_a f(a) * SUM_b g(b): a product of smaller loops
            total = self._product(outside, env)
            for group_binders, group_factors in groups:
                total = _mul(total, self._sum(group_binders, group_factors, env))
            return total
        (v, n), rest = _binder_order(binders)
        total: Scaled = (0.0, 0.0)
        inner = dict(env)
        for k in range(evaluate_ix(n, env)):
            inner[v] = k
            total = _add(total, self._sum(rest, inside, inner))
        return _mul(total, self._product(outside, env))

    def _independent(self, binders: tuple[nf.Binder, ...], factors: tuple[nf.Atom, ...]) -> list[tuple[tuple, tuple]]:
        """The binders in groups that no factor or length connects, each with the factors it owns."""
        group = {v: i for i, (v, _) in enumerate(binders)}

        def join(names: set[str]) -> None:
            ids = {group[v] for v in names if v in group}
            if len(ids) > 1:
                low = min(ids)
                for v, g in group.items():
                    if g in ids:
                        group[v] = low

        for v, n in binders:
            join(n.symbols() | {v})
        for f in factors:
            join(set(self._symbols(f)))
        out: dict[int, tuple[list, list]] = {}
        for b in binders:
            out.setdefault(group[b[0]], ([], []))[0].append(b)
        for f in factors:
            g = next(group[v] for v in self._symbols(f) if v in group)
            out[g][1].append(f)
        return [(tuple(bs), tuple(fs)) for bs, fs in out.values()]

    def _product(self, factors: tuple[nf.Atom, ...], env: Mapping[str, int]) -> Scaled:
        out: Scaled = (1.0, 0.0)
        for f in factors:
            out = _mul(out, self.atom(f, env))
        return out

    def _symbols(self, a: Any) -> frozenset[str]:
        entry = self._syms.get(id(a))
        if entry is None or entry[0] is not a:
            entry = (a, frozenset(nf.atom_symbols(a)))
            self._syms[id(a)] = entry
        return entry[1]

    def atom(self, a: nf.Atom, env: Mapping[str, int]) -> Scaled:
        tag = a[0]
        if tag == "in":
            return (self._input(a, env), 0.0)
        if tag == "sym":
            if a[1] not in self.symbols:
                raise EvaluationError(f"symbolic scalar {a[1]!r} has no value; pass it in symbols")
            return (float(self.symbols[a[1]]), 0.0)
        if tag == "dim":
            return (float(evaluate_ix(a[1], env)), 0.0)
        entry = self._cache.get(id(a))
        if entry is None or entry[0] is not a:
            entry = (a, tuple(sorted(self._symbols(a))), {})
            self._cache[id(a)] = entry
        try:
            key = tuple(env[s] for s in entry[1])
        except KeyError as e:
            raise EvaluationError(f"index symbol {e.args[0]!r} is not bound in {nf._atom_str(a)}") from None
        if key not in entry[2]:
            entry[2][key] = self._compound(a, env)
        return entry[2][key]

    def _compound(self, a: nf.Atom, env: Mapping[str, int]) -> Scaled:
        tag = a[0]
        if tag == "fn":
            name = a[1]
            arg = self.poly(a[2], env)
            if name == "exp" and "exp" not in self.uf:
                return (1.0, _to_float(arg))
            if name == "log" and "log" not in self.uf and arg[1] != 0.0 and math.isfinite(arg[1]):
                return (float(np.log(arg[0])) + arg[1], 0.0)  # log(a exp(e)) = log(a) + e
            return (float(function(name, self.uf)(_to_float(arg))), 0.0)
        if tag == "recip":
            x = self.poly(a[1], env)
            if x[0] == 0.0:
                return (math.copysign(math.inf, x[0]), 0.0)
            return (1.0 / x[0], -x[1])
        if tag == "ite":
            op, x, y = a[1]
            xv = evaluate_ix(x, env) if isinstance(x, Ix) else _to_float(self.poly(x, env))
            yv = evaluate_ix(y, env) if isinstance(y, Ix) else _to_float(self.poly(y, env))
            holds = {"<": xv < yv, "<=": xv <= yv, "==": xv == yv}[op]
            return self.poly(a[2] if holds else a[3], env)
        if tag == "red":
            return (self._reduce(a[1], a[2], a[3], env), 0.0)
        if tag == "lib":
            return (self._library(a, env), 0.0)
        raise EvaluationError(f"unknown atom {tag!r}")

    def _input(self, a: nf.Atom, env: Mapping[str, int]) -> float:
        name = a[1]
        if name not in self.inputs:
            raise EvaluationError(f"no input named {name!r}")
        arr = self.inputs[name]
        idx = tuple(evaluate_ix(i, env) for i in a[2])
        if len(idx) != arr.ndim or any(not 0 <= i < n for i, n in zip(idx, arr.shape)):
            raise EvaluationError(f"index {list(idx)} out of range for input {name!r} of shape {list(arr.shape)} "
                                  f"(in {nf._atom_str(a)})")
        return float(arr[idx])

    def _reduce(self, kind: str, binders: tuple[nf.Binder, ...], body: Poly, env: Mapping[str, int]) -> float:
        best: float | None = None
        for point in self._points(binders, env):
            v = _to_float(self.poly(body, point))
            if best is None or math.isnan(v):
                best = v
                if math.isnan(v):
                    return v  # np.max propagates NaN
            elif (v > best) if kind == "max" else (v < best):
                best = v
        if best is None:
            raise EvaluationError(f"{kind} over an empty range {binders}")
        return best

    def _points(self, binders: tuple[nf.Binder, ...], env: Mapping[str, int]):
        """Every assignment of the binders, each binder's length evaluated after those it mentions."""
        if not binders:
            yield env
            return
        (v, n), rest = _binder_order(binders)
        for k in range(evaluate_ix(n, env)):
            yield from self._points(rest, {**env, v: k})

    def _library(self, a: nf.Atom, env: Mapping[str, int]) -> float:
        _, op_name, spec, lams, idx = a[:5]
        if not (isinstance(spec, tuple) and len(spec) == 2):
            raise EvaluationError(f"library atom of {op_name} does not carry its input shapes")
        attrs, shapes = spec
        free = set().union(*(d.symbols() for shape in shapes for d in shape))
        for names, body in lams:
            free |= body.free_index_symbols() - set(names)
        key = (id(lams), id(spec), op_name, tuple(sorted((s, env[s]) for s in free)))
        if key not in self._lib:
            self._lib[key] = (lams, spec, self._library_result(op_name, attrs, shapes, lams, env))
        result = self._lib[key][2]
        at = tuple(evaluate_ix(i, env) for i in idx)
        if len(at) != result.ndim or any(not 0 <= i < n for i, n in zip(at, result.shape)):
            raise EvaluationError(f"index {list(at)} out of range for {op_name} result of shape {list(result.shape)}")
        return float(result[at])

    def _library_result(self, op_name: str, attrs: tuple, shapes: tuple, lams: tuple,
                        env: Mapping[str, int]) -> np.ndarray:
        """The library op's reference on its input arrays, rebuilt from the lambdas."""
        arrays = []
        for (names, body), shape in zip(lams, shapes):
            sizes = tuple(evaluate_ix(d, env) for d in shape)
            arr = np.empty(sizes, dtype=np.float64)
            inner = dict(env)
            for point in itertools.product(*(range(s) for s in sizes)):
                inner.update(zip(names, point))
                arr[point] = _to_float(self.poly(body, inner))
            arrays.append(arr)
        return apply_op(op_name, arrays, O.Attrs(tuple(attrs)), self.dims)


def evaluate_poly(poly: Poly, dims: Mapping[str, int], inputs: Mapping[str, np.ndarray], index: Mapping[str, int],
                  uf: Mapping[str, Callable[[float], float]] | None = None,
                  symbols: Mapping[str, float] | None = None) -> float:
    """The float64 value of ``poly`` with dims, input arrays (by name) and free index symbols bound.

    ``uf`` gives (or overrides) the meaning of uninterpreted function names, ``symbols`` the values of
    symbolic scalars (``("sym", name)`` atoms; ``"-inf"`` is -inf)."""
    return PolyEvaluator(dims, inputs, uf, symbols).evaluate(poly, index)
