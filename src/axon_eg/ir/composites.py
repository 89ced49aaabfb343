"""Composite ops: named patterns (softmax, norms, attention, ...) that expand into primitives.

Each composite has an expansion (so later stages see through it), a direct float64 NumPy reference
(so the expansion is checked against an independent formula) and a shape rule that runs the
expansion on a scratch builder, so the two can never disagree.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from axon_eg.errors import ShapeError
from axon_eg.ir import dims as D
from axon_eg.ir.dtypes import fp32
from axon_eg.ir.ops import Attr, Attrs, OpDef, OpKind, normalize_axis, promoted, register

if TYPE_CHECKING:
    from axon_eg.ir.program import Builder, Value


def _shape_via_expansion(name: str) -> Callable[..., Any]:
    def rule(shapes: tuple[D.Shape, ...], a: Attrs) -> D.Shape:
        from axon_eg.ir.program import Builder  # lazy: program imports the registry, which imports this module

        b = Builder(f"{name}-shape")
        ins = [b.input(f"in{i}", s, fp32) for i, s in enumerate(shapes)]
        from axon_eg.ir.ops import get  # lazy: the registry imports this module at its end

        return get(name).expand(b, *ins, **dict(a)).shape

    return rule


def composite(name: str, arity: tuple[int, int], inputs: tuple[str, ...], reference: Callable[..., np.ndarray],
              attrs: tuple[Attr, ...] = (), canon: Callable[..., Attrs] | None = None, doc: str = "",
              **meta: Any):
    """Decorator: register the decorated expansion as composite op ``name``."""

    def wrap(expand: Callable[..., Value]) -> Callable[..., Value]:
        register(OpDef(
            name, OpKind.COMPOSITE, arity, shape=_shape_via_expansion(name), dtype=promoted,
            reference=lambda xs, a: reference(*xs, **a), attrs=attrs, canon=canon, expand=expand,
            inputs=inputs, doc=doc, meta=meta,
        ))
        return expand

    return wrap


def _axis_canon(shapes: tuple[D.Shape, ...], a: Attrs) -> Attrs:
    return a.replace(axis=normalize_axis(a["axis"], len(shapes[0])))


def _trailing_axes_canon(shapes: tuple[D.Shape, ...], a: Attrs) -> Attrs:
    rank = len(shapes[0])
    axes = tuple(sorted({normalize_axis(ax, rank) for ax in a["axes"]})) if a["axes"] else (rank - 1,)
    if axes != tuple(range(rank - len(axes), rank)):
        raise ShapeError(f"normalized axes {a['axes']} must be the trailing axes of rank {rank}")
    return a.replace(axes=axes)


# -- linear -------------------------------------------------------------------------------------
def _linear_ref(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    y = x @ w.T
    return y if bias is None else y + bias


@composite("linear", (2, 3), ("x", "weight", "bias"), _linear_ref, doc="x @ weight.T + bias (torch layout)")
def _linear(b: Builder, x: Value, w: Value, bias: Value | None = None) -> Value:
    if w.ndim != 2:
        raise ShapeError(f"weight must be [out, in], got {D.format_shape(w.shape)}")
    y = b.emit("matmul", x, b.emit("transpose", w, perm=(1, 0)))
    return y if bias is None else b.emit("add", y, bias)


# -- softmax family -----------------------------------------------------------------------------
def _softmax_ref(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax_ref(x: np.ndarray, axis: int) -> np.ndarray:
    s = x - np.max(x, axis=axis, keepdims=True)
    return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))


@composite("softmax", (1, 1), ("x",), _softmax_ref, (Attr("axis", "int", -1),), _axis_canon,
           "exp(x - max) / sum(exp(x - max)) along axis")
def _softmax(b: Builder, x: Value, axis: int) -> Value:
    shifted = b.emit("sub", x, b.emit("max", x, axes=(axis,), keepdims=True))
    e = b.emit("exp", shifted)
    return b.emit("div", e, b.emit("sum", e, axes=(axis,), keepdims=True))


@composite("log_softmax", (1, 1), ("x",), _log_softmax_ref, (Attr("axis", "int", -1),), _axis_canon,
           "x - max - log(sum(exp(x - max))) along axis")
def _log_softmax(b: Builder, x: Value, axis: int) -> Value:
    shifted = b.emit("sub", x, b.emit("max", x, axes=(axis,), keepdims=True))
    total = b.emit("sum", b.emit("exp", shifted), axes=(axis,), keepdims=True)
    return b.emit("sub", shifted, b.emit("log", total))


# -- normalizations -----------------------------------------------------------------------------
def _affine(b: Builder, y: Value, weight: Value | None, bias: Value | None) -> Value:
    if weight is not None:
        y = b.emit("mul", y, weight)
    if bias is not None:
        y = b.emit("add", y, bias)
    return y


def _layernorm_ref(x: np.ndarray, weight: np.ndarray | None = None, bias: np.ndarray | None = None, *,
                   axes: tuple[int, ...], eps: float) -> np.ndarray:
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    return y * (1.0 if weight is None else weight) + (0.0 if bias is None else bias)


def _normalize(b: Builder, x: Value, axes: tuple[int, ...], eps: float) -> Value:
    centered = b.emit("sub", x, b.emit("mean", x, axes=axes, keepdims=True))
    var = b.emit("mean", b.emit("square", centered), axes=axes, keepdims=True)
    return b.emit("mul", centered, b.emit("rsqrt", b.emit("add", var, b.constant(eps, x.dtype))))


@composite("layernorm", (1, 3), ("x", "weight", "bias"), _layernorm_ref,
           (Attr("axes", "ints", ()), Attr("eps", "float", 1e-5)), _trailing_axes_canon,
           "(x - mean) / sqrt(var + eps) * weight + bias over the trailing axes")
def _layernorm(b: Builder, x: Value, weight: Value | None = None, bias: Value | None = None, *,
               axes: tuple[int, ...], eps: float) -> Value:
    return _affine(b, _normalize(b, x, axes, eps), weight, bias)


def _rmsnorm_ref(x: np.ndarray, weight: np.ndarray | None = None, *, axes: tuple[int, ...],
                 eps: float) -> np.ndarray:
    y = x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps)
    return y if weight is None else y * weight


@composite("rmsnorm", (1, 2), ("x", "weight"), _rmsnorm_ref,
           (Attr("axes", "ints", ()), Attr("eps", "float", 1e-6)), _trailing_axes_canon,
           "x / sqrt(mean(x**2) + eps) * weight over the trailing axes")
def _rmsnorm(b: Builder, x: Value, weight: Value | None = None, *, axes: tuple[int, ...], eps: float) -> Value:
    ms = b.emit("mean", b.emit("square", x), axes=axes, keepdims=True)
    y = b.emit("mul", x, b.emit("rsqrt", b.emit("add", ms, b.constant(eps, x.dtype))))
    return _affine(b, y, weight, None)


def _channel_view(b: Builder, stat: Value, rank: int, axis: int) -> Value:
    """A per-channel [C] vector reshaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
    return b.emit("reshape", stat, shape=(stat.shape[0],) + (1,) * (rank - axis - 1))


def _groupnorm_ref(x: np.ndarray, weight: np.ndarray | None = None, bias: np.ndarray | None = None, *,
                   groups: int, eps: float) -> np.ndarray:
    n, c = x.shape[:2]
    xr = x.reshape(n, groups, -1)
    mu = xr.mean(axis=-1, keepdims=True)
    var = ((xr - mu) ** 2).mean(axis=-1, keepdims=True)
    y = ((xr - mu) / np.sqrt(var + eps)).reshape(x.shape)
    view = (c,) + (1,) * (x.ndim - 2)
    if weight is not None:
        y = y * weight.reshape(view)
    if bias is not None:
        y = y + bias.reshape(view)
    return y


@composite("groupnorm", (1, 3), ("x", "weight", "bias"), _groupnorm_ref,
           (Attr("groups", "int"), Attr("eps", "float", 1e-5)), None,
           "normalize [N, C, ...] over groups of C/groups channels and all spatial axes")
def _groupnorm(b: Builder, x: Value, weight: Value | None = None, bias: Value | None = None, *,
               groups: int, eps: float) -> Value:
    if x.ndim < 2:
        raise ShapeError(f"needs [N, C, ...], got {D.format_shape(x.shape)}")
    n, c, *spatial = x.shape
    if groups < 1 or (isinstance(c, int) and c % groups):
        raise ShapeError(f"{c} channels do not split into {groups} groups")
    grouped = b.emit("reshape", x, shape=(n, groups, D.floordiv(c, groups), *spatial))
    y = _normalize(b, grouped, tuple(range(2, grouped.ndim)), eps)
    y = b.emit("reshape", y, shape=x.shape)
    w = None if weight is None else _channel_view(b, weight, x.ndim, 1)
    bb = None if bias is None else _channel_view(b, bias, x.ndim, 1)
    return _affine(b, y, w, bb)


def _batchnorm_ref(x: np.ndarray, mean: np.ndarray, var: np.ndarray, weight: np.ndarray | None = None,
                   bias: np.ndarray | None = None, *, eps: float, axis: int) -> np.ndarray:
    view = (-1,) + (1,) * (x.ndim - axis - 1)
    y = (x - mean.reshape(view)) / np.sqrt(var.reshape(view) + eps)
    if weight is not None:
        y = y * weight.reshape(view)
    if bias is not None:
        y = y + bias.reshape(view)
    return y


@composite("batchnorm", (3, 5), ("x", "running_mean", "running_var", "weight", "bias"), _batchnorm_ref,
           (Attr("eps", "float", 1e-5), Attr("axis", "int", 1)), _axis_canon,
           "inference batch norm with running statistics along the channel axis", positive_inputs=(2,))
def _batchnorm(b: Builder, x: Value, mean: Value, var: Value, weight: Value | None = None,
               bias: Value | None = None, *, eps: float, axis: int) -> Value:
    for stat in (mean, var, weight, bias):
        if stat is not None and stat.shape != (x.shape[axis],):
            raise ShapeError(f"statistics must be [{x.shape[axis]}], got {D.format_shape(stat.shape)}")
    m, v = (_channel_view(b, s, x.ndim, axis) for s in (mean, var))
    inv = b.emit("rsqrt", b.emit("add", v, b.constant(eps, x.dtype)))
    y = b.emit("mul", b.emit("sub", x, m), inv)
    w = None if weight is None else _channel_view(b, weight, x.ndim, axis)
    bb = None if bias is None else _channel_view(b, bias, x.ndim, axis)
    return _affine(b, y, w, bb)


@composite("dropout", (1, 1), ("x",), lambda x, p: x, (Attr("p", "float", 0.5),), None,
           "inference dropout: the identity")
def _dropout(b: Builder, x: Value, p: float) -> Value:
    return x


# -- rotary embedding ---------------------------------------------------------------------------
def _rope_ref(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


@composite("rope", (3, 3), ("x", "cos", "sin"), _rope_ref, (), None,
           "rotary embedding x*cos + rotate_half(x)*sin (rotate_half = concat(-x2, x1))")
def _rope(b: Builder, x: Value, cos: Value, sin: Value) -> Value:
    d = x.shape[-1]
    if isinstance(d, int) and d % 2:
        raise ShapeError(f"the last axis must be even, got {D.format_shape(x.shape)}")
    half = D.floordiv(d, 2)
    x1 = b.emit("slice", x, axis=-1, start=0, stop=half)
    x2 = b.emit("slice", x, axis=-1, start=half, stop=d)
    rotated = b.emit("concat", b.emit("neg", x2), x1, axis=-1)
    return b.emit("add", b.emit("mul", x, cos), b.emit("mul", rotated, sin))


# -- attention ----------------------------------------------------------------------------------
def _sdpa_ref(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None, *,
              scale: float | None, causal: bool) -> np.ndarray:
    if q.ndim >= 3 and q.shape[-3] != k.shape[-3]:
        reps = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, reps, axis=-3), np.repeat(v, reps, axis=-3)
    s = (q @ np.swapaxes(k, -1, -2)) * (scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        s = s + mask
    if causal:
        keep = np.arange(s.shape[-1])[None, :] <= np.arange(s.shape[-2])[:, None]
        s = np.where(keep, s, -np.inf)
    return _softmax_ref(s, -1) @ v


@composite("sdpa", (3, 4), ("q", "k", "v", "mask"), _sdpa_ref,
           (Attr("scale", "optional_float", None), Attr("causal", "bool", False)), None,
           "softmax(q @ k^T * scale + mask) @ v; grouped-query heads when k/v have fewer heads (axis -3)")
def _sdpa(b: Builder, q: Value, k: Value, v: Value, mask: Value | None = None, *, scale: float | None,
          causal: bool) -> Value:
    if q.ndim < 2 or k.ndim != q.ndim or v.ndim != q.ndim:
        raise ShapeError("q, k and v need the same rank >= 2")
    if scale is None:
        if not isinstance(q.shape[-1], int):
            raise ShapeError(f"head dim {q.shape[-1]} is symbolic: pass scale explicitly")
        scale = 1.0 / math.sqrt(q.shape[-1])
    hq, hkv = (q.shape[-3], k.shape[-3]) if q.ndim >= 3 else (1, 1)
    grouped = hq != hkv
    if grouped:  # [.., Hkv*G, S, D] -> [.., Hkv, G, S, D]; k and v broadcast over G
        group = D.floordiv(hq, hkv)
        if D.mul(group, hkv) != hq:
            raise ShapeError(f"{hq} query heads do not split into groups of {hkv} key/value heads")
        q = b.emit("reshape", q, shape=(*q.shape[:-3], hkv, group, *q.shape[-2:]))
        k = b.emit("expand_dims", k, axis=-3)
        v = b.emit("expand_dims", v, axis=-3)
    perm = tuple(range(k.ndim - 2)) + (k.ndim - 1, k.ndim - 2)
    scores = b.emit("mul", b.emit("matmul", q, b.emit("transpose", k, perm=perm)), b.constant(scale, q.dtype))
    if mask is not None:
        if grouped and mask.ndim >= 3:  # [.., 1, S, T] -> [.., 1, 1, S, T]; [.., Hq, S, T] -> [.., Hkv, G, S, T]
            mask = (b.emit("expand_dims", mask, axis=-3) if mask.shape[-3] == 1
                    else b.emit("reshape", mask, shape=(*mask.shape[:-3], hkv, group, *mask.shape[-2:])))
        scores = b.emit("add", scores, mask)
    if causal:
        scores = b.emit("causal_mask", scores, diagonal=0, fill=-math.inf)
    probs = b.emit("softmax", scores, axis=-1)
    out = b.emit("matmul", probs, v)
    if grouped:
        out = b.emit("reshape", out, shape=(*out.shape[:-4], hq, *out.shape[-2:]))
    return out

