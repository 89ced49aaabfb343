"""Handlers of the PyTorch front end for the loss functions (part of :mod:`axon_eg.ir.torch_import`, each
registered in the table with :func:`~axon_eg.ir.aten_handlers.handles`): mean-squared, L1, Huber and smooth L1,
KL divergence, negative log-likelihood and cross entropy (class indices or probabilities, weights, ignored
index, label smoothing), cosine similarity and pairwise distance, the triplet margin, the binary cross entropy
(with logits or not), and the margin and soft-margin families. Each is expanded into registry primitives with
torch's reduction (``none`` / ``mean`` / ``sum``).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from axon_eg.ir.aten_handlers import Ctx, handles, vector_norm
from axon_eg.ir.aten_nn import channel_view
from axon_eg.ir.builder import Value

# -- losses: expanded into registry primitives ---------------------------------------------------
_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}  # torch's at::Reduction enum


def _reduced(cx: Ctx, loss: Value, reduction: int, mean_over: int | None = None) -> Value:
    """torch's ``apply_loss_reduction``: none, mean over every element (or the sum over ``mean_over``
    elements), or sum."""
    kind = _REDUCTIONS.get(int(reduction))
    if kind is None:
        raise cx.unsupported(f"reduction={reduction!r} is not one of torch's (0 none, 1 mean, 2 sum)")
    if kind == "none":
        return loss
    if kind == "mean" and mean_over is None:
        return cx.emit("mean", loss, axes=())
    total = cx.emit("sum", loss, axes=())
    return cx.scale(total, 1.0 / mean_over) if kind == "mean" else total


def _difference(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.emit("sub", a["self"], a["target"])


@handles("aten.mse_loss.default")
def _mse_loss(cx: Ctx, a: dict[str, Any]) -> Value:
    return _reduced(cx, cx.emit("square", _difference(cx, a)), a["reduction"])


@handles("aten.l1_loss.default")
def _l1_loss(cx: Ctx, a: dict[str, Any]) -> Value:
    return _reduced(cx, cx.emit("abs", _difference(cx, a)), a["reduction"])


def _huber(cx: Ctx, d: Value, delta: float) -> Value:
    """0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta), without a select: with c = min(|d|, delta),
    0.5 c^2 + delta (|d| - c) (equal on both branches)."""
    size = cx.emit("abs", d)
    c = cx.binary("minimum", size, float(delta))
    quadratic = cx.scale(cx.emit("square", c), 0.5)
    return cx.emit("add", quadratic, cx.scale(cx.emit("sub", size, c), float(delta)))


@handles("aten.huber_loss.default")
def _huber_loss(cx: Ctx, a: dict[str, Any]) -> Value:
    if a["delta"] <= 0:
        raise cx.unsupported(f"huber_loss with delta={a['delta']}: torch requires delta > 0")
    return _reduced(cx, _huber(cx, _difference(cx, a), a["delta"]), a["reduction"])


@handles("aten.smooth_l1_loss.default")
def _smooth_l1_loss(cx: Ctx, a: dict[str, Any]) -> Value:  # huber(delta=beta) / beta; l1 at beta 0
    beta = float(a["beta"])
    d = _difference(cx, a)
    loss = cx.emit("abs", d) if beta == 0 else cx.scale(_huber(cx, d, beta), 1.0 / beta)
    return _reduced(cx, loss, a["reduction"])


def _xlogx(cx: Ctx, t: Value) -> Value:
    """torch's ``xlogy(t, t)`` for t >= 0 (0 at t = 0): t * log(max(t, tiny)), tiny the smallest normal of
    t's dtype (exact at 0 and at every normal t)."""
    tiny = float(torch.finfo(getattr(torch, t.dtype.torch_name)).tiny)
    return cx.emit("mul", t, cx.emit("log", cx.binary("maximum", t, tiny)))


@handles("aten.kl_div.default")
def _kl_div(cx: Ctx, a: dict[str, Any]) -> Value:
    x, t = a["self"], a["target"]
    if a["log_target"]:
        loss = cx.emit("mul", cx.emit("exp", t), cx.emit("sub", t, x))
    else:
        loss = cx.emit("sub", _xlogx(cx, t), cx.emit("mul", t, x))
    return _reduced(cx, loss, a["reduction"])


def _picked(cx: Ctx, logp: Value, target: Value, axis: int) -> Value:
    """``logp`` at each target's class along ``axis`` (a gather of the targets, the class axis squeezed)."""
    index = cx.emit("expand_dims", target, axis=axis)
    return cx.emit("squeeze", cx.emit("gather", logp, index, axis=axis), axes=(axis,))


def _nll(cx: Ctx, logp: Value, target: Value, weight: Value | None, reduction: Any, ignore_index: int,
         smoothing: float = 0.0) -> Value:
    """torch's negative log likelihood of class-index targets: ``-w[t] * logp[t]`` per element (0 where
    ``t == ignore_index``), with label smoothing's ``-sum_c w_c logp_c / C`` mixed in; the mean divides by the
    weights of the targets counted."""
    axis = 0 if logp.ndim == 1 else 1
    classes = int(logp.shape[axis])
    valid = cx.emit("ne", target, cx.b.constant(float(ignore_index), target.dtype))
    safe = cx.emit("where", valid, target, cx.b.constant(0.0, target.dtype))  # an ignored target reads class 0
    loss = cx.emit("neg", _picked(cx, logp, safe, axis))
    wt = None
    if weight is not None:
        wt = cx.emit("index_select", weight, safe if safe.ndim == 1 else
                     cx.emit("reshape", safe, shape=(math.prod(int(d) for d in safe.shape),)), axis=0)
        wt = wt if safe.ndim == 1 else cx.emit("reshape", wt, shape=safe.shape)
        loss = cx.emit("mul", loss, wt)
    if smoothing:
        per_class = weight if weight is None or logp.ndim == 1 else channel_view(cx, weight, logp.ndim)
        terms = logp if weight is None else cx.emit("mul", logp, per_class)
        smooth = cx.emit("neg", cx.emit("sum", terms, axes=(axis,)))
        loss = cx.binary("add", cx.scale(loss, 1.0 - smoothing), cx.scale(smooth, smoothing / classes))
    zero = cx.b.constant(0.0, loss.dtype)
    loss = cx.emit("where", valid, loss, zero)
    red = _REDUCTIONS.get(int(reduction))
    if red is None:
        raise cx.unsupported(f"reduction={reduction!r} is not one of torch's (0 none, 1 mean, 2 sum)")
    if red == "none":
        return loss
    total = cx.emit("sum", loss, axes=())
    if red == "sum":
        return total
    counted = cx.emit("cast", valid, dtype=loss.dtype) if wt is None else cx.emit("where", valid, wt, zero)
    return cx.emit("div", total, cx.emit("sum", counted, axes=()))


@handles("aten.nll_loss_nd.default")
def _nll_loss(cx: Ctx, a: dict[str, Any]) -> Value:
    return _nll(cx, a["self"], a["target"], a["weight"], a["reduction"], int(a["ignore_index"]))


@handles("aten.cross_entropy_loss.default")
def _cross_entropy(cx: Ctx, a: dict[str, Any]) -> Value:
    """Class-index targets (an integer tensor without the class axis): the negative log likelihood of
    ``log_softmax(x)`` (``_nll``). Class-probability targets (same shape as the logits): -sum_c w_c t_c
    log_softmax(x)_c over the class axis (1, or 0 for unbatched input), with label smoothing; mean divides by
    the elements per class."""
    x, t, w = a["self"], a["target"], a["weight"]
    axis = 0 if x.ndim == 1 else 1
    if isinstance(t, Value) and t.dtype.kind == "int":
        return _nll(cx, cx.emit("log_softmax", x, axis=axis), t, w, a["reduction"], int(a["ignore_index"]),
                    float(a["label_smoothing"]))
    if not isinstance(t, Value) or t.shape != x.shape:
        raise cx.unsupported("targets must be class indices (an integer tensor) or class probabilities of the "
                             "logits' shape")
    axis = 0 if x.ndim == 1 else 1
    classes = int(x.shape[axis])
    smoothing = float(a["label_smoothing"])
    if smoothing:
        t = cx.binary("add", cx.scale(t, 1.0 - smoothing), smoothing / classes)
    terms = cx.emit("mul", t, cx.emit("log_softmax", x, axis=axis))
    if w is not None:
        terms = cx.emit("mul", terms, w if x.ndim == 1 else channel_view(cx, w, x.ndim))
    loss = cx.emit("neg", cx.emit("sum", terms, axes=(axis,)))
    return _reduced(cx, loss, a["reduction"], mean_over=math.prod(int(d) for d in loss.shape) or 1)


@handles("aten.cosine_similarity.default")
def _cosine_similarity(cx: Ctx, a: dict[str, Any]) -> Value:
    """torch's: each operand divided by its L2 norm clamped to eps, then the sum of the products."""
    shape = tuple(int(d) for d in torch.broadcast_shapes(a["x1"].shape, a["x2"].shape))
    axis = a["dim"] % len(shape)
    parts = []
    for x in (a["x1"], a["x2"]):
        x = x if x.shape == shape else cx.emit("broadcast_to", x, shape=shape)
        norm = cx.emit("sqrt", cx.emit("sum", cx.emit("square", x), axes=(axis,), keepdims=True))
        parts.append(cx.emit("div", x, cx.binary("maximum", norm, float(a["eps"]))))
    return cx.emit("sum", cx.emit("mul", *parts), axes=(axis,))


def _pairwise_distance(cx: Ctx, x1: Value, x2: Value, p: float, eps: float) -> Value:
    """torch's ``pairwise_distance``: the p-norm of x1 - x2 + eps over the last axis."""
    d = cx.binary("add", cx.emit("sub", x1, x2), eps)
    return vector_norm(cx, {"self": d, "ord": p, "dim": (-1 % d.ndim,), "keepdim": False})


@handles("aten.triplet_margin_loss.default")
def _triplet_margin_loss(cx: Ctx, a: dict[str, Any]) -> Value:
    anchor, p, eps = a["anchor"], float(a["p"]), float(a["eps"])
    positive = _pairwise_distance(cx, anchor, a["positive"], p, eps)
    negative = _pairwise_distance(cx, anchor, a["negative"], p, eps)
    if a["swap"]:
        negative = cx.emit("minimum", negative, _pairwise_distance(cx, a["positive"], a["negative"], p, eps))
    gap = cx.emit("sub", cx.binary("add", positive, float(a["margin"])), negative)
    return _reduced(cx, cx.emit("relu", gap), a["reduction"])


@handles("aten.binary_cross_entropy_with_logits.default")
def _bce_with_logits(cx: Ctx, a: dict[str, Any]) -> Value:
    """(1 - t) x + (1 + (pos_weight - 1) t) softplus(-x), times weight (torch's stable form: softplus at
    threshold 20 returns -x where exp would overflow)."""
    x, t = a["self"], a["target"]
    loss_pos = cx.emit("softplus", cx.emit("neg", x), beta=1.0, threshold=20.0)
    if a["pos_weight"] is not None:
        scale = cx.binary("add", cx.emit("mul", cx.binary("sub", a["pos_weight"], 1.0), t), 1.0)
        loss_pos = cx.emit("mul", scale, loss_pos)
    loss = cx.emit("add", cx.emit("mul", cx.binary("sub", 1.0, t), x), loss_pos)
    if a["weight"] is not None:
        loss = cx.emit("mul", loss, a["weight"])
    return _reduced(cx, loss, a["reduction"])


# -- more losses: the margin and soft-margin families, binary cross entropy ------------------------
@handles("aten.hinge_embedding_loss.default")
def _hinge_embedding_loss(cx: Ctx, a: dict[str, Any]) -> Value:
    """``F.hinge_embedding_loss`` as torch computes it: max(0, margin - x) where the target is not 1, plus x
    where it is not -1 (a target of 1 or -1 picks one of them)."""
    x, t = a["self"], a["target"]
    zero = cx.b.constant(0.0, x.dtype)
    clamped = cx.emit("relu", cx.emit("sub", cx.b.constant(float(a["margin"]), x.dtype), x))
    neg = cx.emit("where", cx.binary("ne", t, 1.0), clamped, zero)
    pos = cx.emit("where", cx.binary("ne", t, -1.0), x, zero)
    return _reduced(cx, cx.emit("add", neg, pos), a["reduction"])


@handles("aten.soft_margin_loss.default")
def _soft_margin_loss(cx: Ctx, a: dict[str, Any]) -> Value:
    """``F.soft_margin_loss``: log(1 + exp(-target * x)), a softplus without its linear cut-off."""
    margin = cx.emit("neg", cx.binary("mul", a["target"], a["self"]))
    return _reduced(cx, cx.emit("softplus", margin, beta=1.0, threshold=math.inf), a["reduction"])


@handles("aten.margin_ranking_loss.default")
def _margin_ranking_loss(cx: Ctx, a: dict[str, Any]) -> Value:
    """``F.margin_ranking_loss``: max(0, -target * (x1 - x2) + margin)."""
    diff = cx.binary("mul", cx.emit("neg", a["target"]), cx.binary("sub", a["input1"], a["input2"]))
    return _reduced(cx, cx.emit("relu", cx.binary("add", diff, float(a["margin"]))), a["reduction"])


@handles("aten.cosine_embedding_loss.default")
def _cosine_embedding_loss(cx: Ctx, a: dict[str, Any]) -> Value:
    """``F.cosine_embedding_loss`` as torch computes it: cos = <x1, x2> / sqrt((|x1|^2 + 1e-12)(|x2|^2 + 1e-12))
    along the last axis; 1 - cos where the target is 1, max(0, cos - margin) where it is -1."""
    x1, x2, t = a["input1"], a["input2"], a["target"]
    axis = x1.ndim - 1
    dot = cx.emit("sum", cx.binary("mul", x1, x2), axes=(axis,))
    norms = [cx.binary("add", cx.emit("sum", cx.emit("square", x), axes=(axis,)), 1e-12) for x in (x1, x2)]
    cos = cx.emit("div", dot, cx.emit("sqrt", cx.binary("mul", *norms)))
    zero = cx.b.constant(0.0, cos.dtype)
    pos = cx.emit("where", cx.binary("eq", t, 1.0), cx.binary("sub", 1.0, cos), zero)
    neg = cx.emit("where", cx.binary("eq", t, -1.0), cx.emit("relu", cx.binary("sub", cos, float(a["margin"]))), zero)
    return _reduced(cx, cx.emit("add", pos, neg), a["reduction"])


@handles("aten.binary_cross_entropy.default")
def _binary_cross_entropy(cx: Ctx, a: dict[str, Any]) -> Value:
    """``F.binary_cross_entropy`` of probabilities as torch computes it: -(t log p + (1 - t) log(1 - p)) with
    each log clamped at -100, times the weight."""
    p, t, w = a["self"], a["target"], a.get("weight")
    floor = cx.b.constant(-100.0, p.dtype)
    log_p = cx.emit("maximum", cx.emit("log", p), floor)
    log_q = cx.emit("maximum", cx.emit("log", cx.binary("sub", 1.0, p)), floor)
    loss = cx.binary("sub", cx.binary("mul", cx.binary("sub", t, 1.0), log_q), cx.binary("mul", t, log_p))
    if w is not None:
        loss = cx.binary("mul", loss, w)
    return _reduced(cx, loss, a["reduction"])
