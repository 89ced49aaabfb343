"""Handlers of the PyTorch front end for the neural-network layers (part of :mod:`axon_eg.ir.torch_import`,
each registered in the table with :func:`~axon_eg.ir.aten_handlers.handles`): softmax and log-softmax, the
normalizations (layer, RMS, group, batch in both modes, instance), scaled dot-product attention, convolutions
and pooling (adaptive pooling as its windows' means).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from axon_eg.ir import dims as D
from axon_eg.ir.aten_handlers import Ctx, Handler, handles, ints, slice_tensor
from axon_eg.ir.builder import Value


# -- softmax and normalizations --------------------------------------------------------------------
@handles("aten.softmax.int", "aten._softmax.default")
def _softmax(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.emit("softmax", a["self"], axis=a["dim"])


@handles("aten.log_softmax.int", "aten._log_softmax.default")
def _log_softmax(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.emit("log_softmax", a["self"], axis=a["dim"])


def channel_view(cx: Ctx, v: Value, rank: int) -> Value:
    return cx.emit("reshape", v, shape=(v.shape[0],) + (1,) * (rank - 2))


def _with_affine(cx: Ctx, op: str, x: Value, stats: list[Value], weight: Value | None, bias: Value | None,
                 channel_bias: bool, **attrs: Any) -> Value:
    """Emit a norm composite; a bias without a weight is added after it (the composites take weight first)."""
    ins = stats + ([weight] if weight is not None else []) + ([bias] if weight is not None and bias is not None
                                                               else [])
    y = cx.emit(op, x, *ins, **attrs)
    if weight is None and bias is not None:
        y = cx.emit("add", y, channel_view(cx, bias, x.ndim) if channel_bias else bias)
    return y


@handles("aten.layer_norm.default")
def _layer_norm(cx: Ctx, a: dict[str, Any]) -> Value:
    x = a["input"]
    axes = tuple(range(x.ndim - len(a["normalized_shape"]), x.ndim))
    return _with_affine(cx, "layernorm", x, [], a["weight"], a["bias"], False, axes=axes, eps=a["eps"])


@handles("aten.rms_norm.default")
def _rms_norm(cx: Ctx, a: dict[str, Any]) -> Value:
    x = a["input"]
    eps = a["eps"] if a["eps"] is not None else torch.finfo(getattr(torch, x.dtype.torch_name)).eps
    axes = tuple(range(x.ndim - len(a["normalized_shape"]), x.ndim))
    ins = [x] + ([a["weight"]] if a["weight"] is not None else [])
    return cx.emit("rmsnorm", *ins, axes=axes, eps=eps)


@handles("aten.group_norm.default")
def _group_norm(cx: Ctx, a: dict[str, Any]) -> Value:
    return _with_affine(cx, "groupnorm", a["input"], [], a["weight"], a["bias"], True, groups=a["num_groups"],
                        eps=a["eps"])


def _batch_stats(cx: Ctx, x: Value) -> list[Value]:
    """Per-channel mean and biased variance over every axis but 1 (training-mode batch norm)."""
    axes = tuple(i for i in range(x.ndim) if i != 1)
    mean = cx.emit("mean", x, axes=axes)
    centered = cx.emit("sub", x, channel_view(cx, mean, x.ndim))
    return [mean, cx.emit("mean", cx.emit("square", centered), axes=axes)]


@handles("aten.batch_norm.default", "aten._native_batch_norm_legit_no_training.default")
def _batch_norm(cx: Ctx, a: dict[str, Any]) -> Any:
    x = a["input"]
    if a.get("training") or a["running_mean"] is None:
        stats = _batch_stats(cx, x)  # the output uses batch statistics; running-stat updates are ignored
    else:
        stats = [a["running_mean"], a["running_var"]]
    y = _with_affine(cx, "batchnorm", x, stats, a["weight"], a["bias"], True, eps=a["eps"], axis=1)
    return (y, None, None) if cx.aten == "aten._native_batch_norm_legit_no_training.default" else y


@handles("aten.instance_norm.default")
def _instance_norm(cx: Ctx, a: dict[str, Any]) -> Value:
    x = a["input"]
    if not a["use_input_stats"]:
        return _batch_norm(cx, {**a, "training": False})
    return _with_affine(cx, "groupnorm", x, [], a["weight"], a["bias"], True, groups=x.shape[1], eps=a["eps"])


# -- attention -----------------------------------------------------------------------------------
@handles("aten.scaled_dot_product_attention.default", contractions=1)
def _sdpa(cx: Ctx, a: dict[str, Any]) -> Value:
    q, k, v, mask = a["query"], a["key"], a["value"], a["attn_mask"]
    if a["dropout_p"] > 0:
        raise cx.unsupported(f"attention dropout (dropout_p={a['dropout_p']}) is random")
    if mask is not None and not isinstance(mask, Value):
        raise cx.unsupported("attn_mask must be a tensor")
    if mask is not None and mask.dtype.kind == "bool":  # torch: True attends; the registry's mask is added
        mask = cx.emit("where", mask, cx.b.constant(0.0, q.dtype), cx.b.constant(-math.inf, q.dtype))
    ins = [q, k, v] + ([mask] if mask is not None else [])
    return cx.emit("sdpa", *ins, scale=a["scale"], causal=bool(a["is_causal"]))


# -- convolutions and pooling --------------------------------------------------------------------
def _same_padding(cx: Ctx, weight: Value, dilation: tuple[int, ...]) -> tuple[int, ...]:
    n = weight.ndim - 2
    dil = dilation * n if len(dilation) == 1 else dilation
    pads = []
    for k, d in zip(weight.shape[2:], dil):
        total = d * (int(k) - 1)
        if total % 2:
            raise cx.unsupported(f"padding='same' with kernel {k}, dilation {d} pads unevenly; pad explicitly")
        pads.append(total // 2)
    return tuple(pads)


@handles("aten.conv1d.default", "aten.conv1d.padding", "aten.conv2d.default", "aten.conv2d.padding",
         "aten.conv3d.default", "aten.conv3d.padding", "aten.conv_transpose1d.default", "aten.conv_transpose2d.input",
         "aten.conv_transpose3d.input", "aten.convolution.default", contractions=1)
def _conv(cx: Ctx, a: dict[str, Any]) -> Value:
    x, w, bias = a["input"], a["weight"], a["bias"]
    n = w.ndim - 2
    transposed = a.get("transposed", False) or "conv_transpose" in cx.aten
    attrs: dict[str, Any] = {"stride": ints(a["stride"]), "dilation": ints(a["dilation"]), "groups": a["groups"]}
    padding = a["padding"]
    if isinstance(padding, str):
        padding = (0,) * n if padding == "valid" else _same_padding(cx, w, attrs["dilation"])
    attrs["padding"] = ints(padding)
    if transposed:
        attrs["output_padding"] = ints(a["output_padding"])
    ins = [x, w] + ([bias] if bias is not None else [])
    return cx.emit(f"conv_transpose{n}d" if transposed else f"conv{n}d", *ins, **attrs)


def _pool(kind: str, n: int, with_indices: bool = False) -> Handler:
    def handle(cx: Ctx, a: dict[str, Any]) -> Any:
        attrs = {"kernel_size": ints(a["kernel_size"]), "stride": ints(a["stride"]),
                 "padding": ints(a["padding"]), "ceil_mode": bool(a["ceil_mode"])}
        if kind == "max":
            attrs["dilation"] = ints(a["dilation"])
        else:
            attrs["count_include_pad"] = bool(a["count_include_pad"])
            if a.get("divisor_override") is not None:
                raise cx.unsupported("avg pooling with divisor_override has no registry equivalent")
        out = cx.emit(f"{kind}_pool{n}d", a["self"], **attrs)
        return (out, None) if with_indices else out

    return handle


for _n in (1, 2, 3):
    handles(f"aten.max_pool{_n}d.default")(_pool("max", _n))
    handles(f"aten.max_pool{_n}d_with_indices.default")(_pool("max", _n, True))
    handles(f"aten.avg_pool{_n}d.default")(_pool("avg", _n))


def _adaptive_avg_pool(n: int) -> Handler:
    def handle(cx: Ctx, a: dict[str, Any]) -> Value:
        x = a["self"]
        sizes, outs = x.shape[-n:], ints(a["output_size"])
        if all(o == 1 for o in outs):
            return cx.emit("mean", x, axes=tuple(range(x.ndim - n, x.ndim)), keepdims=True)
        if x.ndim == n + 2 and all(int(s) % o == 0 for s, o in zip(sizes, outs)):
            kernel = tuple(int(s) // o for s, o in zip(sizes, outs))
            return cx.emit(f"avg_pool{n}d", x, kernel_size=kernel, stride=kernel)
        if sum(outs) > MAX_UNEVEN_WINDOWS:
            raise cx.unsupported(f"adaptive pooling of {D.format_shape(x.shape)} to {list(outs)}: uneven windows, "
                                 f"more than {MAX_UNEVEN_WINDOWS} along the pooled axes")
        for k, o in enumerate(outs):  # a window's mean is the mean along each axis in turn (a product set)
            axis = x.ndim - n + k
            size = int(x.shape[axis])
            if size == o:
                continue
            cells = []
            for i in range(o):  # torch's window: [floor(i * size / o), ceil((i + 1) * size / o))
                lo, hi = (i * size) // o, -(-(i + 1) * size // o)
                part = slice_tensor(cx, {"self": x, "dim": axis, "start": lo, "end": hi, "step": 1})
                cells.append(cx.emit("mean", part, axes=(axis,), keepdims=True))
            x = cells[0] if o == 1 else cx.emit("concat", *cells, axis=axis)
        return x

    return handle


for _n in (1, 2, 3):
    handles(f"aten.adaptive_avg_pool{_n}d.default")(_adaptive_avg_pool(_n))


MAX_UNEVEN_WINDOWS = 256
"""Adaptive pooling with windows of unequal sizes becomes one slice and mean per output position along each
pooled axis: at most this many in all (beyond, one line says so)."""
