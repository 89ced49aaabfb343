"""Traced sizes: the run-time dims of a shape-generic kernel, followed through the code generators.

A code generator written for concrete sizes (``math.prod(shape)``, ``if d == 1``, ``f"offs // {s}"``)
becomes shape-generic without being rewritten: :func:`tracing` binds the run-time dims to
:class:`Traced` ints, which hold their value at the binding being built *and* their expression over
the dims (a :class:`~axon_eg.ir.dims.Sym`). Arithmetic keeps both (a result that does not depend on a
dim is a plain ``int``), so the text a generator writes (``str``, ``repr``, ``format``) is the
expression, rendered over parameter names (``dim_M``). Every *decision* a generator takes on a size (a
comparison, a truth test, ``range(d)``, ``int(d)``, a float of it) takes the value at the binding and
records a guard: the predicate under which the decision comes out the same. The kernel is exactly as
valid as its guards: the emitter writes them into the kernel file, which checks them at each call, and a
shape bucket admits a kernel only where its guards hold at every size of the bucket (``holds``).

Comparisons whose outcome the polynomial form decides alone (``4096*M % 1024 == 0``, ``M + 1 > M``)
record nothing. A decision that needs the exact value (``range``, ``int``, ``float``, bit operations)
records ``dim == value`` of each dim involved: that dim is specialized, not generic.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import operator
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from axon_eg.ir import dims as D
from axon_eg.ir.program import Program

PREFIX = "dim_"
"""The prefix of a run-time dim's parameter name in generated code (``M`` -> ``dim_M``); program input
names never take it (``backends.kernel.identifier``)."""


def param(name: str) -> str:
    """The generated code's name of dim ``name``."""
    return PREFIX + name


def render(d: D.Dim) -> str:
    """``d`` as Python text over the dims' parameter names: ``4096*dim_M``, ``(dim_M + 63)//64``."""
    if isinstance(d, int):
        return str(d)
    return str(D.substitute(d, {n: D.sym(param(n)) for n in D.names(d)}))


@dataclass(frozen=True)
class Guard:
    """``lhs op rhs`` over the dims (Sym or int each side), true at the binding it was recorded at."""

    lhs: D.Dim
    op: str  # one of _OPS
    rhs: D.Dim
    origin: str = field(default="", compare=False)  # file:line of the decision (for whoever reads the guards)

    def text(self) -> str:
        """The predicate as Python over the parameter names (the kernel file evaluates it)."""
        return f"{render(self.lhs)} {self.op} {render(self.rhs)}"

    def readable(self) -> str:
        """The predicate over the dims' own names, for messages."""
        return f"{self.lhs} {self.op} {self.rhs}"

    def holds(self, sizes: Mapping[str, int]) -> bool:
        return _OPS[self.op](D.evaluate(self.lhs, sizes), D.evaluate(self.rhs, sizes))

    @property
    def dims(self) -> set[str]:
        return D.names(self.lhs) | D.names(self.rhs)


_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
        "!=": operator.ne}
_NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


@dataclass
class Recorder:
    """The guards recorded while tracing, in order, without repeats."""

    guards: list[Guard] = field(default_factory=list)

    def add(self, guard: Guard) -> None:
        if guard not in self.guards:
            self.guards.append(guard)


_active: list[Recorder] = []


def _record(guard: Guard) -> None:
    if not _active:
        raise RuntimeError(f"a traced size was decided on outside tracing(): {guard.readable()}")
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename in (__file__, D.__file__):
        frame = frame.f_back
    if frame is not None:
        guard = replace(guard, origin=f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}")
    _active[-1].add(guard)


class Traced(int):
    """An int that also knows its expression over run-time dims (see the module docstring)."""

    sym: D.Sym

    def __new__(cls, value: int, sym: D.Dim) -> int:  # type: ignore[misc]
        if not isinstance(sym, D.Sym):
            return int(sym)  # constant: a plain int (the value agrees by construction)
        out = super().__new__(cls, value)
        out.sym = sym
        return out

    # -- text -------------------------------------------------------------------------------------
    def __str__(self) -> str:
        if not D.names(self.sym):
            return int.__repr__(self)
        fixed = _fixed(self.sym)
        return render(self.sym) if fixed is None else str(fixed)

    def __repr__(self) -> str:
        text = str(self)
        return text if text.isidentifier() or text.lstrip("-").isdigit() else f"({text})"

    def __format__(self, spec: str) -> str:
        if spec in ("", "d"):
            return repr(self)
        return format(self._exact(), spec)

    # -- decisions --------------------------------------------------------------------------------
    def _exact(self) -> int:
        """The value, specializing every dim of the expression to its bound value."""
        for name in sorted(D.names(self.sym)):
            _record(Guard(D.sym(name), "==", _value_of(name)))
        return int.__int__(self)

    def __int__(self) -> int:
        return self._exact()

    def __index__(self) -> int:
        return self._exact()

    def __float__(self) -> float:
        return float(self._exact())

    def __bool__(self) -> bool:
        return self._compare("!=", 0)

    def _compare(self, op: str, other: object) -> bool:
        if not isinstance(other, int):
            if isinstance(other, float):
                return _OPS[op](float(self), other)
            return NotImplemented  # type: ignore[return-value]
        rhs = _sym_of(other)
        diff = D.add(self.sym, D.mul(rhs, -1))
        result = _OPS[op](int.__int__(self), int.__int__(other) if isinstance(other, Traced) else int(other))
        if isinstance(diff, int) or _decided(diff, op):
            return result
        _record(Guard(self.sym, op if result else _NEGATED[op], rhs))
        return result

    def __lt__(self, other: object) -> bool:
        return self._compare("<", other)

    def __le__(self, other: object) -> bool:
        return self._compare("<=", other)

    def __gt__(self, other: object) -> bool:
        return self._compare(">", other)

    def __ge__(self, other: object) -> bool:
        return self._compare(">=", other)

    def __eq__(self, other: object) -> bool:  # type: ignore[override]
        if not isinstance(other, (int, float)) or isinstance(other, bool):
            return False
        return self._compare("==", other)

    def __ne__(self, other: object) -> bool:  # type: ignore[override]
        if not isinstance(other, (int, float)) or isinstance(other, bool):
            return True
        return self._compare("!=", other)

    __hash__ = int.__hash__

    # -- arithmetic -------------------------------------------------------------------------------
    def _arith(self, other: object, fn, sym_fn, reverse: bool = False):  # noqa: ANN001, ANN202
        if isinstance(other, bool) or not isinstance(other, int):
            if isinstance(other, float):
                a, b = (other, float(self)) if reverse else (float(self), other)
                return fn(a, b)
            return NotImplemented
        a, b = (other, self) if reverse else (self, other)
        value = fn(int.__int__(a), int.__int__(b))
        return Traced(value, sym_fn(_sym_of(a), _sym_of(b)))

    def _pair(fn, sym_fn):  # noqa: ANN001, ANN202, N805 (builds the class's operator methods)
        return (lambda self, o: self._arith(o, fn, sym_fn)), (lambda self, o: self._arith(o, fn, sym_fn, True))

    __add__, __radd__ = _pair(operator.add, D.add)
    __sub__, __rsub__ = _pair(operator.sub, lambda a, b: _sub(a, b))  # (defined below the class)
    __mul__, __rmul__ = _pair(operator.mul, D.mul)
    __floordiv__, __rfloordiv__ = _pair(operator.floordiv, D.floordiv)
    __mod__, __rmod__ = _pair(operator.mod, lambda a, b: _mod(a, b))
    del _pair

    def __neg__(self):  # noqa: ANN204
        return Traced(-int.__int__(self), D.mul(self.sym, -1))

    def __pos__(self):  # noqa: ANN204
        return self

    def __abs__(self):  # noqa: ANN204
        return self if self >= 0 else -self

    def __truediv__(self, o):  # noqa: ANN001, ANN204
        return float(self) / o

    def __rtruediv__(self, o):  # noqa: ANN001, ANN204
        return o / float(self)

    def __divmod__(self, o):  # noqa: ANN001, ANN204
        return self // o, self % o

    def __pow__(self, o, mod=None):  # noqa: ANN001, ANN204
        return pow(int(self), o, mod)

    def __rpow__(self, o):  # noqa: ANN001, ANN204
        return pow(o, int(self))

    # operations on the exact value: the dims are specialized (``_exact``)
    __and__ = __rand__ = lambda self, o: int(self) & o  # noqa: E731
    __or__ = __ror__ = lambda self, o: int(self) | o  # noqa: E731
    __xor__ = __rxor__ = lambda self, o: int(self) ^ o  # noqa: E731
    __lshift__ = lambda self, o: int(self) << o  # noqa: E731
    __rshift__ = lambda self, o: int(self) >> o  # noqa: E731
    __rlshift__ = lambda self, o: o << int(self)  # noqa: E731
    __rrshift__ = lambda self, o: o >> int(self)  # noqa: E731

    def bit_length(self) -> int:
        return int(self).bit_length()

    def __reduce__(self):  # noqa: ANN204
        return int, (int.__int__(self),)  # pickled or copied: the value (a decision was taken on it)


def _bounds(d: D.Dim) -> tuple[float, float]:
    """Bounds of ``d`` over every binding of its dims to sizes >= 1 (possibly infinite)."""
    if isinstance(d, int):
        return d, d
    lo = hi = 0.0
    for mono, coeff in d.terms:
        least = 1.0  # a product of sizes >= 1, or of quotients >= 0
        for atom in mono:
            if isinstance(atom, D.FloorDiv):
                if _bounds(atom.num)[0] < 0 or _bounds(atom.den)[0] < 1:
                    return -math.inf, math.inf
                least = 0.0
        if not mono:
            lo, hi = lo + coeff, hi + coeff
        elif coeff > 0:
            lo, hi = lo + coeff * least, math.inf
        else:
            lo, hi = -math.inf, hi + coeff * least
    return lo, hi


def _decided(diff: D.Dim, op: str) -> bool:
    """Whether ``diff op 0`` has one outcome at every binding of sizes >= 1 (then it needs no guard)."""
    lo, hi = _bounds(diff)
    return {">": lo > 0 or hi <= 0, ">=": lo >= 0 or hi < 0, "<": hi < 0 or lo >= 0, "<=": hi <= 0 or lo > 0,
            "==": lo > 0 or hi < 0, "!=": lo > 0 or hi < 0}[op] or lo == hi


_FIXED: dict[tuple, int | None] = {}


def _fixed(sym: D.Sym) -> int | None:
    """The one value ``sym`` takes at every size of the ranges being traced (``tracing(..., ranges=)``), or
    None. Such an expression is written as that constant (the launcher refuses sizes outside the ranges),
    with the guard recorded: ``16*((dim_M + 15)//16)`` over M in [2, 16] is ``16``."""
    spans = _ranges[-1] if _ranges else None
    names = sorted(D.names(sym))
    if not spans or any(n not in spans for n in names):
        return None
    key = (sym, tuple((n, spans[n]) for n in names))
    if key not in _FIXED:
        corners = {D.evaluate(sym, dict(zip(names, c))) for c in itertools.product(*(spans[n] for n in names))}
        value = corners.pop() if len(corners) == 1 else None
        if value is not None and not holds([Guard(sym, "==", value)], {n: spans[n] for n in names})[0]:
            value = None
        if len(_FIXED) > 4096:
            _FIXED.clear()
        _FIXED[key] = value
    value = _FIXED[key]
    if value is not None:
        _record(Guard(sym, "==", value))
    return value


def _sym_of(x: int) -> D.Dim:
    return x.sym if isinstance(x, Traced) else int(x)


def _sub(a: D.Dim, b: D.Dim) -> D.Dim:
    return D.add(a, D.mul(b, -1))


def _mod(a: D.Dim, b: D.Dim) -> D.Dim:
    return _sub(a, D.mul(b, D.floordiv(a, b)))


_bound: list[dict[str, int]] = []


def _value_of(name: str) -> int:
    for sizes in reversed(_bound):
        if name in sizes:
            return sizes[name]
    raise RuntimeError(f"dim {name} is not traced")


def same(a: int | tuple, b: int | tuple) -> bool:
    """Whether two sizes (or shapes, axis by axis) are the same dim: by their expressions where either is
    traced (two run-time dims that happen to be equal at the binding are not the same; the code written for
    unequal sizes is right for equal ones), else by value. For decisions whose False branch is the general
    code."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        return isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, Traced) or isinstance(b, Traced):
        return _sym_of(a) == _sym_of(b)
    return a == b


def known(size: int, value: int) -> bool:
    """Whether ``size`` is ``value`` at every size the kernel serves: a fixed size equal to it, or a run-time
    one equal to it over the whole of the ranges being traced (``tracing(..., ranges=)``; the decision is
    then guarded). For shortcuts whose other branch is the general code."""
    if not isinstance(size, Traced):
        return size == value
    spans = _ranges[-1] if _ranges else None
    guard = Guard(size.sym, "==", value)
    if spans is None or not holds([guard], spans)[0]:
        return False
    _record(guard)
    return True


def partial(size: int, block: int) -> bool:
    """Whether tiles of ``block`` along ``size`` may leave a partial last one (masks, a tail loop): a run-time
    size may, unless it is a multiple of ``block`` whatever its value; a fixed one when it does."""
    rest = size % block
    return isinstance(rest, Traced) or rest != 0


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for sizes in integer arithmetic: a run-time dim stays an expression, where
    ``math.ceil(a / b)`` would fix its value."""
    return (a + b - 1) // b


def concrete(x: object) -> object:
    """``x`` with every traced size replaced by its value at the tuned binding, recording nothing: for
    tiling choices (any choice computes the same), notes, resource counts and costs."""
    if isinstance(x, Traced):
        return D.evaluate(x.sym, _tuned[-1]) if _tuned and _tuned[-1] else int.__int__(x)
    if isinstance(x, tuple):
        return tuple(concrete(v) for v in x)
    if isinstance(x, list):
        return [concrete(v) for v in x]
    if isinstance(x, dict):
        return {k: concrete(v) for k, v in x.items()}
    return x


_tuned: list[dict[str, int] | None] = []
_ranges: list[Mapping[str, tuple[int, int]] | None] = []


@contextlib.contextmanager
def tracing(sizes: Mapping[str, int], tuned: Mapping[str, int] | None = None,
            ranges: Mapping[str, tuple[int, int]] | None = None) -> Iterator[tuple[dict[str, int], Recorder]]:
    """Within the block, the first item maps each dim of ``sizes`` to its :class:`Traced` value; decisions
    taken on them are recorded in the :class:`Recorder` (the second item). ``tuned``: the binding that
    :func:`concrete` takes its values at (default ``sizes``), so that tracing the same generator at other
    sizes makes the same tiling choices (``backends.triton.emit`` compares the code written at a bucket's
    ends with the code at its tuned size: a size used without a guard, ``range(M)`` say, which CPython
    takes from an int subclass without asking it, shows as a difference). ``ranges``: the sizes the kernel
    will serve, for :func:`known`."""
    recorder = Recorder()
    _active.append(recorder)
    _bound.append(dict(sizes))
    _tuned.append(dict(tuned) if tuned else None)
    _ranges.append(dict(ranges) if ranges else None)
    try:
        yield {n: Traced(v, D.sym(n)) for n, v in sizes.items()}, recorder
    finally:
        _active.pop()
        _bound.pop()
        _tuned.pop()
        _ranges.pop()


def program_over(program: Any, values: Mapping[str, int]) -> Any:
    """``program`` (a bound :class:`~axon_eg.ir.program.Program`) with the dims of ``values`` bound to
    those traced values instead: what a code generator reads inside :func:`tracing`. It never equals the
    program itself (a comparison would decide on the sizes), and it is not re-checked."""
    class TracedProgram(Program):
        @cached_property
        def _key(self) -> tuple:
            return (self.nodes, self.outputs, self.dims, self.roles, "traced")

    dims = tuple((k, values.get(k, v)) for k, v in program.dims)
    return TracedProgram(program.nodes, program.outputs, dims, program.name, program.roles, program.locations)


def holds(guards: list[Guard], ranges: Mapping[str, tuple[int, int]], limit: int = 1 << 20) -> tuple[bool, str]:
    """Whether every guard holds at every binding of ``ranges`` (inclusive bounds per dim; dims a guard
    does not name do not multiply the work): (True, "") or (False, the first failing guard at the first
    binding it fails). Exhaustive, so exact; a bucket of more than ``limit`` bindings is refused."""
    for guard in guards:
        names = sorted(guard.dims)
        spans = [range(ranges[n][0], ranges[n][1] + 1) for n in names]
        count = 1
        for s in spans:
            count *= len(s)
        if count > limit:
            return False, f"{guard.readable()} cannot be checked over {count} bindings"
        for values in itertools.product(*spans):
            sizes = dict(zip(names, values))
            if not guard.holds(sizes):
                at = ", ".join(f"{n}={v}" for n, v in sizes.items())
                return False, f"{guard.readable()} fails at {at}"
    return True, ""


__all__ = ["PREFIX", "Guard", "Recorder", "Traced", "cdiv", "concrete", "holds", "known", "param", "partial", "program_over",
           "render", "same", "tracing"]
