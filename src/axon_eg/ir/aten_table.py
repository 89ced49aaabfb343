"""THE table of the PyTorch front end: aten overload name -> handler (:mod:`axon_eg.ir.aten_handlers`).
Nothing else decides which aten ops :mod:`axon_eg.ir.torch_import` supports. Also here: the ops whose result
may alias their input (for the in-place checks), the data-dependent ops refused with a reason, and the
lookup of an op's handler (an in-place variant ``aten.relu_`` maps to ``aten.relu``).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from axon_eg.ir.aten_handlers import (
    _SELU,
    Handler,
    _adaptive_avg_pool,
    _addmm,
    _arange,
    _arg_extremum,
    _argsort,
    _batch_norm,
    _bce_with_logits,
    _binary,
    _binary_cross_entropy,
    _bitwise,
    _broadcast_tensors,
    _cast,
    _clamp,
    _clamp_tensor,
    _column_stack,
    _compare,
    _conv,
    _cosine_embedding_loss,
    _cosine_similarity,
    _cross_entropy,
    _diag,
    _dropout,
    _einsum,
    _elu,
    _embedding,
    _expand,
    _filled,
    _gather,
    _group_norm,
    _gru_cell,
    _hinge_embedding_loss,
    _huber_loss,
    _identity,
    _index_select,
    _instance_norm,
    _ints,
    _joined,
    _kl_div,
    _l1_loss,
    _layer_norm,
    _lerp,
    _linear,
    _logaddexp,
    _logic,
    _lstm_cell,
    _margin_ranking_loss,
    _masked_fill,
    _matmul,
    _mse_loss,
    _narrow,
    _nll_loss,
    _one_hot,
    _pad,
    _pool,
    _pow,
    _pow_scalar_base,
    _reduce,
    _repeat,
    _repeat_interleave,
    _reshape,
    _reverse_axes,
    _rms_norm,
    _rnn_cell,
    _rsub,
    _sdpa,
    _select,
    _slice,
    _smooth_l1_loss,
    _soft_margin_loss,
    _sort,
    _split,
    _squeeze,
    _stack,
    _swap,
    _topk,
    _tril,
    _triplet_margin_loss,
    _triu,
    _unary,
    _variance,
    _vector_norm,
    _where,
)
from axon_eg.ir.aten_indexing import _diff, _index, _roll, _upsample

_PIECES = tuple(f"aten.{op}" for op in ("chunk.default", "split.Tensor", "split_with_sizes.default",
                                         "tensor_split.sections", "tensor_split.indices", "unbind.int"))
"""The ops that cut a tensor into consecutive pieces along one axis (views; an empty piece is refused where used)."""

# ------------------------------------------------------------------------------------------------
# THE table: aten overload name -> handler. Nothing else decides which aten ops are supported.
# ------------------------------------------------------------------------------------------------
_ATEN: dict[str, Handler] = {
    # matmul
    "aten.mm.default": _matmul, "aten.bmm.default": _matmul, "aten.matmul.default": _matmul, "aten.mv.default": _matmul,
    "aten.addmm.default": _addmm, "aten.linear.default": _linear,
    # layout
    "aten.t.default": lambda cx, a: _swap(cx, a["self"], 0, 1),
    "aten.transpose.int": lambda cx, a: _swap(cx, a["self"], a["dim0"], a["dim1"]),
    "aten.permute.default": lambda cx, a: cx.emit("transpose", a["self"], perm=_ints(a["dims"])),
    "aten.numpy_T.default": _reverse_axes,
    "aten.view.default": _reshape, "aten.reshape.default": _reshape, "aten._unsafe_view.default": _reshape,
    "aten.flatten.using_ints": _reshape, "aten.unflatten.int": _reshape, "aten.expand.default": _expand,
    "aten.expand_as.default": _expand,
    "aten.unsqueeze.default": lambda cx, a: cx.emit("expand_dims", a["self"], axis=a["dim"]),
    "aten.squeeze.default": _squeeze, "aten.squeeze.dim": _squeeze, "aten.squeeze.dims": _squeeze,
    "aten.slice.Tensor": _slice, "aten.select.int": _select, "aten.narrow.default": _narrow,
    "aten.repeat_interleave.self_int": _repeat_interleave, "aten.repeat.default": _repeat,
    "aten.einsum.default": _einsum, "aten.pad.default": _pad, "aten.constant_pad_nd.default": _pad,
    "aten.flip.default": lambda cx, a: cx.emit("flip", a["self"], axes=_ints(a["dims"])),
    "aten.fliplr.default": lambda cx, a: cx.emit("flip", a["self"], axes=(1,)),
    "aten.flipud.default": lambda cx, a: cx.emit("flip", a["self"], axes=(0,)),
    "aten.tril.default": _tril, "aten.triu.default": _triu,
    "aten.diag.default": _diag,
    "aten.cat.default": lambda cx, a: cx.emit("concat", *a["tensors"], axis=a["dim"]),
    "aten.stack.default": _stack, "aten.hstack.default": _joined(1, 1), "aten.vstack.default": _joined(2, 0),
    "aten.row_stack.default": _joined(2, 0), "aten.dstack.default": _joined(3, 2),
    "aten.column_stack.default": _column_stack,
    "aten.broadcast_tensors.default": _broadcast_tensors,
    **dict.fromkeys(_PIECES, _split),
    # identities and casts
    "aten.clone.default": _identity, "aten.contiguous.default": _identity, "aten.alias.default": _identity,
    "aten.detach.default": _identity, "aten.lift_fresh_copy.default": _identity, "aten.dropout.default": _dropout,
    "aten._to_copy.default": _cast, "aten.to.dtype": _cast, "aten.type_as.default": _cast,
    # .to(device=...) / .to(other): devices are the caller's (a kernel runs where its inputs are), so a cast or nothing
    "aten.to.dtype_layout": _cast, "aten.to.device": _cast, "aten.to.other": _cast,
    # arithmetic
    "aten.add.Tensor": _binary("add"), "aten.add.Scalar": _binary("add"),
    "aten.sub.Tensor": _binary("sub"), "aten.sub.Scalar": _binary("sub"),
    "aten.mul.Tensor": _binary("mul"), "aten.mul.Scalar": _binary("mul"),
    "aten.div.Tensor": _binary("div"), "aten.div.Scalar": _binary("div"),
    # the aliases torch.export keeps as written (torch.multiply, torch.subtract, torch.true_divide, ...)
    "aten.multiply.Tensor": _binary("mul"), "aten.subtract.Tensor": _binary("sub"),
    "aten.divide.Tensor": _binary("div"), "aten.true_divide.Tensor": _binary("div"),
    "aten.negative.default": _unary("neg"), "aten.absolute.default": _unary("abs"),
    "aten.clip.default": _clamp("min", "max"),
    "aten.rsub.Tensor": _rsub, "aten.rsub.Scalar": _rsub,
    "aten.maximum.default": _binary("maximum"), "aten.minimum.default": _binary("minimum"),
    "aten.max.other": _binary("maximum"), "aten.min.other": _binary("minimum"),
    "aten.pow.Tensor_Scalar": _pow, "aten.pow.Scalar": _pow_scalar_base,
    # comparisons, logic, selection (boolean results)
    **{f"aten.{op}.{o}": _compare(op) for op in ("gt", "ge", "lt", "le", "eq", "ne") for o in ("Tensor", "Scalar")},
    "aten.logical_and.default": _logic("logical_and"), "aten.logical_or.default": _logic("logical_or"),
    "aten.logical_xor.default": _logic("logical_xor"), "aten.logical_not.default": _logic("logical_not"),
    # bit operations: the logical ops on booleans, the bit operations on integers
    **{f"aten.{name}.{o}": _bitwise(f"bitwise_{op}", f"logical_{op}")
       for op in ("and", "or", "xor") for name in (f"__{op}__", f"bitwise_{op}") for o in ("Tensor", "Scalar")},
    "aten.bitwise_not.default": _bitwise("bitwise_not", "logical_not"),
    **{f"aten.{name}.{o}": _bitwise(f"bitwise_{way}_shift", None)
       for way, short in (("left", "lshift"), ("right", "rshift"))
       for name, overloads in ((f"__{short}__", ("Tensor", "Scalar")),
                               (f"bitwise_{way}_shift", ("Tensor", "Tensor_Scalar")))
       for o in overloads},
    **{f"aten.where.{o}": _where for o in ("self", "ScalarSelf", "ScalarOther", "Scalar")},
    "aten.masked_fill.Scalar": _masked_fill, "aten.masked_fill.Tensor": _masked_fill,
    **{f"aten.{name}.default": _filled(0.0) for name in ("zeros_like", "zeros", "new_zeros")},
    **{f"aten.{name}.default": _filled(1.0) for name in ("ones_like", "ones", "new_ones")},
    **{f"aten.{name}.default": _filled(None) for name in ("full_like", "full", "new_full")},
    # unary maps
    **{f"aten.{op}.default": _unary(op) for op in (
        "neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "abs", "square", "relu", "sigmoid", "tanh", "silu",
        "mish", "hardswish", "hardsigmoid", "erf", "sin", "cos", "floor", "ceil", "round", "trunc", "sign")},
    "aten.addcmul.default": lambda cx, a: cx.binary("add", a["self"], cx.scale(
        cx.binary("mul", a["tensor1"], a["tensor2"]), a["value"])),
    "aten.addcdiv.default": lambda cx, a: cx.binary("add", a["self"], cx.scale(
        cx.binary("div", a["tensor1"], a["tensor2"]), a["value"])),
    "aten.lerp.Scalar": _lerp, "aten.lerp.Tensor": _lerp, "aten.logaddexp.default": _logaddexp,
    "aten.leaky_relu.default": lambda cx, a: cx.emit("leaky_relu", a["self"], slope=a["negative_slope"]),
    "aten.gelu.default": lambda cx, a: cx.emit("gelu", a["self"], approximate=a["approximate"]),
    "aten.softplus.default": lambda cx, a: cx.emit("softplus", a["self"], beta=a["beta"], threshold=a["threshold"]),
    "aten.elu.default": _elu, "aten.selu.default": lambda cx, a: _elu(cx, {**a, **_SELU}),
    "aten.celu.default": lambda cx, a: _elu(cx, {**a, "scale": 1.0, "input_scale": 1.0 / a["alpha"]}),
    "aten.log_sigmoid.default": lambda cx, a: cx.emit("neg", cx.emit("softplus", cx.emit("neg", a["self"]),
                                                                     threshold=math.inf)),
    "aten.hardtanh.default": _clamp("min_val", "max_val"), "aten.relu6.default": _unary("clamp", lo=0.0, hi=6.0),
    "aten.clamp.default": _clamp("min", "max"), "aten.clamp_min.default": _clamp("min", None),
    "aten.clamp_max.default": _clamp(None, "max"), "aten.clamp.Tensor": _clamp_tensor,
    "aten.clamp_min.Tensor": lambda cx, a: cx.binary("maximum", a["self"], a["min"]),
    "aten.clamp_max.Tensor": lambda cx, a: cx.binary("minimum", a["self"], a["max"]),
    # reductions and scans
    "aten.sum.default": _reduce("sum", None), "aten.sum.dim_IntList": _reduce("sum"),
    "aten.mean.default": _reduce("mean", None), "aten.mean.dim": _reduce("mean"),
    "aten.amax.default": _reduce("max"), "aten.amin.default": _reduce("min"),
    "aten.max.default": _reduce("max", None), "aten.min.default": _reduce("min", None),
    "aten.max.dim": _reduce("max", values_and_indices=True), "aten.min.dim": _reduce("min", values_and_indices=True),
    "aten.aminmax.default": lambda cx, a: (_reduce("min")(cx, a), _reduce("max")(cx, a)),
    "aten.argmax.default": _arg_extremum("argmax"), "aten.argmin.default": _arg_extremum("argmin"),
    # indexing by integer tensors
    "aten.gather.default": _gather, "aten.take_along_dim.default": _gather,
    "aten.index_select.default": _index_select, "aten.embedding.default": _embedding,
    "aten.index.Tensor": _index, "aten._unsafe_index.Tensor": _index,
    "aten.roll.default": _roll, "aten.diff.default": _diff,
    # resampling (F.interpolate, nn.Upsample): weighted index_select taps per spatial axis
    **{f"aten.{packet}.{o}": _upsample(n, corners) for packet, n, corners in (
        ("upsample_nearest1d", 1, False), ("upsample_nearest2d", 2, False), ("upsample_nearest3d", 3, False),
        ("_upsample_nearest_exact1d", 1, False), ("_upsample_nearest_exact2d", 2, False),
        ("_upsample_nearest_exact3d", 3, False), ("upsample_linear1d", 1, True), ("upsample_bilinear2d", 2, True),
        ("upsample_trilinear3d", 3, True), ("upsample_bicubic2d", 2, True), ("_upsample_bilinear2d_aa", 2, True),
        ("_upsample_bicubic2d_aa", 2, True)) for o in ("vec", "default")},
    # recurrent cells (nn.LSTMCell, nn.GRUCell, nn.RNNCell)
    "aten.lstm_cell.default": _lstm_cell, "aten.gru_cell.default": _gru_cell,
    "aten.rnn_tanh_cell.default": _rnn_cell("tanh"), "aten.rnn_relu_cell.default": _rnn_cell("relu"),
    # sorting (library ops: torch's kernels)
    "aten.sort.default": _sort, "aten.sort.stable": _sort, "aten.argsort.default": _argsort,
    "aten.argsort.stable": _argsort, "aten.topk.default": _topk,
    "aten.msort.default": lambda cx, a: cx.emit("sort", a["self"], axis=0),
    # constants made in forward()
    **{f"aten.arange.{o}": _arange for o in ("default", "start", "start_step")},
    "aten.one_hot.default": _one_hot,
    "aten.logsumexp.default": _reduce("logsumexp"), "aten.linalg_vector_norm.default": _vector_norm,
    "aten.var.dim": lambda cx, a: _variance(cx, a, False), "aten.var.correction": lambda cx, a: _variance(cx, a, False),
    "aten.std.dim": lambda cx, a: _variance(cx, a, True), "aten.std.correction": lambda cx, a: _variance(cx, a, True),
    "aten.cumsum.default": lambda cx, a: cx.emit("cumsum", a["self"], axis=a["dim"]),
    "aten.cumprod.default": lambda cx, a: cx.emit("cumprod", a["self"], axis=a["dim"]),
    # softmax and norms
    "aten.softmax.int": lambda cx, a: cx.emit("softmax", a["self"], axis=a["dim"]),
    "aten._softmax.default": lambda cx, a: cx.emit("softmax", a["self"], axis=a["dim"]),
    "aten.log_softmax.int": lambda cx, a: cx.emit("log_softmax", a["self"], axis=a["dim"]),
    "aten._log_softmax.default": lambda cx, a: cx.emit("log_softmax", a["self"], axis=a["dim"]),
    "aten.layer_norm.default": _layer_norm, "aten.rms_norm.default": _rms_norm,
    "aten.group_norm.default": _group_norm, "aten.instance_norm.default": _instance_norm,
    "aten.batch_norm.default": _batch_norm, "aten._native_batch_norm_legit_no_training.default": _batch_norm,
    # losses
    "aten.mse_loss.default": _mse_loss, "aten.l1_loss.default": _l1_loss, "aten.huber_loss.default": _huber_loss,
    "aten.smooth_l1_loss.default": _smooth_l1_loss, "aten.kl_div.default": _kl_div,
    "aten.cross_entropy_loss.default": _cross_entropy, "aten.nll_loss_nd.default": _nll_loss,
    "aten.cosine_similarity.default": _cosine_similarity,
    "aten.triplet_margin_loss.default": _triplet_margin_loss,
    "aten.binary_cross_entropy_with_logits.default": _bce_with_logits,
    "aten.binary_cross_entropy.default": _binary_cross_entropy,
    "aten.hinge_embedding_loss.default": _hinge_embedding_loss, "aten.soft_margin_loss.default": _soft_margin_loss,
    "aten.margin_ranking_loss.default": _margin_ranking_loss,
    "aten.cosine_embedding_loss.default": _cosine_embedding_loss,
    # attention
    "aten.scaled_dot_product_attention.default": _sdpa,
    # convolutions and pooling
    **{f"aten.conv{n}d.{o}": _conv for n in (1, 2, 3) for o in ("default", "padding")},
    "aten.conv_transpose1d.default": _conv, "aten.conv_transpose2d.input": _conv,
    "aten.conv_transpose3d.input": _conv, "aten.convolution.default": _conv,
    **{f"aten.max_pool{n}d.default": _pool("max", n) for n in (1, 2, 3)},
    **{f"aten.max_pool{n}d_with_indices.default": _pool("max", n, True) for n in (1, 2, 3)},
    **{f"aten.avg_pool{n}d.default": _pool("avg", n) for n in (1, 2, 3)},
    **{f"aten.adaptive_avg_pool{n}d.default": _adaptive_avg_pool(n) for n in (1, 2, 3)},
}

SUPPORTED_ATEN_OPS: tuple[str, ...] = tuple(sorted(_ATEN))


def contracts(name: str) -> int:
    """How many contractions the aten op (overload name) imports as: a matmul, attention or convolution is one,
    a recurrent cell two (its input's and its hidden state's linears), anything else none (the ops whose ISA
    choices and tilings multiply a program's candidates; the dynamo partition caps them per region)."""
    handler = _ATEN.get(name)
    if handler in (_matmul, _addmm, _linear, _sdpa, _conv):
        return 1
    return 2 if name in _RECURRENT else 0


_RECURRENT = frozenset({"aten.lstm_cell.default", "aten.gru_cell.default", "aten.rnn_tanh_cell.default",
                        "aten.rnn_relu_cell.default"})

# Ops whose result may alias their input: an in-place op must not write through (or into) one of them.
_VIEW_LIKE = frozenset({
    "aten.view.default", "aten.reshape.default", "aten._unsafe_view.default", "aten.t.default",
    "aten.transpose.int", "aten.permute.default", "aten.numpy_T.default", "aten.expand.default",
    "aten.expand_as.default", "aten.unsqueeze.default", "aten.squeeze.default", "aten.squeeze.dim",
    "aten.squeeze.dims", "aten.slice.Tensor", "aten.select.int", "aten.narrow.default", "aten.flatten.using_ints",
    "aten.unflatten.int",
    "aten.alias.default", "aten.detach.default", "aten.contiguous.default", "aten.to.dtype", "aten.type_as.default",
    "aten.to.dtype_layout", "aten.to.device", "aten.to.other",
    "aten.dropout.default", "aten.broadcast_tensors.default", *_PIECES,
})


_ITEM = ("`.item()` (a tensor's value read into Python) is not supported: data-dependent; keep it a tensor "
         "(x / x.max(), not x / x.max().item())")
_SHAPE_FROM_VALUES = "its output's shape depends on tensor values: data-dependent shapes are not supported"
_DATA_DEPENDENT = {
    "aten.item.default": _ITEM, "aten._local_scalar_dense.default": _ITEM,
    **{f"aten.{op}": _SHAPE_FROM_VALUES for op in (
        "nonzero.default", "masked_select.default", "unique.default", "_unique2.default", "unique_dim.default",
        "unique_consecutive.default", "repeat_interleave.Tensor")},
}
"""aten ops whose meaning depends on tensor values, with the reason they cannot be imported."""


def _name(target: Any) -> str:
    return str(target) if isinstance(target, torch._ops.OpOverload) else getattr(target, "__name__", str(target))


def _writes_self(target: Any) -> bool:
    """An in-place aten op that writes its first argument only (``aten.relu_``, ``aten.add_.Tensor``)."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    written = [i for i, arg in enumerate(target._schema.arguments) if arg.alias_info and arg.alias_info.is_write]
    return written == [0]


def _handler(target: Any) -> Handler | None:
    name = _name(target)
    if name in _ATEN:
        return _ATEN[name]
    if _writes_self(target):  # aten.relu_.default -> aten.relu.default
        ns, packet, overload = name.split(".")
        return _ATEN.get(f"{ns}.{packet.rstrip('_')}.{overload}")
    return None


def _bind_schema(target: torch._ops.OpOverload, args: tuple, kwargs: dict) -> dict[str, Any]:
    out = {}
    for i, arg in enumerate(target._schema.arguments):
        if i < len(args) and not arg.kwarg_only:
            out[arg.name] = args[i]
        else:
            out[arg.name] = kwargs.get(arg.name, arg.default_value)
    return out

