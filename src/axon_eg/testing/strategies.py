"""Hypothesis strategies: random well-typed Programs over the op registry, and inputs for them.

``programs()`` builds a program op by op. The ops it draws come from ``ops.REGISTRY``: every op of a
kind with a generator here (element-wise by ``meta["arity"]``, reduce, scan, contraction, layout,
composite, library) is drawn, so an op registered later under an existing kind is picked up without
editing this file (its attributes drawn from their declared kinds and choices). An op whose
attributes cannot be drawn goes in ``SKIPPED_OPS`` with the reason; a test checks that every
registry op is drawn, a source, or skipped.

Shapes use named dims (``M``, ``N``, ``K``, ``B``), size-1 dims and small ints. The sizes the names
will be bound to (1..7) are drawn first and every attribute is chosen knowing them, so a program is
valid symbolically and once bound.

Values stay numerically tame under ``program_inputs`` (|x| in [0.25, 2]; positive inputs in [0.5, 2]):
each value carries an :class:`Envelope` (bounds on |x|, its sign), and an op that could overflow or
leave its domain (exp, pow, log, reciprocal, div, square, matmul, ...) is applied only where the
envelope keeps the float64 reference finite; otherwise it is applied to a fresh input.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import reject
from hypothesis import strategies as st

from axon_eg.errors import DtypeError, InvalidAttribute, ShapeError
from axon_eg.ir import dims as D
from axon_eg.ir import inputs as I
from axon_eg.ir import ops as O
from axon_eg.ir.dims import Dim, Shape
from axon_eg.ir.dtypes import DType, as_dtype, bf16, fp16, fp32
from axon_eg.ir.program import Builder, Program, Value

DIM_NAMES = ("M", "N", "K", "B")
MAX_SIZE = 7  # named dims are bound to 1..MAX_SIZE: interpretation is instant
MAX_NUMEL = 4096  # no value gets more elements than this
LIMIT = 1e30  # no value's envelope exceeds this magnitude
INPUT_LO, INPUT_HI, POSITIVE_LO = 0.25, 2.0, 0.5  # what make_inputs draws
SOURCE_OPS = ("input", "constant")  # made by the strategy itself, never drawn as a step
SKIPPED_OPS: dict[str, str] = {}  # op name -> why its attributes cannot be drawn
CONSTANTS = (2.0, 0.5, 1.0, -1.0, 3.0, -0.5, 0.0, 1e-3)

Draw = Callable[[st.SearchStrategy[Any]], Any]


# ------------------------------------------------------------------------------------------------
# Envelopes: what a value's magnitude can be
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Envelope:
    """lo <= |x| <= mag for every element; pos: every element > 0; input_like: built from inputs only
    through ops that ``inputs.positive_inputs`` sees through, so it is made positive on demand."""

    mag: float
    lo: float = 0.0
    pos: bool = False
    input_like: bool = False

    def positive(self) -> Envelope | None:
        """The envelope as a positive-domain operand (log, sqrt, pow, ...), or None if it may be <= 0."""
        if self.pos and self.lo > 1e-6:
            return self
        return Envelope(self.mag, POSITIVE_LO, True) if self.input_like else None


FRESH = Envelope(INPUT_HI, INPUT_LO, input_like=True)
UNKNOWN = Envelope(LIMIT)  # an op this module has no envelope for: finite, nothing more is known


def _through(op: str, *envs: Envelope) -> bool:
    return op in I._TRANSPARENT and all(e.input_like for e in envs)


def _same(op: str) -> Callable[[Envelope, Any], Envelope]:
    return lambda e, a: Envelope(e.mag, e.lo, e.pos, _through(op, e))


def _tame(e: Envelope) -> Envelope | None:
    return UNKNOWN if e.mag <= 10 else None


def _exp(e: Envelope, a: Any) -> Envelope | None:
    return Envelope(math.exp(e.mag), math.exp(-e.mag), True) if e.mag <= 10 else None


def _log(e: Envelope, a: Any) -> Envelope | None:
    p = e.positive()
    return p and Envelope(max(abs(math.log(p.lo)), abs(math.log(p.mag))))


def _pow(e: Envelope, a: Any) -> Envelope | None:
    p = e.positive()
    ends = (p.lo ** a["exponent"], p.mag ** a["exponent"]) if p else ()
    return p and Envelope(max(ends), min(ends), True)


def _clamp(e: Envelope, a: Any) -> Envelope:
    low, high = (min(max(v, a["lo"]), a["hi"]) for v in (-e.mag, e.mag))
    lo = low if low > 0 else (-high if high < 0 else 0.0)
    return Envelope(max(abs(low), abs(high)), lo, low > 0)


def _softplus(e: Envelope, a: Any) -> Envelope:
    lo = min(math.log1p(math.exp(-a["beta"] * e.mag)) / a["beta"], max(a["threshold"], 0.0) / a["beta"])
    return Envelope(e.mag + math.log(2.0) / a["beta"], lo, True)


def _sigmoid(m: float) -> float:
    return 0.5 * (1.0 + math.tanh(0.5 * m))


_UNARY_ENV: dict[str, Callable[[Envelope, Any], Envelope | None]] = {
    "neg": lambda e, a: Envelope(e.mag, e.lo),
    "exp": _exp,
    "log": _log,
    "sqrt": lambda e, a: (p := e.positive()) and Envelope(math.sqrt(p.mag), math.sqrt(p.lo), True),
    "rsqrt": lambda e, a: (p := e.positive()) and Envelope(1 / math.sqrt(p.lo), 1 / math.sqrt(p.mag), True),
    "reciprocal": lambda e, a: Envelope(1 / e.lo, 1 / e.mag, e.pos) if e.lo > 0 else None,
    "abs": lambda e, a: Envelope(e.mag, e.lo, e.lo > 0),
    "square": lambda e, a: Envelope(e.mag**2, e.lo**2, e.lo > 0),
    "relu": lambda e, a: Envelope(e.mag),
    "leaky_relu": lambda e, a: Envelope(e.mag * max(1, abs(a["slope"])), e.lo * min(1, abs(a["slope"])), e.pos),
    "sigmoid": lambda e, a: Envelope(1.0, _sigmoid(-e.mag), True),
    "tanh": lambda e, a: Envelope(1.0, math.tanh(e.lo), e.pos),
    "silu": lambda e, a: Envelope(e.mag + 1),
    "gelu": lambda e, a: Envelope(e.mag + 1),
    "mish": lambda e, a: Envelope(e.mag + 1),
    "hardswish": lambda e, a: Envelope(e.mag + 1),
    "hardsigmoid": lambda e, a: Envelope(1.0),
    "softplus": _softplus,
    "clamp": _clamp,
    "pow": _pow,
    "erf": lambda e, a: Envelope(1.0, math.erf(e.lo), e.pos),
    "cast": _same("cast"),
    "causal_mask": lambda e, a: Envelope(max(e.mag, abs(a["fill"])), min(e.lo, abs(a["fill"])),
                                         e.pos and a["fill"] > 0),
}

_BINARY_ENV: dict[str, Callable[[Envelope, Envelope], Envelope | None]] = {
    "add": lambda x, y: Envelope(x.mag + y.mag, x.lo + y.lo if x.pos and y.pos else 0.0, x.pos and y.pos,
                                 _through("add", x, y)),
    "sub": lambda x, y: Envelope(x.mag + y.mag),
    "mul": lambda x, y: Envelope(x.mag * y.mag, x.lo * y.lo, x.pos and y.pos),
    "div": lambda x, y: Envelope(x.mag / y.lo, x.lo / y.mag, x.pos and y.pos) if y.lo > 0 else None,
    "maximum": lambda x, y: Envelope(max(x.mag, y.mag), max(e.lo for e in (x, y) if e.pos) if x.pos or y.pos else 0.0,
                                     x.pos or y.pos),
    "minimum": lambda x, y: Envelope(max(x.mag, y.mag), min(x.lo, y.lo) if x.pos and y.pos else 0.0, x.pos and y.pos),
}

# reductions and scans: (envelope, number of elements combined into one output)
_REDUCE_ENV: dict[str, Callable[[Envelope, int], Envelope]] = {
    "sum": lambda e, n: Envelope(e.mag * n, e.lo if e.pos else 0.0, e.pos),
    "mean": lambda e, n: Envelope(e.mag, e.lo if e.pos else 0.0, e.pos),
    "max": lambda e, n: Envelope(e.mag, e.lo, e.pos),
    "min": lambda e, n: Envelope(e.mag, e.lo, e.pos),
    "logsumexp": lambda e, n: Envelope(e.mag + math.log(n)),
    "cumsum": lambda e, n: Envelope(e.mag * n, e.lo if e.pos else 0.0, e.pos),
}


# ------------------------------------------------------------------------------------------------
# Generation state
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Val:
    value: Value
    env: Envelope

    @property
    def shape(self) -> Shape:
        return self.value.shape

    @property
    def ndim(self) -> int:
        return self.value.ndim


class _Gen:
    """One program under construction: the builder, the dims' sizes and the values made so far."""

    def __init__(self, draw: Draw, allowed: frozenset[str], dtypes: tuple[DType, ...], sizes: Mapping[str, int],
                 symbolic: bool):
        self.draw, self.allowed, self.dtypes, self.sizes = draw, allowed, dtypes, sizes
        self.b = Builder("random")
        self.values: list[_Val] = []  # inputs and op results
        self.results: list[_Val] = []  # op results only
        self.dim_pool: tuple[Dim, ...] = (*(D.sym(n) for n in sizes), 1, 2, 3) if symbolic else (1, 2, 3, 4, 5)

    def conc(self, shape: Shape) -> tuple[int, ...]:
        return tuple(D.evaluate(d, self.sizes) for d in shape)

    def numel(self, shape: Shape) -> int:
        return math.prod(self.conc(shape))

    def dim(self) -> Dim:
        return self.draw(st.sampled_from(self.dim_pool))

    def shape(self, rank: int) -> Shape:
        dims = [self.dim() for _ in range(rank)]
        while self.numel(tuple(dims)) > MAX_NUMEL // 4:
            dims[max(range(rank), key=lambda i: self.conc((dims[i],))[0])] = 1
        return tuple(dims)

    def dtype(self) -> DType:
        return self.draw(st.sampled_from(self.dtypes))

    def fresh(self, shape: Shape) -> _Val:
        value = _Val(self.b.input(f"x{len(self.b.nodes)}", shape, self.dtype()), FRESH)
        self.values.append(value)
        return value

    def constant(self) -> _Val:
        c = self.draw(st.sampled_from(CONSTANTS))
        return _Val(self.b.constant(c, self.dtype()), Envelope(abs(c), abs(c), c > 0))

    def pick(self) -> _Val:
        """An operand for the next step: mostly the latest result, so that steps chain."""
        how = self.draw(st.sampled_from(("latest", "result", "any", "latest", "latest")))
        if self.results and how != "any":
            return self.results[-1] if how == "latest" else self.draw(st.sampled_from(self.results[::-1]))
        return self.draw(st.sampled_from(self.values[::-1]))

    def operand(self, x: _Val, min_rank: int, max_rank: int | None = None,
                ok: Callable[[_Val], bool] = lambda v: True) -> _Val:
        """``x`` if its rank fits, else another value that fits, else a fresh input."""
        def fits(v: _Val) -> bool:
            return min_rank <= v.ndim and (max_rank is None or v.ndim <= max_rank) and ok(v)

        if fits(x):
            return x
        candidates = [v for v in self.values if fits(v)]
        if candidates and self.draw(st.booleans()):
            return self.draw(st.sampled_from(candidates))
        return self.fresh(self.shape(min_rank))

    def emit(self, op: O.OpDef, args: Iterable[_Val], attrs: Mapping[str, Any], env: Envelope | None) -> _Val | None:
        """Add ``op`` unless its envelope is unknown, too large, or its result too big."""
        if env is None or not env.mag <= LIMIT:
            return None
        value = self.b.emit(op.name, *(a.value for a in args), **attrs)
        if self.numel(value.shape) > MAX_NUMEL:
            return None  # left dead: Builder.build drops it
        out = _Val(value, env)
        self.values.append(out)
        self.results.append(out)
        return out

    def attrs_of(self, op: O.OpDef, shapes: tuple[Shape, ...], attrs: Mapping[str, Any]) -> O.Attrs:
        """The canonical attributes ``op`` will get, to compute envelopes before emitting."""
        a = op.make_attrs(attrs)
        return op.canon(shapes, a) if op.canon is not None else a


def _axis(g: _Gen, rank: int) -> int:
    return g.draw(st.integers(-rank, rank - 1))


def _axes(g: _Gen, rank: int) -> tuple[int, ...]:
    """A set of axes, some written negative; () means all of them."""
    picked = g.draw(st.lists(st.integers(0, rank - 1), unique=True, max_size=rank)) if rank else []
    return tuple(a - rank if g.draw(st.booleans()) else a for a in picked)


def _generic_attrs(g: _Gen, op: O.OpDef, x: _Val) -> dict[str, Any] | None:
    """Attributes drawn from their declared kinds: ``axis``/``axes`` in range, choices, small values."""
    out: dict[str, Any] = {}
    for a in op.attrs:
        kind = a.kind.removeprefix("optional_")
        if a.name == "axis" and kind == "int":
            if x.ndim == 0:
                return None
            out[a.name] = _axis(g, x.ndim)
        elif a.name == "axes" and kind == "ints":
            out[a.name] = _axes(g, x.ndim)
        elif a.choices is not None:
            out[a.name] = g.draw(st.sampled_from(a.choices))
        elif not a.required and g.draw(st.booleans()):
            continue
        elif kind in ("bool", "int", "float", "dtype"):
            out[a.name] = g.draw({"bool": st.booleans(), "int": st.integers(0, 2),
                                  "float": st.sampled_from((0.5, 1.0, 2.0)), "dtype": st.sampled_from(g.dtypes)}[kind])
        elif a.required:
            return None
    return out


# ------------------------------------------------------------------------------------------------
# Element-wise ops
# ------------------------------------------------------------------------------------------------
_UNARY_ATTRS: dict[str, Callable[[_Gen], dict[str, Any]]] = {
    "leaky_relu": lambda g: {"slope": g.draw(st.sampled_from((0.01, 0.2, 0.0, 1.5)))},
    "softplus": lambda g: {"beta": g.draw(st.sampled_from((1.0, 0.5, 2.0))),
                           "threshold": g.draw(st.sampled_from((20.0, 1.0)))},
    "clamp": lambda g: dict(zip(("lo", "hi"), g.draw(st.sampled_from(
        ((-1.0, 1.0), (0.0, 6.0), (-math.inf, 0.5), (-0.5, math.inf), (0.25, 2.0), (-2.0, -0.5)))))),
    "pow": lambda g: {"exponent": g.draw(st.sampled_from((2.0, 0.5, 3.0, -1.0, -0.5, 1.5, -2.0)))},
    "causal_mask": lambda g: {"diagonal": g.draw(st.integers(-2, 2)),
                              "fill": g.draw(st.sampled_from((-100.0, -1.0, 0.0, 1.0)))},
}


def _positive_ok(op: O.OpDef, args: Iterable[_Val]) -> bool:
    slots = op.meta.get("positive_inputs", ())
    return all(a.env.positive() is not None for i, a in enumerate(args) if i in slots)


def _unary(g: _Gen, op: O.OpDef, x: _Val) -> _Val | None:
    if (op.meta.get("index_dependent") and x.ndim < 2) or not _positive_ok(op, [x]):
        return None
    draw_attrs = _UNARY_ATTRS.get(op.name)
    attrs = draw_attrs(g) if draw_attrs else _generic_attrs(g, op, x)
    if attrs is None:
        return None
    transfer = _UNARY_ENV.get(op.name, lambda e, a: _tame(e))
    return g.emit(op, [x], attrs, transfer(x.env, g.attrs_of(op, (x.shape,), attrs)))


def _broadcasts(a: Shape, b: Shape) -> bool:
    try:
        O.broadcast_shapes(a, b)
    except ShapeError:
        return False
    return True


def _partner(g: _Gen, x: _Val) -> _Val:
    """A second operand that broadcasts with ``x``."""
    kind = g.draw(st.sampled_from(("fresh", "suffix", "constant", "existing", "keepdims", "self")))
    if kind == "suffix":
        k = g.draw(st.integers(0, x.ndim))
        shape = tuple(1 if g.draw(st.booleans()) else d for d in x.shape[x.ndim - k:])
        if k == x.ndim and g.draw(st.booleans()) and g.numel(x.shape) * MAX_SIZE <= MAX_NUMEL:
            shape = (g.dim(), *shape)  # the result gains an axis
        return g.fresh(shape)
    if kind == "constant":
        return g.constant()
    if kind == "existing":
        candidates = [v for v in g.values if _broadcasts(v.shape, x.shape)]
        return g.draw(st.sampled_from(candidates))  # x itself is always one
    if kind == "keepdims" and x.ndim:
        reductions = [op for op in O.ops_of_kind(O.OpKind.REDUCE)
                      if op.name in g.allowed and op.name in _REDUCE_ENV and "keepdims" in {a.name for a in op.attrs}]
        if reductions:
            made = _reduce(g, g.draw(st.sampled_from(reductions)), x, keepdims=True)
            if made is not None:
                return made
    if kind == "self":
        return x
    return g.fresh(x.shape)


def _binary(g: _Gen, op: O.OpDef, x: _Val) -> _Val | None:
    transfer = _BINARY_ENV.get(op.name, lambda a, b: _tame(Envelope(max(a.mag, b.mag))))
    for _ in range(3):
        y = _partner(g, x)
        args = [y, x] if g.draw(st.booleans()) else [x, y]
        env = transfer(args[0].env, args[1].env)
        if env is not None and env.mag <= LIMIT and _positive_ok(op, args):
            return g.emit(op, args, {}, env)
    return None


# ------------------------------------------------------------------------------------------------
# Reductions, scans, contractions
# ------------------------------------------------------------------------------------------------
def _reduce(g: _Gen, op: O.OpDef, x: _Val, keepdims: bool | None = None) -> _Val | None:
    attrs = _generic_attrs(g, op, x)
    if attrs is None:
        return None
    if keepdims is not None:
        attrs["keepdims"] = keepdims
    a = g.attrs_of(op, (x.shape,), attrs)
    axes = a["axes"] if "axes" in a else ((a["axis"],) if "axis" in a else range(x.ndim))
    n = math.prod(g.conc(tuple(x.shape[i] for i in axes)))
    transfer = _REDUCE_ENV.get(op.name)
    return g.emit(op, [x], attrs, transfer(x.env, n) if transfer else _tame(x.env))


def _scan(g: _Gen, op: O.OpDef, x: _Val) -> _Val | None:
    return _reduce(g, op, g.operand(x, 1))


def _contraction(g: _Gen, op: O.OpDef, x: _Val) -> _Val | None:
    x = g.operand(x, 2)
    k, batch = x.shape[-1], x.shape[:-2]
    mode = g.draw(st.sampled_from(("weight", "batched", "existing", "left")))
    if mode == "left":
        w = g.fresh((g.dim(), x.shape[-2]))
        return g.emit(op, [w, x], {}, Envelope(x.env.mag * w.env.mag * g.numel((x.shape[-2],))))
    if mode == "batched":
        w = g.fresh((*(1 if g.draw(st.booleans()) else d for d in batch[g.draw(st.integers(0, len(batch))):]),
                     k, g.dim()))
    else:
        candidates = [v for v in g.values if v.ndim >= 2 and v.shape[-2] == k and _broadcasts(v.shape[:-2], batch)]
        w = g.draw(st.sampled_from(candidates)) if mode == "existing" and candidates else g.fresh((k, g.dim()))
    return g.emit(op, [x, w], {}, Envelope(x.env.mag * w.env.mag * g.numel((k,))))


# ------------------------------------------------------------------------------------------------
# Layout
# ------------------------------------------------------------------------------------------------
def _factors(d: Dim) -> list[Dim]:
    """Split a dim into factors whose product is it: primes of ints, the atoms of a monomial."""
    if isinstance(d, int):
        out, p = [], 2
        while d > 1:
            while d % p == 0:
                out.append(p)
                d //= p
            p += 1
        return out
    if len(d.terms) == 1 and d.terms[0][1] > 0:
        mono, coeff = d.terms[0]
        return [*_factors(coeff), *(D.Sym((((atom,), 1),)) for atom in mono)]
    return [d]


def _reshape_attrs(g: _Gen, x: _Val) -> dict[str, Any]:
    """A row-major reshape to a random regrouping of the shape's factors (1s added and dropped)."""
    factors = list(g.draw(st.permutations([f for d in x.shape for f in _factors(d)])))
    factors += [1] * g.draw(st.integers(0, 1))
    cuts = sorted(g.draw(st.lists(st.integers(0, len(factors)), max_size=3)))
    bounds = [0, *cuts, len(factors)]
    return {"shape": tuple(D.product(factors[a:b]) for a, b in zip(bounds, bounds[1:]))}


def _slice_attrs(g: _Gen, x: _Val) -> dict[str, Any] | None:
    if x.ndim == 0:
        return None
    axis = g.draw(st.integers(0, x.ndim - 1))
    size, n = x.shape[axis], g.conc((x.shape[axis],))[0]
    form = g.draw(st.sampled_from(("ints", "from_end", "tail", "half", "past_end")))
    start: Dim = g.draw(st.integers(0, n - 1))
    stop: Dim | None = None
    if form == "ints":
        stop = g.draw(st.integers(start + 1, n))
    elif form == "from_end":
        start = -g.draw(st.integers(1, n))
    elif form == "half":
        start = D.floordiv(size, 2)
    elif form == "past_end" and isinstance(size, int):
        stop = size + g.draw(st.integers(1, 3))  # clamped to the size
    step = g.draw(st.integers(1, 3))
    return {"axis": axis - x.ndim if g.draw(st.booleans()) else axis, "start": start, "stop": stop, "step": step}


def _broadcast_to_attrs(g: _Gen, x: _Val) -> dict[str, Any]:
    lead = tuple(g.dim() for _ in range(g.draw(st.integers(0, 2))))
    return {"shape": (*lead, *(g.dim() if d == 1 and g.draw(st.booleans()) else d for d in x.shape))}


def _squeeze_attrs(g: _Gen, x: _Val) -> dict[str, Any] | None:
    ones = [i for i, d in enumerate(x.shape) if d == 1]
    if not ones and any(isinstance(d, D.Sym) for d in x.shape):
        return None  # squeeze-all is ambiguous until the named dims are bound
    picked = g.draw(st.lists(st.sampled_from(ones), unique=True)) if ones else []
    return {"axes": tuple(i - x.ndim if g.draw(st.booleans()) else i for i in picked)}


def _transpose_attrs(g: _Gen, x: _Val) -> dict[str, Any]:
    perm = g.draw(st.permutations(range(x.ndim)))
    return {"perm": tuple(p - x.ndim if g.draw(st.booleans()) else p for p in perm)}


_LAYOUT_ATTRS: dict[str, Callable[[_Gen, _Val], dict[str, Any] | None]] = {
    "transpose": _transpose_attrs,
    "reshape": _reshape_attrs,
    "broadcast_to": _broadcast_to_attrs,
    "expand_dims": lambda g, x: {"axis": g.draw(st.integers(-x.ndim - 1, x.ndim))},
    "squeeze": _squeeze_attrs,
    "slice": _slice_attrs,
}


def _concat(g: _Gen, op: O.OpDef, x: _Val) -> _Val | None:
    x = g.operand(x, 1)
    axis, parts = g.draw(st.integers(0, x.ndim - 1)), [x]
    for _ in range(g.draw(st.integers(1, 2))):
        kind = g.draw(st.sampled_from(("self", "fresh", "existing")))
        like = [v for v in g.values if v.ndim == x.ndim and all(
            v.shape[i] == x.shape[i] for i in range(x.ndim) if i != axis)]
        if kind == "fresh":
            parts.append(g.fresh(tuple(g.dim() if i == axis else d for i, d in enumerate(x.shape))))
        else:
            parts.append(g.draw(st.sampled_from(like)) if kind == "existing" else x)
    parts = list(g.draw(st.permutations(parts)))
    envs = [p.env for p in parts]
    env = Envelope(max(e.mag for e in envs), min(e.lo for e in envs), all(e.pos for e in envs),
                   _through(op.name, *envs))
    return g.emit(op, parts, {"axis": axis - x.ndim if g.draw(st.booleans()) else axis}, env)


def _layout(g: _Gen, op: O.OpDef, x: _Val) -> _Val | None:
    if op.name == "concat":
        return _concat(g, op, x)
    draw_attrs = _LAYOUT_ATTRS.get(op.name)
    if op.name == "squeeze" and 1 not in x.shape:
        x = g.fresh((*x.shape, 1))
    attrs = draw_attrs(g, x) if draw_attrs else _generic_attrs(g, op, x)
    return None if attrs is None else g.emit(op, [x], attrs, _same(op.name)(x.env, None))


# ------------------------------------------------------------------------------------------------
# Composites
# ------------------------------------------------------------------------------------------------
def _mags(vals: Iterable[_Val]) -> float:
    return math.prod(v.env.mag for v in vals)


def _linear(g: _Gen, op: O.OpDef, x: _Val) -> _Val | None:
    x = g.operand(x, 2)
    w = g.fresh((g.dim(), x.shape[-1]))
    bias = [g.fresh((w.shape[0],))] if g.draw(st.booleans()) else []
    env = Envelope(x.env.mag * w.env.mag * g.numel((x.shape[-1],)) + sum(b.env.mag for b in bias))
    return g.emit(op, [x, w, *bias], {}, env)


def _softmax(g: _Gen, op: O.OpDef, x: _Val) -> _Val | None:
    x = g.operand(x, 1)
    axis = _axis(g, x.ndim)
    n = g.conc((x.shape[axis],))[0]
    if op.name == "log_softmax":
        return g.emit(op, [x], {"axis": axis}, Envelope(2 * x.env.mag + math.log(n)))
    lo = math.exp(-2 * x.env.mag) / n
    return g.emit(op, [x], {"axis": axis}, Envelope(1.0, lo, lo > 0))


def _norm(g: _Gen, op: O.OpDef, x: _Val) -> _Val | None:
    """layernorm and rmsnorm: normalize over trailing axes, then optional weight (and bias)."""
    x = g.operand(x, 1)
    k = g.draw(st.integers(1, min(x.ndim, 2)))
    attrs: dict[str, Any] = {"eps": g.draw(st.sampled_from((1e-5, 1e-3)))}
    if k > 1 or g.draw(st.booleans()):
        attrs["axes"] = g.draw(st.sampled_from((tuple(range(x.ndim - k, x.ndim)), tuple(range(-k, 0)))))
    count = g.draw(st.integers(0, op.arity[1] - 1))  # weight, bias
    affine = [g.fresh(x.shape[x.ndim - g.draw(st.integers(1, k)):]) for _ in range(count)]
    spread = math.sqrt(g.numel(x.shape[x.ndim - k:]))
    env = Envelope(max(1.0, spread) * _mags(affine[:1]) + _mags(affine[1:]) * (len(affine) > 1))
    return g.emit(op, [x, *affine], attrs, env)


def _channel_stats(g: _Gen, channels: Dim, count: int) -> list[_Val]:
    return [g.fresh((channels,)) for _ in range(count)]


def _groupnorm(g: _Gen, op: O.OpDef, x: _Val) -> _Val | None:
    x = g.operand(x, 2)
    c = x.shape[1]
    groups = g.draw(st.sampled_from([d for d in range(1, c + 1) if c % d == 0])) if isinstance(c, int) else 1
    affine = _channel_stats(g, c, g.draw(st.integers(0, 2)))
    spread = math.sqrt(g.numel(x.shape[2:]) * g.conc((c,))[0] // groups)
    env = Envelope(max(1.0, spread) * _mags(affine[:1]) + _mags(affine[1:]) * (len(affine) > 1))
    return g.emit(op, [x, *affine], {"groups": groups, "eps": g.draw(st.sampled_from((1e-5, 1e-3)))}, env)


def _batchnorm(g: _Gen, op: O.OpDef, x: _Val) -> _Val | None:
    x = g.operand(x, 1)
    axis = _axis(g, x.ndim)
    mean, var, *affine = _channel_stats(g, x.shape[axis], 2 + g.draw(st.integers(0, 2)))
    scale = (x.env.mag + mean.env.mag) / math.sqrt(POSITIVE_LO)  # var is an input, made positive
    env = Envelope(scale * _mags(affine[:1]) + _mags(affine[1:]) * (len(affine) > 1))
    return g.emit(op, [x, mean, var, *affine], {"axis": axis, "eps": 1e-5}, env)


def _dropout(g: _Gen, op: O.OpDef, x: _Val) -> _Val | None:
    return g.emit(op, [x], {"p": g.draw(st.sampled_from((0.0, 0.1, 0.5)))}, _same(op.name)(x.env, None))


def _rope(g: _Gen, op: O.OpDef, x: _Val) -> _Val | None:
    def even(v: _Val) -> bool:
        return g.conc(v.shape[-1:])[0] % 2 == 0

    x = g.operand(x, 1, ok=even)
    if not even(x):  # a fresh operand of the right rank, with an even last axis
        x = g.fresh((*x.shape[:-1], g.draw(st.sampled_from((2, 4)))))
    shape = g.draw(st.sampled_from((x.shape, x.shape[-2:], x.shape[-1:])))
    cos, sin = g.fresh(shape), g.fresh(shape)
    return g.emit(op, [x, cos, sin], {}, Envelope(x.env.mag * (cos.env.mag + sin.env.mag)))


def _sdpa(g: _Gen, op: O.OpDef, x: _Val) -> _Val | None:
    q = g.operand(x, 2)
    *batch, s, head = q.shape
    if batch and isinstance(batch[-1], int) and g.draw(st.booleans()):  # grouped-query: fewer k/v heads
        batch[-1] = g.draw(st.sampled_from([h for h in range(1, batch[-1] + 1) if batch[-1] % h == 0]))
    t = g.dim()
    k, v = g.fresh((*batch, t, head)), g.fresh((*batch, t, g.dim()))
    mask = []
    if g.draw(st.booleans()):
        mask = [g.fresh(g.draw(st.sampled_from(((s, t), (1, s, t), (*q.shape[:-1], t), (t,)))))]
    attrs: dict[str, Any] = {"causal": g.draw(st.booleans())}
    if not isinstance(head, int) or g.draw(st.booleans()):
        attrs["scale"] = g.draw(st.sampled_from((0.5, 0.125)))
    return g.emit(op, [q, k, v, *mask], attrs, Envelope(v.env.mag))


_COMPOSITES: dict[str, Callable[[_Gen, O.OpDef, _Val], _Val | None]] = {
    "linear": _linear, "softmax": _softmax, "log_softmax": _softmax, "layernorm": _norm, "rmsnorm": _norm,
    "groupnorm": _groupnorm, "batchnorm": _batchnorm, "dropout": _dropout, "rope": _rope, "sdpa": _sdpa,
}


def _composite(g: _Gen, op: O.OpDef, x: _Val) -> _Val | None:
    if op.name in _COMPOSITES:
        return _COMPOSITES[op.name](g, op, x)
    attrs = _generic_attrs(g, op, x)  # a new composite: its required inputs shaped like x
    others = [g.fresh(x.shape) for _ in range(op.arity[0] - 1)]
    return None if attrs is None else g.emit(op, [x, *others], attrs, _tame(Envelope(_mags([x, *others]))))


# ------------------------------------------------------------------------------------------------
# Library ops: convolutions and pooling, told apart by their attributes
# ------------------------------------------------------------------------------------------------
def _per_axis(g: _Gen, values: list[int]) -> int | tuple[int, ...]:
    """Spatial attributes as the registry accepts them: one int, or one entry per axis."""
    return values[0] if len(set(values)) == 1 and g.draw(st.booleans()) else tuple(values)


def _kernel(g: _Gen, size: int, padding: int, dilation: int, least: int = 1) -> int | None:
    """A kernel whose dilated window fits the padded axis."""
    most = min(3, (size + 2 * padding - 1) // dilation + 1)
    return g.draw(st.integers(least, most)) if least <= most else None


def _library(g: _Gen, op: O.OpDef, x: _Val) -> _Val | None:
    n = op.meta.get("spatial")
    if n is None:
        return None
    x = g.operand(x, n + 2, n + 2)
    names = {a.name for a in op.attrs}
    sizes = g.conc(x.shape[2:])
    if "kernel_size" in names:
        return _pool(g, op, x, sizes, "dilation" in names)
    c = x.shape[1]
    groups = g.draw(st.sampled_from([d for d in range(1, c + 1) if c % d == 0])) if isinstance(c, int) else 1
    stride, dilation = ([g.draw(st.integers(1, 2)) for _ in sizes] for _ in range(2))
    padding = [g.draw(st.integers(0, 1)) for _ in sizes]
    if "output_padding" in names:
        kernel = [g.draw(st.integers(1, 3)) for _ in sizes]
        extra = [g.draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation)]
        padding = [p if (size - 1) * s - 2 * p + d * (k - 1) + e + 1 >= 1 else 0
                   for size, s, p, d, k, e in zip(sizes, stride, padding, dilation, kernel, extra)]
        out = g.dim() if groups == 1 else g.draw(st.sampled_from((1, 2)))
        w = g.fresh((c, out, *kernel))
        attrs = {"output_padding": _per_axis(g, extra)}
        out_channels = D.mul(out, groups)
    else:
        kernel = [_kernel(g, size, p, d) for size, p, d in zip(sizes, padding, dilation)]
        out_channels = g.dim() if groups == 1 else groups * g.draw(st.sampled_from((1, 2)))
        w = g.fresh((out_channels, D.floordiv(c, groups), *kernel))
        attrs = {}
    bias = [g.fresh((out_channels,))] if g.draw(st.booleans()) else []
    attrs.update(stride=_per_axis(g, stride), padding=_per_axis(g, padding), dilation=_per_axis(g, dilation))
    if groups > 1 or g.draw(st.booleans()):
        attrs["groups"] = groups
    taps = g.numel((c,)) * math.prod(kernel)
    return g.emit(op, [x, w, *bias], attrs, Envelope(x.env.mag * w.env.mag * taps + _mags(bias) * bool(bias)))


def _pool(g: _Gen, op: O.OpDef, x: _Val, sizes: tuple[int, ...], dilated: bool) -> _Val | None:
    dilation = [g.draw(st.integers(1, 2)) if dilated else 1 for _ in sizes]
    padding = [0 if d > 1 else g.draw(st.integers(0, 1)) for d in dilation]  # no window all padding (-inf)
    if not dilated and len(sizes) == 3:  # torch's avg_pool3d wants the kernel to fit the unpadded input
        kernel = [g.draw(st.integers(1, min(3, size))) for size in sizes]
        padding = [min(p, k // 2) for p, k in zip(padding, kernel)]
    else:
        kernel = [_kernel(g, size, p, d, least=max(1, 2 * p)) for size, p, d in zip(sizes, padding, dilation)]
        padding = [p if k is not None else 0 for p, k in zip(padding, kernel)]
        kernel = [k if k is not None else _kernel(g, size, 0, d) for k, size, d in zip(kernel, sizes, dilation)]
    attrs: dict[str, Any] = {"kernel_size": _per_axis(g, kernel), "padding": _per_axis(g, padding)}
    if g.draw(st.booleans()):
        attrs["stride"] = _per_axis(g, [g.draw(st.integers(1, 2)) for _ in sizes])
    if all(isinstance(d, int) for d in x.shape[2:]):
        attrs["ceil_mode"] = g.draw(st.booleans())  # needs concrete spatial sizes
    if dilated:
        attrs["dilation"] = _per_axis(g, dilation)
    else:
        attrs["count_include_pad"] = g.draw(st.booleans())
    return g.emit(op, [x], attrs, Envelope(x.env.mag, x.env.lo, x.env.pos) if dilated else Envelope(x.env.mag))


# ------------------------------------------------------------------------------------------------
# Public strategies
# ------------------------------------------------------------------------------------------------
_KIND_GENERATORS: dict[O.OpKind, Callable[[_Gen, O.OpDef, _Val], _Val | None]] = {
    O.OpKind.REDUCE: _reduce, O.OpKind.SCAN: _scan, O.OpKind.CONTRACTION: _contraction, O.OpKind.LAYOUT: _layout,
    O.OpKind.COMPOSITE: _composite, O.OpKind.LIBRARY: _library,
}
_KNOWN = {*_UNARY_ENV, *_BINARY_ENV, *_REDUCE_ENV, *_LAYOUT_ATTRS, *_COMPOSITES, "concat", "matmul"}


def _known(op: O.OpDef) -> bool:
    """Ops drawn with attributes made for them: an error building one is a bug, not a misfit."""
    return op.name in _KNOWN or (op.kind is O.OpKind.LIBRARY and "spatial" in op.meta)


def _generator(op: O.OpDef) -> Callable[[_Gen, O.OpDef, _Val], _Val | None] | None:
    if op.kind is O.OpKind.ELEMENTWISE:
        return {1: _unary, 2: _binary}.get(op.meta.get("arity"))
    return _KIND_GENERATORS.get(op.kind)


def drawn_ops(*, allow_composites: bool = True, allow_library: bool = True) -> list[str]:
    """Names of the registry ops ``programs`` draws (sources and SKIPPED_OPS excluded)."""
    return [op.name for op in O.all_ops()
            if _generator(op) is not None and op.name not in SKIPPED_OPS
            and (allow_composites or op.kind is not O.OpKind.COMPOSITE)
            and (allow_library or op.kind is not O.OpKind.LIBRARY)]


def dims_and_sizes(names: tuple[str, ...] = DIM_NAMES, max_size: int = MAX_SIZE, values: tuple[int, ...] | None = None,
                   ) -> st.SearchStrategy[tuple[tuple[D.Sym, ...], dict[str, int]]]:
    """The named dims as Syms, and the sizes (1..max_size, or one of ``values``) they will be bound to."""
    syms = tuple(D.sym(n) for n in names)
    size = st.sampled_from(values) if values else st.integers(1, max_size)
    return st.fixed_dictionaries({n: size for n in names}).map(lambda sizes: (syms, sizes))


def _tamed(g: _Gen, x: _Val) -> _Val | None:
    """``x`` squashed through sigmoid (after tanh if large): positive, bounded away from 0 and 1."""
    for name in ("tanh", "sigmoid") if x.env.mag > 10 else ("sigmoid",):
        if name not in g.allowed or x is None:
            return None
        x = _unary(g, O.get(name), x)
    return x


def _step(g: _Gen, op: O.OpDef) -> _Val | None:
    generate = _generator(op)
    assert generate is not None
    x = g.pick()
    # when x's envelope or shape does not suit op: x tamed (keeps the chain), else a fresh input
    for operand in (lambda: x, lambda: _tamed(g, x), lambda: g.fresh(x.shape)):
        try:
            arg = operand()
            out = None if arg is None else generate(g, op, arg)
        except (ShapeError, InvalidAttribute, DtypeError):
            if _known(op):
                raise  # a bug here or in the registry: let the test show it
            out = None
        if out is not None:
            return out
    return None


@st.composite
def _programs(draw: Draw, max_nodes: int, chosen: tuple[str, ...], allowed: frozenset[str],
              dtypes: tuple[DType, ...], symbolic: bool, bound: bool, sizes: tuple[int, ...] | None) -> Program:
    _, sizes = draw(dims_and_sizes(values=sizes))
    g = _Gen(draw, allowed, dtypes, sizes, symbolic)
    for _ in range(draw(st.integers(1, 3))):
        g.fresh(g.shape(draw(st.sampled_from((2, 1, 3, 4, 0)))))
    made = [v for v in (_step(g, O.get(draw(st.sampled_from(chosen)))) for _ in range(draw(st.integers(1, max_nodes))))
            if v is not None]
    if not made:
        reject()
    outputs = [made[-1].value]
    used, stack = set(), [outputs[0].id]
    while stack:
        used.add(stack[-1])
        stack.extend(set(g.b.nodes[stack.pop()].inputs) - used)
    dangling = [v.value for v in made if v.value.id not in used]  # a second output from them adds nodes
    if dangling and draw(st.booleans()):
        outputs.append(draw(st.sampled_from(dangling[::-1])))
    program = g.b.build(outputs)
    if bound and program.free_dims:
        program = program.bind({name: sizes[name] for name in program.free_dims})
    return program


def programs(max_nodes: int = 8, ops: Iterable[str] | None = None, dtypes: Iterable[Any] = (bf16, fp16, fp32),
             allow_composites: bool = True, allow_library: bool = False, symbolic: bool = True,
             bound: bool = True, sizes: Iterable[int] | None = None) -> st.SearchStrategy[Program]:
    """Random well-typed Programs of 1..max_nodes drawn op steps (a step may add a partner input or a
    keepdims reduction) with 1-2 outputs, over inputs of rank 0-4.

    ``ops`` restricts the drawn ops (and the helper reductions) to those names, overriding the
    ``allow_*`` flags; ``symbolic=False`` uses int dims only; ``bound=False`` leaves named dims unbound;
    ``sizes`` are the sizes named dims are bound to (default 1..7), e.g. (1, 2, 3, 7, 16).
    """
    everything = drawn_ops()
    if ops is None:
        chosen = drawn_ops(allow_composites=allow_composites, allow_library=allow_library)
    else:
        chosen = list(dict.fromkeys(ops))
        unknown = [name for name in chosen if name not in everything]
        if unknown:
            raise ValueError(f"programs(ops=...): {unknown} are not drawable ops; see drawn_ops() and SKIPPED_OPS")
    if not chosen:
        raise ValueError("programs(): no ops to draw")
    return _programs(max_nodes, tuple(chosen), frozenset(chosen), tuple(as_dtype(d) for d in dtypes), symbolic, bound,
                     tuple(sizes) if sizes is not None else None)


def make_inputs(program: Program, seed: int) -> dict[str, np.ndarray]:
    """float64 inputs with |x| in [0.25, 2] (never zero), in [0.5, 2] where positive_inputs says."""
    rng = np.random.default_rng(seed)
    positive = I.positive_inputs(program)
    out: dict[str, np.ndarray] = {}
    for spec, node in zip(program.inputs, program.input_ids):
        shape = program.concrete_shape(node)
        if spec.name in positive:
            out[spec.name] = np.asarray(rng.uniform(POSITIVE_LO, INPUT_HI, size=shape))
        else:
            magnitude = rng.uniform(INPUT_LO, INPUT_HI, size=shape)
            out[spec.name] = np.asarray(magnitude * rng.choice((-1.0, 1.0), size=shape))
    return out


def program_inputs(program: Program) -> st.SearchStrategy[dict[str, np.ndarray]]:
    """Inputs for a bound program (see make_inputs), drawn from a seed."""
    return st.integers(0, 2**32 - 1).map(lambda seed: make_inputs(program, seed))


@st.composite
def programs_with_inputs(draw: Draw, **kwargs: Any) -> tuple[Program, dict[str, np.ndarray]]:
    """A bound program from ``programs(**kwargs)`` and inputs for it."""
    program = draw(programs(**{**kwargs, "bound": True}))
    return program, draw(program_inputs(program))


# ------------------------------------------------------------------------------------------------
# Dim expressions (for shape arithmetic properties)
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DimExpr:
    """An expression tree over named dims: ``dim()`` builds it with dims.py, ``value()`` in Python ints."""

    op: str  # "name", "int", "+", "-", "*", "//"
    args: tuple[Any, ...]

    def dim(self) -> Dim:
        if self.op == "name":
            return D.sym(self.args[0])
        if self.op == "int":
            return self.args[0]
        a, b = (x.dim() for x in self.args)
        return {"+": D.add, "-": lambda p, q: D.add(p, D.mul(q, -1)), "*": D.mul, "//": D.floordiv}[self.op](a, b)

    def value(self, sizes: Mapping[str, int]) -> int:
        if self.op in ("name", "int"):
            return sizes[self.args[0]] if self.op == "name" else self.args[0]
        a, b = (x.value(sizes) for x in self.args)
        return {"+": a + b, "-": a - b, "*": a * b, "//": a // b if b else 0}[self.op]

    def __str__(self) -> str:
        return str(self.args[0]) if self.op in ("name", "int") else f"({self.args[0]} {self.op} {self.args[1]})"


def dim_expressions(names: tuple[str, ...] = DIM_NAMES, max_leaves: int = 6, floordiv: bool = True,
                    positive: bool = False) -> st.SearchStrategy[DimExpr]:
    """Random dim expressions over ``names``. Divisors are positive for sizes >= 1 (names, positive
    ints, their sums and products), so ``value`` never divides by zero; ``positive=True`` gives only
    such expressions."""
    name = st.sampled_from(names).map(lambda n: DimExpr("name", (n,)))

    def pair(ops: tuple[str, ...], kids: st.SearchStrategy[DimExpr]) -> st.SearchStrategy[DimExpr]:
        return st.builds(lambda op, a, b: DimExpr(op, (a, b)), st.sampled_from(ops), kids, kids)

    positives = st.recursive(st.one_of(name, st.integers(1, 4).map(lambda i: DimExpr("int", (i,)))),
                             lambda kids: pair(("+", "*"), kids), max_leaves=min(max_leaves, 3))
    if positive:
        return positives
    leaves = st.one_of(name, st.integers(-3, 5).map(lambda i: DimExpr("int", (i,))))

    def extend(kids: st.SearchStrategy[DimExpr]) -> st.SearchStrategy[DimExpr]:
        ring = pair(("+", "-", "*"), kids)
        if not floordiv:
            return ring
        return st.one_of(ring, st.builds(lambda a, b: DimExpr("//", (a, b)), kids, positives))

    return st.recursive(leaves, extend, max_leaves=max_leaves)
