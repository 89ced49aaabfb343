"""The op generators of the random-program strategies (part of :mod:`axon_eg.testing.strategies`): for each
kind of registry op (element-wise, reduce, scan, contraction, layout, composite, library), how to draw
operands and attributes that are valid for the dims' sizes and keep the envelope finite. Each returns the
new value, or None when the op does not fit here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from hypothesis import strategies as st

from axon_eg.egraph.schema import MAX_RANK
from axon_eg.errors import ShapeError
from axon_eg.ir import dims as D
from axon_eg.ir import ops as O
from axon_eg.ir.dims import Dim, Shape
from axon_eg.testing.envelopes import (
    BINARY_ENV,
    LIMIT,
    POSITIVE_LO,
    REDUCE_ENV,
    UNARY_ENV,
    Envelope,
    same,
    tame,
    through,
)
from axon_eg.testing.gen_state import (
    MAX_NUMEL,
    MAX_SIZE,
    Gen,
    Val,
    draw_axis,
    generic_attrs,
)

# ------------------------------------------------------------------------------------------------
# Element-wise ops
# ------------------------------------------------------------------------------------------------
_UNARY_ATTRS: dict[str, Callable[[Gen], dict[str, Any]]] = {
    "leaky_relu": lambda g: {"slope": g.draw(st.sampled_from((0.01, 0.2, 0.0, 1.5)))},
    "softplus": lambda g: {"beta": g.draw(st.sampled_from((1.0, 0.5, 2.0))),
                           "threshold": g.draw(st.sampled_from((20.0, 1.0)))},
    "clamp": lambda g: dict(zip(("lo", "hi"), g.draw(st.sampled_from(
        ((-1.0, 1.0), (0.0, 6.0), (-math.inf, 0.5), (-0.5, math.inf), (0.25, 2.0), (-2.0, -0.5)))))),
    "pow": lambda g: {"exponent": g.draw(st.sampled_from((2.0, 0.5, 3.0, -1.0, -0.5, 1.5, -2.0)))},
    "causal_mask": lambda g: {"diagonal": g.draw(st.integers(-2, 2)),
                              "fill": g.draw(st.sampled_from((-100.0, -1.0, 0.0, 1.0)))},
}


def _positive_ok(op: O.OpDef, args: Iterable[Val]) -> bool:
    slots = op.meta.get("positive_inputs", ())
    return all(a.env.positive() is not None for i, a in enumerate(args) if i in slots)


def unary(g: Gen, op: O.OpDef, x: Val) -> Val | None:
    if (op.meta.get("index_dependent") and x.ndim < 2) or not _positive_ok(op, [x]):
        return None
    draw_attrs = _UNARY_ATTRS.get(op.name)
    attrs = draw_attrs(g) if draw_attrs else generic_attrs(g, op, x)
    if attrs is None:
        return None
    transfer = UNARY_ENV.get(op.name, lambda e, a: tame(e))
    return g.emit(op, [x], attrs, transfer(x.env, g.attrs_of(op, (x.shape,), attrs)))


def _broadcasts(a: Shape, b: Shape) -> bool:
    try:
        O.broadcast_shapes(a, b)
    except ShapeError:
        return False
    return True


def _partner(g: Gen, x: Val) -> Val:
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
                      if op.name in g.allowed and op.name in REDUCE_ENV and "keepdims" in {a.name for a in op.attrs}]
        if reductions:
            made = reduce(g, g.draw(st.sampled_from(reductions)), x, keepdims=True)
            if made is not None:
                return made
    if kind == "self":
        return x
    return g.fresh(x.shape)


def binary(g: Gen, op: O.OpDef, x: Val) -> Val | None:
    transfer = BINARY_ENV.get(op.name, lambda a, b: tame(Envelope(max(a.mag, b.mag))))
    for _ in range(3):
        y = _partner(g, x)
        args = [y, x] if g.draw(st.booleans()) else [x, y]
        env = transfer(args[0].env, args[1].env)
        if env is not None and env.mag <= LIMIT and _positive_ok(op, args):
            return g.emit(op, args, {}, env)
    return None


def select(g: Gen, op: O.OpDef, x: Val) -> Val | None:
    """``where(cond, a, b)``: ``x`` as the condition (nonzero: true) or as a branch, partners for the rest."""
    others = [_partner(g, x), _partner(g, x)]
    args = [x, *others] if g.draw(st.booleans()) else [others[0], x, others[1]]
    try:
        O.broadcast_shapes(*(a.shape for a in args))
    except ShapeError:
        return None
    return g.emit(op, args, {}, Envelope(max(args[1].env.mag, args[2].env.mag)))


# ------------------------------------------------------------------------------------------------
# Reductions, scans, contractions
# ------------------------------------------------------------------------------------------------
def reduce(g: Gen, op: O.OpDef, x: Val, keepdims: bool | None = None) -> Val | None:
    attrs = generic_attrs(g, op, x)
    if attrs is None:
        return None
    if keepdims is not None:
        attrs["keepdims"] = keepdims
    a = g.attrs_of(op, (x.shape,), attrs)
    axes = a["axes"] if "axes" in a else ((a["axis"],) if "axis" in a else range(x.ndim))
    n = math.prod(g.conc(tuple(x.shape[i] for i in axes)))
    transfer = REDUCE_ENV.get(op.name)
    return g.emit(op, [x], attrs, transfer(x.env, n) if transfer else tame(x.env))


def scan(g: Gen, op: O.OpDef, x: Val) -> Val | None:
    return reduce(g, op, g.operand(x, 1))


def contraction(g: Gen, op: O.OpDef, x: Val) -> Val | None:
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


def _reshape_attrs(g: Gen, x: Val) -> dict[str, Any]:
    """A row-major reshape to a random regrouping of the shape's factors (1s added and dropped)."""
    factors = list(g.draw(st.permutations([f for d in x.shape for f in _factors(d)])))
    factors += [1] * g.draw(st.integers(0, 1))
    cuts = sorted(g.draw(st.lists(st.integers(0, len(factors)), max_size=3)))
    bounds = [0, *cuts, len(factors)]
    return {"shape": tuple(D.product(factors[a:b]) for a, b in zip(bounds, bounds[1:]))}


def _slice_attrs(g: Gen, x: Val) -> dict[str, Any] | None:
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


def _broadcast_to_attrs(g: Gen, x: Val) -> dict[str, Any]:
    lead = tuple(g.dim() for _ in range(g.draw(st.integers(0, max(0, min(2, MAX_RANK - x.ndim))))))
    return {"shape": (*lead, *(g.dim() if d == 1 and g.draw(st.booleans()) else d for d in x.shape))}


def _squeeze_attrs(g: Gen, x: Val) -> dict[str, Any] | None:
    ones = [i for i, d in enumerate(x.shape) if d == 1]
    if not ones and any(isinstance(d, D.Sym) for d in x.shape):
        return None  # squeeze-all is ambiguous until the named dims are bound
    picked = g.draw(st.lists(st.sampled_from(ones), unique=True)) if ones else []
    return {"axes": tuple(i - x.ndim if g.draw(st.booleans()) else i for i in picked)}


def _transpose_attrs(g: Gen, x: Val) -> dict[str, Any]:
    perm = g.draw(st.permutations(range(x.ndim)))
    return {"perm": tuple(p - x.ndim if g.draw(st.booleans()) else p for p in perm)}


LAYOUT_ATTRS: dict[str, Callable[[Gen, Val], dict[str, Any] | None]] = {
    "transpose": _transpose_attrs,
    "reshape": _reshape_attrs,
    "broadcast_to": _broadcast_to_attrs,
    "expand_dims": lambda g, x: {"axis": g.draw(st.integers(-x.ndim - 1, x.ndim))} if x.ndim < MAX_RANK else None,
    "squeeze": _squeeze_attrs,
    "slice": _slice_attrs,
    "flip": lambda g, x: {"axes": tuple(sorted(g.draw(st.sets(st.integers(0, x.ndim - 1), max_size=x.ndim))))}
    if x.ndim else None,
}


def _concat(g: Gen, op: O.OpDef, x: Val) -> Val | None:
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
                   through(op.name, *envs))
    return g.emit(op, parts, {"axis": axis - x.ndim if g.draw(st.booleans()) else axis}, env)


def layout(g: Gen, op: O.OpDef, x: Val) -> Val | None:
    if op.name == "concat":
        return _concat(g, op, x)
    draw_attrs = LAYOUT_ATTRS.get(op.name)
    if op.name == "squeeze" and 1 not in x.shape:
        x = g.fresh((*x.shape, 1))
    attrs = draw_attrs(g, x) if draw_attrs else generic_attrs(g, op, x)
    return None if attrs is None else g.emit(op, [x], attrs, same(op.name)(x.env, None))


# ------------------------------------------------------------------------------------------------
# Composites
# ------------------------------------------------------------------------------------------------
def _mags(vals: Iterable[Val]) -> float:
    return math.prod(v.env.mag for v in vals)


def _linear(g: Gen, op: O.OpDef, x: Val) -> Val | None:
    x = g.operand(x, 2)
    w = g.fresh((g.dim(), x.shape[-1]))
    bias = [g.fresh((w.shape[0],))] if g.draw(st.booleans()) else []
    env = Envelope(x.env.mag * w.env.mag * g.numel((x.shape[-1],)) + sum(b.env.mag for b in bias))
    return g.emit(op, [x, w, *bias], {}, env)


def _softmax(g: Gen, op: O.OpDef, x: Val) -> Val | None:
    x = g.operand(x, 1)
    axis = draw_axis(g, x.ndim)
    n = g.conc((x.shape[axis],))[0]
    if op.name == "log_softmax":
        return g.emit(op, [x], {"axis": axis}, Envelope(2 * x.env.mag + math.log(n)))
    lo = math.exp(-2 * x.env.mag) / n
    return g.emit(op, [x], {"axis": axis}, Envelope(1.0, lo, lo > 0))


def _norm(g: Gen, op: O.OpDef, x: Val) -> Val | None:
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


def _channel_stats(g: Gen, channels: Dim, count: int) -> list[Val]:
    return [g.fresh((channels,)) for _ in range(count)]


def _groupnorm(g: Gen, op: O.OpDef, x: Val) -> Val | None:
    x = g.operand(x, 2)
    c = x.shape[1]
    groups = g.draw(st.sampled_from([d for d in range(1, c + 1) if c % d == 0])) if isinstance(c, int) else 1
    affine = _channel_stats(g, c, g.draw(st.integers(0, 2)))
    spread = math.sqrt(g.numel(x.shape[2:]) * g.conc((c,))[0] // groups)
    env = Envelope(max(1.0, spread) * _mags(affine[:1]) + _mags(affine[1:]) * (len(affine) > 1))
    return g.emit(op, [x, *affine], {"groups": groups, "eps": g.draw(st.sampled_from((1e-5, 1e-3)))}, env)


def _batchnorm(g: Gen, op: O.OpDef, x: Val) -> Val | None:
    x = g.operand(x, 1)
    axis = draw_axis(g, x.ndim)
    mean, var, *affine = _channel_stats(g, x.shape[axis], 2 + g.draw(st.integers(0, 2)))
    scale = (x.env.mag + mean.env.mag) / math.sqrt(POSITIVE_LO)  # var is an input, made positive
    env = Envelope(scale * _mags(affine[:1]) + _mags(affine[1:]) * (len(affine) > 1))
    return g.emit(op, [x, mean, var, *affine], {"axis": axis, "eps": 1e-5}, env)


def _dropout(g: Gen, op: O.OpDef, x: Val) -> Val | None:
    return g.emit(op, [x], {"p": g.draw(st.sampled_from((0.0, 0.1, 0.5)))}, same(op.name)(x.env, None))


def _rope(g: Gen, op: O.OpDef, x: Val) -> Val | None:
    def even(v: Val) -> bool:
        return g.conc(v.shape[-1:])[0] % 2 == 0

    x = g.operand(x, 1, ok=even)
    if not even(x):  # a fresh operand of the right rank, with an even last axis
        x = g.fresh((*x.shape[:-1], g.draw(st.sampled_from((2, 4)))))
    shape = g.draw(st.sampled_from((x.shape, x.shape[-2:], x.shape[-1:])))
    cos, sin = g.fresh(shape), g.fresh(shape)
    return g.emit(op, [x, cos, sin], {}, Envelope(x.env.mag * (cos.env.mag + sin.env.mag)))


def _sdpa(g: Gen, op: O.OpDef, x: Val) -> Val | None:
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


COMPOSITES: dict[str, Callable[[Gen, O.OpDef, Val], Val | None]] = {
    "linear": _linear, "softmax": _softmax, "log_softmax": _softmax, "layernorm": _norm, "rmsnorm": _norm,
    "groupnorm": _groupnorm, "batchnorm": _batchnorm, "dropout": _dropout, "rope": _rope, "sdpa": _sdpa,
}


def composite(g: Gen, op: O.OpDef, x: Val) -> Val | None:
    if op.name in COMPOSITES:
        return COMPOSITES[op.name](g, op, x)
    attrs = generic_attrs(g, op, x)  # a new composite: its required inputs shaped like x
    others = [g.fresh(x.shape) for _ in range(op.arity[0] - 1)]
    return None if attrs is None else g.emit(op, [x, *others], attrs, tame(Envelope(_mags([x, *others]))))


# ------------------------------------------------------------------------------------------------
# Library ops: convolutions and pooling, told apart by their attributes
# ------------------------------------------------------------------------------------------------
def _per_axis(g: Gen, values: list[int]) -> int | tuple[int, ...]:
    """Spatial attributes as the registry accepts them: one int, or one entry per axis."""
    return values[0] if len(set(values)) == 1 and g.draw(st.booleans()) else tuple(values)


def _kernel(g: Gen, size: int, padding: int, dilation: int, least: int = 1) -> int | None:
    """A kernel whose dilated window fits the padded axis."""
    most = min(3, (size + 2 * padding - 1) // dilation + 1)
    return g.draw(st.integers(least, most)) if least <= most else None


def library(g: Gen, op: O.OpDef, x: Val) -> Val | None:
    if op.name in _SORTS:
        return _sort(g, op, x)
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


_SORTS = ("sort", "topk")  # the value-returning sorts (their index variants are SKIPPED_OPS: meta indices)


def _sort(g: Gen, op: O.OpDef, x: Val) -> Val | None:
    """sort along a drawn axis (either order), or topk (largest or smallest) of k up to the axis' size: a
    permutation or a subset of x's values, so x's envelope."""
    x = g.operand(x, 1)
    axis = g.draw(st.integers(-x.ndim, x.ndim - 1))
    if op.name == "sort":
        attrs: dict[str, Any] = {"axis": axis, "descending": g.draw(st.booleans())}
    else:
        size = x.shape[axis]
        k = g.draw(st.integers(1, min(size, 4))) if isinstance(size, int) else 1
        attrs = {"axis": axis, "k": k, "largest": g.draw(st.booleans())}
    return g.emit(op, [x], attrs, Envelope(x.env.mag, x.env.lo, x.env.pos))


def _pool(g: Gen, op: O.OpDef, x: Val, sizes: tuple[int, ...], dilated: bool) -> Val | None:
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


