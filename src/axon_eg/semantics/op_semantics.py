"""The element-level meaning of every registry op, as normal-form terms (see ``nf``).

``Evaluator(program).value(node, index)`` is the node's value at a symbolic index: input tensors are
uninterpreted functions of their indices, element-wise transcendental functions are uninterpreted
(exp, log, tanh, erf, sqrt, ...; sigmoid, silu, gelu, softplus, mish, hardswish are defined from
them), broadcasting, transpose, reshape, slice and concat are index maps, reductions are sums (or
max/min atoms) over fresh bound indices, a convolution (``conv1d`` / ``conv2d`` / ``conv3d``) is a sum
over its group's input channels and kernel offsets of weight times input, a read outside the input being
zero (an index guard), symbolic in its stride, padding, dilation and groups where those are symbolic dims
(``SYMBOLIC_ATTRIBUTES``), and the other library ops (transposed conv, pool, sort, topk) are uninterpreted
functions of their whole input tensors, as are the ops whose registry entry says ``opaque`` (cumprod, bit
operations) or ``indices`` (argmax, gather, ...: a value used as an index has no affine normal form): the
prover sees through what feeds them and treats them as functions of it. ``SEMANTICS`` is looked up by
op name; a test checks that every registry op has an entry.

Each value also has a *domain*: the conditions (``nf`` "dom" atoms) under which every partial function
it applies is inside its domain: log(p): p > 0, sqrt(p): p >= 0, reciprocal / division / rsqrt / a
negative power: the denominator != 0 (``nf.fn`` and ``nf.recip`` register them). A condition under a
reduction, a scan or a matmul is required for every value of its bound index; under a concat's or a
causal mask's index comparison, only where that part is selected. Conditions in the branches of a
real comparison (maximum, minimum, relu, clamp, abs, ...) are all required: those ops propagate NaN.
A ``where`` requires its condition's conditions, and each branch's only where that branch is selected
(``c != 0``, ``c == 0``): NumPy's where does not read the other one. ``x ** 0`` is 1 for every x and
requires nothing. ``Evaluator.domain`` gives an output's conditions, ``Evaluator.outside`` what it can
be where they fail (``nonfinite``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from fractions import Fraction
from typing import Any

from axon_eg.errors import AxonError
from axon_eg.ir import dims as D
from axon_eg.ir import ops as O
from axon_eg.ir.program import Program

from . import domains, nf, nonfinite
from .nf import ONE, ZERO, Ix, Poly


class NoSemantics(AxonError):
    """An op (or op use) the prover cannot express; the candidate is reported as unknown."""


def dim_to_ix(d: D.Dim) -> Ix:
    if isinstance(d, int):
        return Ix(d)
    out = Ix(0)
    for mono, coeff in d.terms:
        term = Ix(coeff)
        for atom in mono:
            factor = Ix.of(atom) if isinstance(atom, str) else dim_to_ix(atom.num).floordiv(dim_to_ix(atom.den))
            term = term * factor
        out = out + term
    return out


def _c(x: float) -> Fraction:
    if not math.isfinite(x):
        raise NoSemantics(f"non-finite constant {x}")
    return Fraction(x)


def clamp(x: Poly, lo: float, hi: float) -> Poly:
    if lo > -math.inf:
        x = nf.ite("<", x, Poly.const(_c(lo)), Poly.const(_c(lo)), x)
    if hi < math.inf:
        x = nf.ite("<", Poly.const(_c(hi)), x, Poly.const(_c(hi)), x)
    return x


def sigmoid(x: Poly) -> Poly:
    return nf.recip(ONE + nf.exp(-x))


def softplus(x: Poly, beta: float = 1.0, threshold: float = 20.0) -> Poly:
    bx = x.scale(_c(beta))
    soft = nf.fn("log", ONE + nf.exp(bx)).scale(1 / _c(beta))
    return nf.ite("<", Poly.const(_c(threshold)), bx, x, soft)


def _pow(x: Poly, e: float) -> Poly:
    if e == int(e) and 0 <= e <= 4:
        out = ONE
        for _ in range(int(e)):
            out = out * x
        return out
    if e == -1:
        return nf.recip(x)
    if e == 0.5:
        return nf.fn("sqrt", x)
    if e == -0.5:
        return nf.recip(nf.fn("sqrt", x))
    return nf.fn(f"pow[{e!r}]", x)


def _gelu(x: Poly, approximate: str) -> Poly:
    half = Fraction(1, 2)
    if approximate == "tanh":
        inner = (x + (x * x * x).scale(_c(0.044715))).scale(_c(math.sqrt(2.0 / math.pi)))
        return (x * (ONE + nf.fn("tanh", inner))).scale(half)
    return (x * (ONE + nf.fn("erf", x.scale(_c(1.0 / math.sqrt(2.0)))))).scale(half)


def _cast(x: Poly, dtype: Any) -> Poly:
    """A float cast is the value itself (rounding is the float-safety test's business); to bool it tests
    x != 0; to an integer it truncates toward zero, an uninterpreted function here."""
    if dtype.kind == "bool":
        return nf.ite("==", x, ZERO, ZERO, ONE)
    if dtype.kind == "int":
        c = x.as_const()
        return Poly.const(Fraction(int(c))) if c is not None else nf.fn("trunc", x)
    return x


UNARY: dict[str, Callable[..., Poly]] = {
    "neg": lambda x: -x,
    "exp": nf.exp,
    "log": lambda x: nf.fn("log", x),
    "sqrt": lambda x: nf.fn("sqrt", x),
    "rsqrt": lambda x: nf.recip(nf.fn("sqrt", x)),
    "reciprocal": nf.recip,
    "abs": lambda x: nf.ite("<", x, ZERO, -x, x),
    "square": lambda x: x * x,
    "relu": lambda x: nf.ite("<", ZERO, x, x, ZERO),
    "leaky_relu": lambda x, slope: nf.ite("<", x, ZERO, x.scale(_c(slope)), x),
    "sigmoid": sigmoid,
    "tanh": lambda x: nf.fn("tanh", x),
    "silu": lambda x: x * sigmoid(x),
    "gelu": _gelu,
    "mish": lambda x: x * nf.fn("tanh", softplus(x)),
    "hardswish": lambda x: x * clamp(x.scale(Fraction(1, 6)) + Poly.const(Fraction(1, 2)), 0.0, 1.0),
    "hardsigmoid": lambda x: clamp(x.scale(Fraction(1, 6)) + Poly.const(Fraction(1, 2)), 0.0, 1.0),
    "softplus": softplus,
    "clamp": clamp,
    "pow": lambda x, exponent: _pow(x, exponent),
    "erf": lambda x: nf.fn("erf", x),
    "sin": lambda x: nf.fn("sin", x),
    "cos": lambda x: nf.fn("cos", x),
    "cast": lambda x, dtype: _cast(x, dtype),
    "logical_not": lambda x: nf.ite("==", x, ZERO, ONE, ZERO),
}

BINARY: dict[str, Callable[[Poly, Poly], Poly]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a * nf.recip(b),
    "maximum": lambda a, b: nf.ite("<", a, b, b, a),
    "minimum": lambda a, b: nf.ite("<", a, b, a, b),
    # comparisons and logic: 1 where the relation holds, else 0 (bool values as numbers, as the reference has them)
    "gt": lambda a, b: nf.ite("<", b, a, ONE, ZERO),
    "ge": lambda a, b: nf.ite("<=", b, a, ONE, ZERO),
    "lt": lambda a, b: nf.ite("<", a, b, ONE, ZERO),
    "le": lambda a, b: nf.ite("<=", a, b, ONE, ZERO),
    "eq": lambda a, b: nf.ite("==", a, b, ONE, ZERO),
    "ne": lambda a, b: nf.ite("==", a, b, ZERO, ONE),
    "logical_and": lambda a, b: nf.ite("==", a, ZERO, ZERO, nf.ite("==", b, ZERO, ZERO, ONE)),
    "logical_or": lambda a, b: nf.ite("==", a, ZERO, nf.ite("==", b, ZERO, ZERO, ONE), ONE),
    "logical_xor": lambda a, b: nf.ite("==", a, ZERO, nf.ite("==", b, ZERO, ZERO, ONE),
                                       nf.ite("==", b, ZERO, ONE, ZERO)),
}


class Evaluator:
    """Values of a Program's nodes at symbolic indices. ``symbols`` names the rank-0 inputs that are
    symbolic scalars (any value, e.g. a positive scale ``c``); constants are always their value."""

    def __init__(self, program: Program, symbols: Iterable[str] = (),
                 positive: Iterable[str] = (), negative: Iterable[str] = ()):
        self.program = program
        self.symbols = frozenset(symbols)
        self.positive = frozenset(("sym", name) for name in positive)  # symbolic scalars known > 0
        self.negative = frozenset(("sym", name) for name in negative)  # ... known < 0
        self.shapes = [tuple(dim_to_ix(d) for d in n.shape) for n in program.nodes]
        self.dims = frozenset(program.free_dims)
        self._memo: dict[tuple[int, tuple[Ix, ...]], Poly] = {}
        self._domains: dict[tuple[int, tuple[Ix, ...]], frozenset] = {}
        self._partial: set[int] = set()  # the nodes with a domain condition (at some index)

    def output(self, which: int = 0, prefix: str = "i") -> tuple[Poly, tuple[Ix, ...]]:
        node = self.program.outputs[which]
        idx = tuple(Ix.of(f"{prefix}{a}") for a in range(len(self.shapes[node])))
        return self.value(node, idx), idx

    def domain(self, which: int = 0, prefix: str = "i") -> frozenset:
        """The conditions under which output ``which`` is defined at its symbolic index (the same
        index ``output`` uses), normalized (``domains.normalize_conditions``)."""
        node = self.program.outputs[which]
        idx = tuple(Ix.of(f"{prefix}{a}") for a in range(len(self.shapes[node])))
        self.value(node, idx)
        return domains.normalize_conditions(self._domains[(node, idx)])

    def outside(self, which: int = 0) -> tuple[frozenset, str]:
        """What output ``which`` can be where its domain fails (``nonfinite``: NaN, +inf, -inf, finite),
        and why it may be finite ("" when it may not); after ``domain`` or ``output``."""
        return nonfinite.kinds_of(self.program, self._partial)[self.program.outputs[which]]

    def _scope(self) -> Any:
        return domains.domain_scope(self.positive, self.negative, self.dims)

    def value(self, i: int, idx: tuple[Ix, ...]) -> Poly:
        key = (i, idx)
        if key not in self._memo:
            with self._scope() as dom:
                value = self._value(i, idx)
            self._memo[key], self._domains[key] = value, frozenset(dom.conditions)
            if dom.conditions:
                self._partial.add(i)
        domains.require_all(self._domains[key])  # the caller's value depends on this one
        return self._memo[key]

    def _bound(self, binders: Iterable[nf.Binder], compute: Callable[[], Poly]) -> Poly:
        """``compute()``, its conditions required for every value of ``binders``."""
        with self._scope() as dom:
            value = compute()
        domains.require_all(domains.forall(binders, dom.conditions, self.dims))
        return value

    def _guarded(self, op: str, x: Ix | Poly, y: Ix | Poly, compute: Callable[[], Poly], holds: bool = True) -> Poly:
        """``compute()``, its conditions required where the comparison ``x op y`` holds (or fails)."""
        with self._scope() as dom:
            value = compute()
        domains.require_all(domains.guarded(op, x, y, dom.conditions, self.dims, holds))
        return value

    def _broadcast(self, j: int, idx: tuple[Ix, ...]) -> tuple[Ix, ...]:
        """Index into operand j of an op with output index idx (NumPy broadcasting)."""
        shape = self.shapes[j]
        tail = idx[len(idx) - len(shape):] if shape else ()
        return tuple(Ix(0) if (d.is_const and d.const == 1) else ix for d, ix in zip(shape, tail))

    def _value(self, i: int, idx: tuple[Ix, ...]) -> Poly:
        node = self.program.nodes[i]
        op = O.get(node.op)
        a = node.attrs
        args = node.inputs
        if node.op == "input":
            if a["name"] in self.symbols:
                if node.shape:
                    raise NoSemantics(f"symbolic scalar {a['name']} has shape {D.format_shape(node.shape)}, not ()")
                return Poly.atom(("sym", a["name"]))
            return Poly.atom(("in", a["name"], idx))
        if node.op == "constant":
            return Poly.const(_c(a["value"]))
        if node.op == "pow" and a["exponent"] == 0:  # x ** 0 is 1 for every x, NaN and inf included: no condition
            return ONE
        if node.op in UNARY:
            x = self.value(args[0], idx)
            return UNARY[node.op](x, **dict(a))
        if node.op == "causal_mask":  # np.where: a masked-out element's NaN does not reach the output
            x = self._guarded("<=", idx[-1] - idx[-2], Ix(a["diagonal"]), lambda: self.value(args[0], idx))
            fill = a["fill"]
            fill_value = Poly.atom(("sym", "-inf")) if fill == -math.inf else Poly.const(_c(fill))
            return nf.ite("<=", idx[-1] - idx[-2], Ix(a["diagonal"]), x, fill_value)
        if node.op == "where":  # np.where: the unselected branch's NaN does not reach the output
            c = self.value(args[0], self._broadcast(args[0], idx))  # its conditions hold everywhere
            x = self._guarded("==", c, ZERO, lambda: self.value(args[1], self._broadcast(args[1], idx)), holds=False)
            y = self._guarded("==", c, ZERO, lambda: self.value(args[2], self._broadcast(args[2], idx)))
            return nf.ite("==", c, ZERO, y, x)
        if node.op in BINARY:
            return BINARY[node.op](self.value(args[0], self._broadcast(args[0], idx)),
                                   self.value(args[1], self._broadcast(args[1], idx)))
        if _opaque(op):
            return self.library(i, idx)
        handler = _STRUCTURED.get(node.op) or _STRUCTURED.get(op.kind.value)
        if handler is None:
            raise NoSemantics(f"op {node.op} has no element semantics")
        return handler(self, i, idx)

    # -- structured ops ------------------------------------------------------------------------
    def reduction(self, i: int, idx: tuple[Ix, ...]) -> Poly:
        node = self.program.nodes[i]
        (x,) = node.inputs
        in_shape = self.shapes[x]
        axes, keep = node.attrs["axes"], node.attrs["keepdims"]
        in_idx: list[Ix] = []
        binders = []
        out_pos = 0
        for ax in range(len(in_shape)):
            if ax in axes:
                v = nf.fresh("r")
                binders.append((v, in_shape[ax]))
                in_idx.append(Ix.of(v))
                out_pos += 1 if keep else 0
            else:
                in_idx.append(idx[out_pos])
                out_pos += 1
        body = self._bound(binders, lambda: self.value(x, tuple(in_idx)))
        kind = node.op
        if kind in ("max", "min"):
            return nf.reduce_max(kind, tuple(binders), body, self.positive, self.negative)
        if kind == "logsumexp":
            body = nf.exp(body)
        total = body
        for v, n in reversed(binders):
            total = nf.sum_over(v, n, total)
        if kind == "mean":
            count = Ix(1)
            for _, n in binders:
                count = count * n
            total = total * nf.recip(Poly.atom(("dim", count)) if not count.is_const else Poly.const(count.const))
        if kind == "logsumexp":
            total = nf.fn("log", total)
        return total

    def cumsum(self, i: int, idx: tuple[Ix, ...]) -> Poly:
        node = self.program.nodes[i]
        axis = node.attrs["axis"]
        v = nf.fresh("c")
        in_idx = list(idx)
        in_idx[axis] = Ix.of(v)
        body = self._bound([(v, idx[axis] + 1)], lambda: self.value(node.inputs[0], tuple(in_idx)))
        return nf.sum_over(v, idx[axis] + 1, body)

    def matmul(self, i: int, idx: tuple[Ix, ...]) -> Poly:
        node = self.program.nodes[i]
        x, y = node.inputs
        k = nf.fresh("k")
        batch = idx[:-2]
        xi = self._broadcast_batch(x, batch) + (idx[-2], Ix.of(k))
        yi = self._broadcast_batch(y, batch) + (Ix.of(k), idx[-1])
        body = self._bound([(k, self.shapes[x][-1])], lambda: self.value(x, xi) * self.value(y, yi))
        return nf.sum_over(k, self.shapes[x][-1], body)

    def _broadcast_batch(self, j: int, batch: tuple[Ix, ...]) -> tuple[Ix, ...]:
        shape = self.shapes[j][:-2]
        tail = batch[len(batch) - len(shape):] if shape else ()
        return tuple(Ix(0) if (d.is_const and d.const == 1) else ix for d, ix in zip(shape, tail))

    def layout(self, i: int, idx: tuple[Ix, ...]) -> Poly:
        node = self.program.nodes[i]
        a = node.attrs
        x = node.inputs[0]
        if node.op == "transpose":
            in_idx: list[Ix] = [Ix(0)] * len(idx)
            for out_axis, in_axis in enumerate(a["perm"]):
                in_idx[in_axis] = idx[out_axis]
            return self.value(x, tuple(in_idx))
        if node.op == "broadcast_to":
            return self.value(x, self._broadcast(x, idx))
        if node.op == "expand_dims":
            return self.value(x, idx[: a["axis"]] + idx[a["axis"] + 1:])
        if node.op == "squeeze":
            out = list(idx)
            for ax in a["axes"]:
                out.insert(ax, Ix(0))
            return self.value(x, tuple(out))
        if node.op == "flip":  # index n - 1 - i along each flipped axis
            out = list(idx)
            for ax in a["axes"]:
                out[ax] = self.shapes[x][ax] - Ix(1) - idx[ax]
            return self.value(x, tuple(out))
        if node.op == "slice":
            out = list(idx)
            out[a["axis"]] = dim_to_ix(a["start"]) + idx[a["axis"]].scale(a["step"])
            return self.value(x, tuple(out))
        if node.op == "concat":
            axis = a["axis"]
            offsets, total = [], Ix(0)
            for j in node.inputs:
                offsets.append(total)
                total = total + self.shapes[j][axis]
            result = None
            for j, start in reversed(list(zip(node.inputs, offsets))):
                sub = list(idx)
                sub[axis] = idx[axis] - start
                end = start + self.shapes[j][axis]

                def part_value(j: int = j, sub: tuple[Ix, ...] = tuple(sub), start: Ix = start) -> Poly:
                    if start == Ix(0):
                        return self.value(j, sub)
                    return self._guarded("<=", start, idx[axis], lambda: self.value(j, sub))

                # defined where this part is selected: start <= idx < end (each bound unless it is the axis')
                part = part_value() if end == self.shapes[i][axis] else self._guarded("<", idx[axis], end, part_value)
                result = part if result is None else nf.ite("<", idx[axis], end, part, result)
            assert result is not None
            return result
        if node.op == "reshape":
            return self.value(x, self._reshape_index(x, i, idx))
        raise NoSemantics(f"layout op {node.op} has no element semantics")

    def _reshape_index(self, x: int, i: int, idx: tuple[Ix, ...]) -> tuple[Ix, ...]:
        src = [d for d in self.shapes[x]]
        dst = [d for d in self.shapes[i]]
        non1_src = [d for d in src if not (d.is_const and d.const == 1)]
        non1_dst = [d for d in dst if not (d.is_const and d.const == 1)]
        if non1_src == non1_dst:  # only size-1 axes move: map the other axes in order
            picks = iter(ix for d, ix in zip(dst, idx) if not (d.is_const and d.const == 1))
            return tuple(Ix(0) if (d.is_const and d.const == 1) else next(picks) for d in src)
        linear = Ix(0)
        for d, ix in zip(dst, idx):
            linear = linear * d + ix
        out = []
        stride = Ix(1)
        for d in reversed(src):
            out.append(linear.floordiv(stride).mod(d))
            stride = stride * d
        return tuple(reversed(out))

    def conv(self, i: int, idx: tuple[Ix, ...]) -> Poly:
        """y[n, co, o] = bias[co] + SUM_{c < Cin/groups, k < K} w[co, c, k] * x[n, g * Cin/groups + c, p] with
        p = o * stride + k * dilation - padding on each spatial axis and g = co // (Cout / groups), the
        output channel's group; a read outside [0, size) is zero. With padding 0 every read is inside (the
        output size is what makes the last window fit), so no guard is written; otherwise each axis guards
        its read, and the input's domain conditions are required only where the read is inside."""
        node = self.program.nodes[i]
        a = node.attrs
        x, w = node.inputs[:2]
        xs, ws = self.shapes[x], self.shapes[w]
        n = len(xs) - 2
        stride, padding, dilation = ([dim_to_ix(v) for v in a[k]] for k in ("stride", "padding", "dilation"))
        groups = dim_to_ix(a["groups"])  # an int, or a symbolic dim (``SYMBOLIC_ATTRIBUTES``)
        co = idx[1]
        c = nf.fresh("c")
        ks = [nf.fresh("k") for _ in range(n)]
        binders = [(c, ws[1])] + [(k, ws[2 + j]) for j, k in enumerate(ks)]
        channel = Ix.of(c) if groups == Ix(1) else co.floordiv(ws[0].floordiv(groups)) * ws[1] + Ix.of(c)
        pos = tuple(idx[2 + j] * stride[j] + Ix.of(ks[j]) * dilation[j] - padding[j] for j in range(n))
        guards = [(j, p) for j, p in enumerate(pos) if padding[j] != Ix(0)]

        def read(guards: list[tuple[int, Ix]] = guards) -> Poly:
            if not guards:
                return self.value(x, (idx[0], channel, *pos))
            (j, p), rest = guards[0], guards[1:]
            inside = self._guarded("<", p, Ix(0), lambda: self._guarded("<", p, xs[2 + j], lambda: read(rest)),
                                   holds=False)
            return nf.ite("<", p, Ix(0), ZERO, nf.ite("<", p, xs[2 + j], inside, ZERO))

        body = self._bound(binders, lambda: self.value(w, (co, Ix.of(c), *(Ix.of(k) for k in ks))) * read())
        total = body
        for v, length in reversed(binders):
            total = nf.sum_over(v, length, total)
        if len(node.inputs) == 3:
            total = total + self.value(node.inputs[2], (co,))
        return total

    def library(self, i: int, idx: tuple[Ix, ...]) -> Poly:
        node = self.program.nodes[i]
        lams, defined = [], []
        for j in node.inputs:
            names = tuple(f"l{a}" for a in range(len(self.shapes[j])))
            with self._scope() as dom:
                lams.append((names, self.value(j, tuple(Ix.of(n) for n in names))))
            product = ONE
            for c in sorted(domains.normalize_conditions(dom.conditions), key=repr):
                product = product * Poly.atom(c)
            defined.append((names, product))
        # the input shapes are part of the function: a lambda does not carry its domain (conv over a
        # slice of x and conv over x have the same lambda), so without them the two would be equal
        attrs = (tuple(node.attrs.items()), tuple(self.shapes[j] for j in node.inputs))
        if any(p != ONE for _, p in defined):  # defined where the elements it reads are: opaque to the prover
            domains.require_all({domains.condition("lib", (), Poly.atom(("lib", node.op, attrs, tuple(defined), idx)))})
        return Poly.atom(("lib", node.op, attrs, tuple(lams), idx))


ATTRIBUTE_DIM_PREFIX = "attr_"
"""The prefix of the dims that stand for a symbolic attribute in a proof obligation (``attr_stride0``):
the numeric searches draw them small (a stride of 200 leaves no output), never as a long dim."""


def attribute_dims(names: Iterable[str]) -> set[str]:
    """The names among ``names`` that stand for symbolic attributes (``ATTRIBUTE_DIM_PREFIX``)."""
    return {n for n in names if n.startswith(ATTRIBUTE_DIM_PREFIX)}


CONVOLUTIONS = tuple(op.name for op in O.ops_of_kind(O.OpKind.LIBRARY) if op.meta.get("shape_family") == "conv")
"""The convolutions (conv1d / 2d / 3d), as the registry declares them; transposed ones stay opaque."""
SYMBOLIC_ATTRIBUTES: dict[str, dict[str, int]] = {
    name: {"stride": 1, "padding": 0, "dilation": 1, "groups": 1} for name in CONVOLUTIONS}
"""Attributes whose value the semantics take as a symbolic dim as well as an int, with the least value
each may have: a rule may leave them free (an attribute variable no condition pins), and its proof
obligation makes them symbols (``rules_discovered.instantiate``: ``attr_stride0``, a padding
``attr_padding0 - 1``, every dim being >= 1), so the proof covers every value the νGraph can match."""

_STRUCTURED: dict[str, Callable[[Evaluator, int, tuple[Ix, ...]], Poly]] = {
    **{name: Evaluator.conv for name in CONVOLUTIONS},
    "reduce": Evaluator.reduction,
    "cumsum": Evaluator.cumsum,
    "matmul": Evaluator.matmul,
    "layout": Evaluator.layout,
    "library": Evaluator.library,
}


def _opaque(op: O.OpDef) -> bool:
    """Ops the prover models as uninterpreted functions of their inputs (``Evaluator.library``)."""
    return bool(op.meta.get("opaque") or op.meta.get("indices"))


def has_semantics(op: O.OpDef) -> bool:
    """Whether the prover can express ``op`` (composites: through their expansion)."""
    return (_opaque(op) or op.kind in (O.OpKind.SOURCE, O.OpKind.COMPOSITE) or op.name in UNARY or op.name in BINARY
            or op.name in ("causal_mask", "where") or op.name in _STRUCTURED or op.kind.value in _STRUCTURED)


def describe(value: Any) -> str:
    return repr(value)
