"""PyTorch front end: ``nn.Module`` objects and KernelBench problem files become Programs.

``from_torch(module, example_inputs)`` exports the module with ``torch.export`` (the training IR,
without decompositions, so ``aten.linear``, ``aten.softmax.int``, ``aten.layer_norm``,
``aten.conv2d`` and ``aten.scaled_dot_product_attention`` arrive whole) and maps each aten op
through ONE table, ``_ATEN``, onto registry ops. ``SUPPORTED_ATEN_OPS`` lists its keys; the
in-place variant of a supported op (``aten.relu_``, ``aten.add_``) is accepted too, unless a view
of the tensor it writes is read afterwards. Parameters and buffers become named inputs
("linear.weight") with roles "parameter" / "buffer" (only those the computation reads); user
inputs keep forward()'s argument names; shapes are the example inputs' concrete sizes.
``import_torch`` also returns the float64 values of the parameters and buffers.

Every node carries the user's source line (the innermost ``forward()`` frame that torch.export
records), and every error names the aten op and that line.

``load_problem(path)`` imports a KernelBench-format file (``class Model``, ``get_inputs()``,
``get_init_inputs()``) into a :class:`Problem` that keeps the module's parameter values, so that
``problem.reference(inputs)`` is the float64 answer every candidate kernel is checked against;
``small_sizes(path)`` reads the file's ``SMALL_SIZES`` (constants for a quick run) without running it.

Refused, in one line naming the user's line: an in-place write into an input or a parameter
(``x.add_(1)``: a kernel does not write its inputs, so the caller would miss the change; a write into a
fresh tensor is fine, and buffer updates such as batch norm's running statistics are dropped),
data-dependent control flow (``if x.sum() > 0``) and ``.item()``. torch.export's own logging, warnings
and prints are captured while it runs and shown only when an export fails in a way this module cannot
name a user line for.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import itertools
import logging
import math
import operator
import os
import re
import sys
import sysconfig
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.fx.node import Node, map_arg

from axon_eg.errors import AxonError, DtypeError, ProblemLoadError, ProgramError, ShapeError, UnsupportedOperation
from axon_eg.ir import dims as D
from axon_eg.ir.dtypes import DType, as_dtype
from axon_eg.ir.inputs import random_inputs as _random_inputs
from axon_eg.ir.interpret import interpret
from axon_eg.ir.program import Builder, InputSpec, Program, Value

# ------------------------------------------------------------------------------------------------
# Source locations: the innermost stack frame outside torch and axon_eg
# ------------------------------------------------------------------------------------------------
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
_LIBRARY_DIRS = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (torch,)) + (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
)
_STDLIB_DIRS = tuple(os.path.abspath(p) + os.sep for p in {sysconfig.get_path("stdlib"), sysconfig.get_path("purelib"),
                                                            sysconfig.get_path("platlib")} if p)


def _location(node: Node) -> str | None:
    """``file:line`` of the user code that created ``node`` (from ``meta["stack_trace"]``).

    torch.export keeps only ``forward`` frames, so this is the innermost user ``forward()`` line."""
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    user = [f for f in frames if not os.path.abspath(f[0]).startswith(_LIBRARY_DIRS)]
    if not user:
        return None
    path, line = user[-1]
    return f"{path}:{line}"


def _dtype(torch_dtype: torch.dtype, what: str) -> DType:
    try:
        return as_dtype(torch_dtype)
    except DtypeError:
        raise DtypeError(f"{what} has dtype {torch_dtype}; axon_eg handles bf16, fp16, fp32 and fp64 "
                         "(compute integer or boolean tensors, e.g. indices, outside the module)") from None


# ------------------------------------------------------------------------------------------------
# Per-node context handed to the handlers
# ------------------------------------------------------------------------------------------------
class _Ctx:
    def __init__(self, builder: Builder, aten: str, node: Node, location: str | None):
        self.b, self.aten, self.node, self.location = builder, aten, node, location

    def emit(self, op: str, *inputs: Value, **attrs: Any) -> Value:
        return self.b.emit(op, *inputs, **attrs)

    def lift(self, x: Any, like: Value) -> Value:
        """Tensors pass through; Python numbers become constants of ``like``'s dtype."""
        if isinstance(x, Value):
            return x
        if isinstance(x, (bool, int, float)):
            return self.b.constant(float(x), like.dtype)
        raise self.unsupported(f"operand {x!r} is neither a tensor nor a number")

    def binary(self, op: str, x: Any, y: Any) -> Value:
        like = x if isinstance(x, Value) else y
        return self.emit(op, self.lift(x, like), self.lift(y, like))

    def scale(self, x: Value, factor: float) -> Value:
        return x if factor == 1 else self.emit("mul", x, self.b.constant(float(factor), x.dtype))

    @property
    def out_shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.node.meta["val"].shape)

    @property
    def where(self) -> str:
        """The aten op and, when known, the user's line: ``aten.relu.default at model.py:12``."""
        return f"{self.aten} at {self.location}" if self.location else self.aten

    def unsupported(self, why: str) -> UnsupportedOperation:
        return UnsupportedOperation(f"{self.where}: {why}", op=self.aten, location=self.location)


Handler = Callable[[_Ctx, dict[str, Any]], Any]


def _ints(v: Any) -> tuple[int, ...]:
    return (int(v),) if isinstance(v, int) else tuple(int(x) for x in v)


def _axes(dim: Any) -> tuple[int, ...]:
    return () if dim is None else _ints(dim)


# -- element-wise --------------------------------------------------------------------------------
def _unary(op: str, **fixed: Any) -> Handler:
    return lambda cx, a: cx.emit(op, a["self"], **fixed)


def _binary(op: str) -> Handler:
    def handle(cx: _Ctx, a: dict[str, Any]) -> Value:
        other, alpha = a["other"], a.get("alpha", 1)
        if alpha != 1:
            other = other * alpha if not isinstance(other, Value) else cx.scale(other, alpha)
        return cx.binary(op, a["self"], other)

    return handle


def _rsub(cx: _Ctx, a: dict[str, Any]) -> Value:  # other - alpha * self
    return cx.binary("sub", a["other"], cx.scale(a["self"], a["alpha"]))


def _pow(cx: _Ctx, a: dict[str, Any]) -> Value:
    e = float(a["exponent"])
    return cx.emit("square", a["self"]) if e == 2 else cx.emit("pow", a["self"], exponent=e)


def _pow_scalar_base(cx: _Ctx, a: dict[str, Any]) -> Value:  # base ** x = exp(x * ln(base))
    base = float(a["self"])
    if base <= 0:
        raise cx.unsupported(f"a non-positive base {base} ** tensor has no registry equivalent")
    return cx.emit("exp", cx.scale(a["exponent"], math.log(base)))


def _clamp(lo_key: str | None, hi_key: str | None) -> Handler:
    def handle(cx: _Ctx, a: dict[str, Any]) -> Value:
        lo = a[lo_key] if lo_key else None
        hi = a[hi_key] if hi_key else None
        return cx.emit("clamp", a["self"], lo=-math.inf if lo is None else lo, hi=math.inf if hi is None else hi)

    return handle


def _elu(cx: _Ctx, a: dict[str, Any]) -> Value:  # scale * (relu(x) + alpha * (exp(min(x, 0) * s) - 1))
    x = a["self"]
    negative = cx.scale(cx.binary("minimum", x, 0.0), a["input_scale"])
    tail = cx.scale(cx.binary("sub", cx.emit("exp", negative), 1.0), a["alpha"])
    return cx.scale(cx.emit("add", cx.emit("relu", x), tail), a["scale"])


_SELU = {"alpha": 1.6732632423543772848170429916717, "scale": 1.0507009873554804934193349852946, "input_scale": 1.0}


def _vector_norm(cx: _Ctx, a: dict[str, Any]) -> Value:
    x, p = a["self"], float(a["ord"])
    attrs = {"axes": _axes(a["dim"]), "keepdims": bool(a["keepdim"])}
    if p in (math.inf, -math.inf):
        return cx.emit("max" if p > 0 else "min", cx.emit("abs", x), **attrs)
    if p == 2:
        return cx.emit("sqrt", cx.emit("sum", cx.emit("square", x), **attrs))
    if p == 1:
        return cx.emit("sum", cx.emit("abs", x), **attrs)
    if p <= 0:
        raise cx.unsupported(f"the {p}-norm has no registry equivalent")
    total = cx.emit("sum", cx.emit("pow", cx.emit("abs", x), exponent=p), **attrs)
    return cx.emit("pow", total, exponent=1.0 / p)


def _cast(cx: _Ctx, a: dict[str, Any]) -> Value:  # the result dtype comes from torch's own metadata
    want = _dtype(cx.node.meta["val"].dtype, cx.where)
    x = a["self"]
    return x if x.dtype == want else cx.emit("cast", x, dtype=want)


def _identity(cx: _Ctx, a: dict[str, Any]) -> Value:
    return a["self"]


def _dropout(cx: _Ctx, a: dict[str, Any]) -> Value:
    if a["train"] and a["p"] > 0:
        raise cx.unsupported(f"dropout with p={a['p']} in training mode is random; call module.eval()")
    return a["input"]


# -- matmul --------------------------------------------------------------------------------------
def _matmul(cx: _Ctx, a: dict[str, Any]) -> Value:
    x, y = a["self"], a.get("other", a.get("mat2", a.get("vec")))
    x2 = cx.emit("expand_dims", x, axis=0) if x.ndim == 1 else x
    y2 = cx.emit("expand_dims", y, axis=-1) if y.ndim == 1 else y
    out = cx.emit("matmul", x2, y2)
    if y.ndim == 1:
        out = cx.emit("squeeze", out, axes=(-1,))
    if x.ndim == 1:
        out = cx.emit("squeeze", out, axes=(-1 if y.ndim == 1 else -2,))
    return out


def _addmm(cx: _Ctx, a: dict[str, Any]) -> Value:  # beta * self + alpha * (mat1 @ mat2)
    product = cx.scale(cx.emit("matmul", a["mat1"], a["mat2"]), a["alpha"])
    return cx.emit("add", product, cx.scale(a["self"], a["beta"]))


def _linear(cx: _Ctx, a: dict[str, Any]) -> Value:
    ins = [a["input"], a["weight"]] + ([a["bias"]] if a["bias"] is not None else [])
    return cx.emit("linear", *ins)


# -- layout --------------------------------------------------------------------------------------
def _reshape(cx: _Ctx, a: dict[str, Any]) -> Value:
    x = a["self"]
    return x if x.shape == cx.out_shape else cx.emit("reshape", x, shape=cx.out_shape)


def _expand(cx: _Ctx, a: dict[str, Any]) -> Value:
    x = a["self"]
    return x if x.shape == cx.out_shape else cx.emit("broadcast_to", x, shape=cx.out_shape)


def _swap(cx: _Ctx, x: Value, d0: int, d1: int) -> Value:
    if x.ndim < 2 or d0 % x.ndim == d1 % x.ndim:
        return x
    perm = list(range(x.ndim))
    perm[d0 % x.ndim], perm[d1 % x.ndim] = perm[d1 % x.ndim], perm[d0 % x.ndim]
    return cx.emit("transpose", x, perm=tuple(perm))


def _reverse_axes(cx: _Ctx, a: dict[str, Any]) -> Value:  # x.T
    x = a["self"]
    return x if x.ndim < 2 else cx.emit("transpose", x, perm=tuple(reversed(range(x.ndim))))


def _squeeze(cx: _Ctx, a: dict[str, Any]) -> Value:
    x = a["self"]
    dims = a.get("dim", a.get("dims"))
    candidates = range(x.ndim) if dims is None else [d % max(x.ndim, 1) for d in _ints(dims)]
    axes = tuple(sorted({d for d in candidates if x.ndim and x.shape[d] == 1}))  # torch ignores non-1 dims
    return cx.emit("squeeze", x, axes=axes) if axes else x


def _slice(cx: _Ctx, a: dict[str, Any]) -> Value:
    x = a["self"]
    axis = a["dim"] % x.ndim
    size = x.shape[axis]
    start, stop = slice(a["start"], a["end"]).indices(size)[:2]
    if (start, stop, a["step"]) == (0, size, 1):
        return x
    return cx.emit("slice", x, axis=axis, start=start, stop=max(stop, start), step=a["step"])


def _select(cx: _Ctx, a: dict[str, Any]) -> Value:
    x = a["self"]
    axis = a["dim"] % x.ndim
    i = a["index"] % x.shape[axis]
    return cx.emit("squeeze", cx.emit("slice", x, axis=axis, start=i, stop=i + 1), axes=(axis,))


# -- reductions ----------------------------------------------------------------------------------
def _reduce(op: str, dim_key: str | None = "dim", values_and_indices: bool = False) -> Handler:
    def handle(cx: _Ctx, a: dict[str, Any]) -> Any:
        axes = _axes(a[dim_key]) if dim_key else ()
        out = cx.emit(op, a["self"], axes=axes, keepdims=bool(a.get("keepdim", False)))
        return (out, None) if values_and_indices else out

    return handle


def _variance(cx: _Ctx, a: dict[str, Any], sqrt: bool) -> Value:
    x = a["self"]
    axes = _axes(a["dim"]) or tuple(range(x.ndim))
    if "correction" in a:
        correction = 1 if a["correction"] is None else a["correction"]
    else:
        correction = 1 if a["unbiased"] else 0
    n = math.prod(x.shape[ax] for ax in axes) - correction
    if n <= 0:
        raise cx.unsupported(f"variance of {math.prod(x.shape[ax] for ax in axes)} elements with "
                             f"correction={correction} divides by zero")
    centered = cx.emit("sub", x, cx.emit("mean", x, axes=axes, keepdims=True))
    total = cx.emit("sum", cx.emit("square", centered), axes=axes, keepdims=bool(a["keepdim"]))
    var = cx.scale(total, 1.0 / n)
    return cx.emit("sqrt", var) if sqrt else var


# -- normalizations ------------------------------------------------------------------------------
def _channel(cx: _Ctx, v: Value, rank: int) -> Value:
    return cx.emit("reshape", v, shape=(v.shape[0],) + (1,) * (rank - 2))


def _with_affine(cx: _Ctx, op: str, x: Value, stats: list[Value], weight: Value | None, bias: Value | None,
                 channel_bias: bool, **attrs: Any) -> Value:
    """Emit a norm composite; a bias without a weight is added after it (the composites take weight first)."""
    ins = stats + ([weight] if weight is not None else []) + ([bias] if weight is not None and bias is not None
                                                               else [])
    y = cx.emit(op, x, *ins, **attrs)
    if weight is None and bias is not None:
        y = cx.emit("add", y, _channel(cx, bias, x.ndim) if channel_bias else bias)
    return y


def _layer_norm(cx: _Ctx, a: dict[str, Any]) -> Value:
    x = a["input"]
    axes = tuple(range(x.ndim - len(a["normalized_shape"]), x.ndim))
    return _with_affine(cx, "layernorm", x, [], a["weight"], a["bias"], False, axes=axes, eps=a["eps"])


def _rms_norm(cx: _Ctx, a: dict[str, Any]) -> Value:
    x = a["input"]
    eps = a["eps"] if a["eps"] is not None else torch.finfo(getattr(torch, x.dtype.torch_name)).eps
    axes = tuple(range(x.ndim - len(a["normalized_shape"]), x.ndim))
    ins = [x] + ([a["weight"]] if a["weight"] is not None else [])
    return cx.emit("rmsnorm", *ins, axes=axes, eps=eps)


def _group_norm(cx: _Ctx, a: dict[str, Any]) -> Value:
    return _with_affine(cx, "groupnorm", a["input"], [], a["weight"], a["bias"], True, groups=a["num_groups"],
                        eps=a["eps"])


def _batch_stats(cx: _Ctx, x: Value) -> list[Value]:
    """Per-channel mean and biased variance over every axis but 1 (training-mode batch norm)."""
    axes = tuple(i for i in range(x.ndim) if i != 1)
    mean = cx.emit("mean", x, axes=axes)
    centered = cx.emit("sub", x, _channel(cx, mean, x.ndim))
    return [mean, cx.emit("mean", cx.emit("square", centered), axes=axes)]


def _batch_norm(cx: _Ctx, a: dict[str, Any]) -> Any:
    x = a["input"]
    if a.get("training") or a["running_mean"] is None:
        stats = _batch_stats(cx, x)  # the output uses batch statistics; running-stat updates are ignored
    else:
        stats = [a["running_mean"], a["running_var"]]
    y = _with_affine(cx, "batchnorm", x, stats, a["weight"], a["bias"], True, eps=a["eps"], axis=1)
    return (y, None, None) if cx.aten == "aten._native_batch_norm_legit_no_training.default" else y


def _instance_norm(cx: _Ctx, a: dict[str, Any]) -> Value:
    x = a["input"]
    if not a["use_input_stats"]:
        return _batch_norm(cx, {**a, "training": False})
    return _with_affine(cx, "groupnorm", x, [], a["weight"], a["bias"], True, groups=x.shape[1], eps=a["eps"])


# -- attention -----------------------------------------------------------------------------------
def _sdpa(cx: _Ctx, a: dict[str, Any]) -> Value:
    q, k, v, mask = a["query"], a["key"], a["value"], a["attn_mask"]
    if a["dropout_p"] > 0:
        raise cx.unsupported(f"attention dropout (dropout_p={a['dropout_p']}) is random")
    if mask is not None and not isinstance(mask, Value):
        raise cx.unsupported("attn_mask must be a tensor")
    ins = [q, k, v] + ([mask] if mask is not None else [])
    return cx.emit("sdpa", *ins, scale=a["scale"], causal=bool(a["is_causal"]))


# -- convolutions and pooling --------------------------------------------------------------------
def _same_padding(cx: _Ctx, weight: Value, dilation: tuple[int, ...]) -> tuple[int, ...]:
    n = weight.ndim - 2
    dil = dilation * n if len(dilation) == 1 else dilation
    pads = []
    for k, d in zip(weight.shape[2:], dil):
        total = d * (int(k) - 1)
        if total % 2:
            raise cx.unsupported(f"padding='same' with kernel {k}, dilation {d} pads unevenly; pad explicitly")
        pads.append(total // 2)
    return tuple(pads)


def _conv(cx: _Ctx, a: dict[str, Any]) -> Value:
    x, w, bias = a["input"], a["weight"], a["bias"]
    n = w.ndim - 2
    transposed = a.get("transposed", False) or "conv_transpose" in cx.aten
    attrs: dict[str, Any] = {"stride": _ints(a["stride"]), "dilation": _ints(a["dilation"]), "groups": a["groups"]}
    padding = a["padding"]
    if isinstance(padding, str):
        padding = (0,) * n if padding == "valid" else _same_padding(cx, w, attrs["dilation"])
    attrs["padding"] = _ints(padding)
    if transposed:
        attrs["output_padding"] = _ints(a["output_padding"])
    ins = [x, w] + ([bias] if bias is not None else [])
    return cx.emit(f"conv_transpose{n}d" if transposed else f"conv{n}d", *ins, **attrs)


def _pool(kind: str, n: int, with_indices: bool = False) -> Handler:
    def handle(cx: _Ctx, a: dict[str, Any]) -> Any:
        attrs = {"kernel_size": _ints(a["kernel_size"]), "stride": _ints(a["stride"]),
                 "padding": _ints(a["padding"]), "ceil_mode": bool(a["ceil_mode"])}
        if kind == "max":
            attrs["dilation"] = _ints(a["dilation"])
        else:
            attrs["count_include_pad"] = bool(a["count_include_pad"])
            if a.get("divisor_override") is not None:
                raise cx.unsupported("avg pooling with divisor_override has no registry equivalent")
        out = cx.emit(f"{kind}_pool{n}d", a["self"], **attrs)
        return (out, None) if with_indices else out

    return handle


def _adaptive_avg_pool(n: int) -> Handler:
    def handle(cx: _Ctx, a: dict[str, Any]) -> Value:
        x = a["self"]
        sizes, outs = x.shape[-n:], _ints(a["output_size"])
        if all(o == 1 for o in outs):
            return cx.emit("mean", x, axes=tuple(range(x.ndim - n, x.ndim)), keepdims=True)
        if x.ndim == n + 2 and all(int(s) % o == 0 for s, o in zip(sizes, outs)):
            kernel = tuple(int(s) // o for s, o in zip(sizes, outs))
            return cx.emit(f"avg_pool{n}d", x, kernel_size=kernel, stride=kernel)
        raise cx.unsupported(f"adaptive pooling of {D.format_shape(x.shape)} to {list(outs)} needs uneven windows")

    return handle


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
    "aten.slice.Tensor": _slice, "aten.select.int": _select,
    "aten.cat.default": lambda cx, a: cx.emit("concat", *a["tensors"], axis=a["dim"]),
    # identities and casts
    "aten.clone.default": _identity, "aten.contiguous.default": _identity, "aten.alias.default": _identity,
    "aten.detach.default": _identity, "aten.lift_fresh_copy.default": _identity, "aten.dropout.default": _dropout,
    "aten._to_copy.default": _cast, "aten.to.dtype": _cast, "aten.type_as.default": _cast,
    # arithmetic
    "aten.add.Tensor": _binary("add"), "aten.add.Scalar": _binary("add"),
    "aten.sub.Tensor": _binary("sub"), "aten.sub.Scalar": _binary("sub"),
    "aten.mul.Tensor": _binary("mul"), "aten.mul.Scalar": _binary("mul"),
    "aten.div.Tensor": _binary("div"), "aten.div.Scalar": _binary("div"),
    "aten.rsub.Tensor": _rsub, "aten.rsub.Scalar": _rsub,
    "aten.maximum.default": _binary("maximum"), "aten.minimum.default": _binary("minimum"),
    "aten.max.other": _binary("maximum"), "aten.min.other": _binary("minimum"),
    "aten.pow.Tensor_Scalar": _pow, "aten.pow.Scalar": _pow_scalar_base,
    # unary maps
    **{f"aten.{op}.default": _unary(op) for op in (
        "neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "abs", "square", "relu", "sigmoid", "tanh", "silu",
        "mish", "hardswish", "hardsigmoid", "erf")},
    "aten.leaky_relu.default": lambda cx, a: cx.emit("leaky_relu", a["self"], slope=a["negative_slope"]),
    "aten.gelu.default": lambda cx, a: cx.emit("gelu", a["self"], approximate=a["approximate"]),
    "aten.softplus.default": lambda cx, a: cx.emit("softplus", a["self"], beta=a["beta"], threshold=a["threshold"]),
    "aten.elu.default": _elu, "aten.selu.default": lambda cx, a: _elu(cx, {**a, **_SELU}),
    "aten.celu.default": lambda cx, a: _elu(cx, {**a, "scale": 1.0, "input_scale": 1.0 / a["alpha"]}),
    "aten.log_sigmoid.default": lambda cx, a: cx.emit("neg", cx.emit("softplus", cx.emit("neg", a["self"]),
                                                                     threshold=math.inf)),
    "aten.hardtanh.default": _clamp("min_val", "max_val"), "aten.relu6.default": _unary("clamp", lo=0.0, hi=6.0),
    "aten.clamp.default": _clamp("min", "max"), "aten.clamp_min.default": _clamp("min", None),
    "aten.clamp_max.default": _clamp(None, "max"),
    # reductions and scans
    "aten.sum.default": _reduce("sum", None), "aten.sum.dim_IntList": _reduce("sum"),
    "aten.mean.default": _reduce("mean", None), "aten.mean.dim": _reduce("mean"),
    "aten.amax.default": _reduce("max"), "aten.amin.default": _reduce("min"),
    "aten.max.default": _reduce("max", None), "aten.min.default": _reduce("min", None),
    "aten.max.dim": _reduce("max", values_and_indices=True), "aten.min.dim": _reduce("min", values_and_indices=True),
    "aten.logsumexp.default": _reduce("logsumexp"), "aten.linalg_vector_norm.default": _vector_norm,
    "aten.var.dim": lambda cx, a: _variance(cx, a, False), "aten.var.correction": lambda cx, a: _variance(cx, a, False),
    "aten.std.dim": lambda cx, a: _variance(cx, a, True), "aten.std.correction": lambda cx, a: _variance(cx, a, True),
    "aten.cumsum.default": lambda cx, a: cx.emit("cumsum", a["self"], axis=a["dim"]),
    # softmax and norms
    "aten.softmax.int": lambda cx, a: cx.emit("softmax", a["self"], axis=a["dim"]),
    "aten._softmax.default": lambda cx, a: cx.emit("softmax", a["self"], axis=a["dim"]),
    "aten.log_softmax.int": lambda cx, a: cx.emit("log_softmax", a["self"], axis=a["dim"]),
    "aten._log_softmax.default": lambda cx, a: cx.emit("log_softmax", a["self"], axis=a["dim"]),
    "aten.layer_norm.default": _layer_norm, "aten.rms_norm.default": _rms_norm,
    "aten.group_norm.default": _group_norm, "aten.instance_norm.default": _instance_norm,
    "aten.batch_norm.default": _batch_norm, "aten._native_batch_norm_legit_no_training.default": _batch_norm,
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

# Ops whose result may alias their input: an in-place op must not write through (or into) one of them.
_VIEW_LIKE = frozenset({
    "aten.view.default", "aten.reshape.default", "aten._unsafe_view.default", "aten.t.default",
    "aten.transpose.int", "aten.permute.default", "aten.numpy_T.default", "aten.expand.default",
    "aten.expand_as.default", "aten.unsqueeze.default", "aten.squeeze.default", "aten.squeeze.dim",
    "aten.squeeze.dims", "aten.slice.Tensor", "aten.select.int", "aten.flatten.using_ints", "aten.unflatten.int",
    "aten.alias.default", "aten.detach.default", "aten.contiguous.default", "aten.to.dtype", "aten.type_as.default",
    "aten.dropout.default",
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


# ------------------------------------------------------------------------------------------------
# Export and translation
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class TorchImport:
    """A Program imported from torch, with the float64 values of its parameter and buffer inputs."""

    program: Program
    state: dict[str, np.ndarray]


def from_torch(module: torch.nn.Module | torch.export.ExportedProgram, example_inputs: Any, *,
               name: str | None = None) -> Program:
    """The Program computing ``module(*example_inputs)``, with the example inputs' concrete shapes."""
    return import_torch(module, example_inputs, name=name).program


def import_torch(module: torch.nn.Module | torch.export.ExportedProgram, example_inputs: Any, *,
                 name: str | None = None) -> TorchImport:
    """Like :func:`from_torch`, also returning the parameter and buffer values (float64, by input name)."""
    args = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    if isinstance(module, torch.export.ExportedProgram):
        ep, name = module, name or "program"
    else:
        name = name or type(module).__name__
        ep = _export(module, args, name)
    return _Translator(ep, name).run()


class _Captured:
    """torch's log records, warnings and stderr prints while it exports, kept out of the terminal.

    ``replay()`` hands them to the handlers (and stream) they were meant for: done only when an export
    fails with something ``_export_error`` cannot diagnose."""

    def __init__(self) -> None:
        self.records: list[tuple[list[logging.Handler], logging.LogRecord]] = []
        self.stderr = io.StringIO()
        self.warnings: list[warnings.WarningMessage] = []
        self._saved: dict[logging.Logger, list[logging.Handler]] = {}
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> _Captured:
        for logger_name, logger in list(logging.root.manager.loggerDict.items()):
            if isinstance(logger, logging.Logger) and logger.handlers and logger_name.split(".")[0] == "torch":
                self._saved[logger] = logger.handlers[:]
                logger.handlers = [_Keep(self.records, self._saved[logger])]
        self.warnings = self._stack.enter_context(warnings.catch_warnings(record=True))
        warnings.simplefilter("default")
        self._stack.enter_context(contextlib.redirect_stderr(self.stderr))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
        for logger, handlers in self._saved.items():
            logger.handlers = handlers

    def replay(self) -> None:
        for handlers, record in self.records:
            for h in handlers:
                if record.levelno >= h.level:
                    h.handle(record)
        for w in self.warnings:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        sys.stderr.write(self.stderr.getvalue())


class _Keep(logging.Handler):
    def __init__(self, into: list[tuple[list[logging.Handler], logging.LogRecord]], handlers: list[logging.Handler]):
        super().__init__(logging.NOTSET)
        self.into, self.handlers = into, handlers

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append((self.handlers, record))


def _export(module: torch.nn.Module, args: tuple, name: str) -> torch.export.ExportedProgram:
    """``torch.export.export`` with its logging captured; a failure becomes one line naming the user's line."""
    captured = _Captured()
    with captured:
        try:
            return torch.export.export(module, args)
        except Exception as e:  # noqa: BLE001 - torch raises many kinds; report which module failed
            failure = e
    error = _export_error(failure, name)
    if error is None:  # not understood: show what torch said, then the one line
        captured.replay()
        text = str(failure).strip()
        first = text.splitlines()[0] if text else type(failure).__name__
        error = UnsupportedOperation(f"{name}: torch.export could not trace forward(): {first}")
    raise error from failure


_SHAPE_WORDS = re.compile(r"broadcast|size of tensor|shape|mat1 and mat2|must match|dimension|expected size", re.I)


def _export_error(e: BaseException, name: str) -> AxonError | None:
    """One line for an export failure at a known user line: data-dependent control flow (a Python ``if``
    or ``.item()`` on a tensor's value), a shape mismatch, anything else torch says. None when no user
    line is known (the caller then shows torch's own output)."""
    location, code = _user_frame(e)
    text = str(e).strip()
    first = text.splitlines()[0] if text else type(e).__name__
    at = f" at {location}" + (f" (`{code}`)" if code else "") if location else ""
    guard = getattr(sys.modules.get("torch.fx.experimental.symbolic_shapes"), "GuardOnDataDependentSymNode", ())
    if (guard and isinstance(e, guard)) or "data-dependent" in first or "data dependent" in first:
        return UnsupportedOperation(
            f"{name}: data-dependent control flow is not supported: forward(){at} decides on a tensor's value "
            "(an if/while on a tensor, or .item()); axon_eg imports one fixed computation",
            op="data-dependent control flow", location=location)
    if location is None:
        return None
    if isinstance(e, (RuntimeError, ValueError, IndexError)) and _SHAPE_WORDS.search(first):
        return ShapeError(f"{name}: forward(){at}: {first}")
    return UnsupportedOperation(f"{name}: torch.export could not trace forward(){at}: {type(e).__name__}: {first}",
                                location=location)


def _user_frame(e: BaseException) -> tuple[str | None, str | None]:
    """(``file:line``, source text) of the innermost user frame of ``e`` (or its causes), else of the
    ``File "...", line N`` frames quoted in its message."""
    seen: set[int] = set()
    err: BaseException | None = e
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        frames = [f for f in traceback.extract_tb(err.__traceback__) if _is_user_file(f.filename)]
        if frames:
            return f"{frames[-1].filename}:{frames[-1].lineno}", (frames[-1].line or "").strip() or None
        err = err.__cause__ or err.__context__
    quoted = [m for m in re.finditer(r'File "([^"]+)", line (\d+)[^\n]*\n?([^\n]*)', str(e)) if _is_user_file(m[1])]
    if quoted:
        return f"{quoted[-1][1]}:{quoted[-1][2]}", quoted[-1][3].strip() or None
    return None, None


def _is_user_file(path: str) -> bool:
    return not path.startswith("<") and not os.path.abspath(path).startswith(_LIBRARY_DIRS + _STDLIB_DIRS)


class _Translator:
    def __init__(self, ep: torch.export.ExportedProgram, name: str):
        self.ep, self.name = ep, name
        self.graph_nodes = list(ep.graph.nodes)
        self.order = {n: i for i, n in enumerate(self.graph_nodes)}
        self.specs = {s.arg.name: s for s in ep.graph_signature.input_specs if hasattr(s.arg, "name")}
        self.b = Builder(name)
        self.env: dict[Node, Any] = {}
        self.roles: dict[str, str] = {}
        self.state: dict[str, np.ndarray] = {}

    def run(self) -> TorchImport:
        mutated = getattr(self.ep.graph_signature, "user_inputs_to_mutate", {}) or {}
        for output_name, input_name in mutated.items():  # a functionalized graph: the write is an extra output
            producer = next((n for n in self.graph_nodes if n.name == output_name), None)
            self._refuse_mutation(input_name, producer if producer is not None and producer.op == "call_function"
                                  else None)
        resolved, outputs = self._functionalize()
        live = self._live(resolved, outputs)
        for node in self.graph_nodes:  # name an unsupported op before any dtype complaint about its inputs
            if node in live and node.op == "call_function" and node.target is not operator.getitem \
                    and _handler(node.target) is None:
                why = _DATA_DEPENDENT.get(_name(node.target), "no axon_eg equivalent (see "
                                          "axon_eg.ir.torch_import.SUPPORTED_ATEN_OPS)")
                raise _Ctx(self.b, _name(node.target), node, _location(node)).unsupported(why)
        self._inputs(live)
        for node in self.graph_nodes:
            if node.op == "call_function" and node in live:
                self.env[node] = self._translate(node, *resolved[node])
        results = []
        for spec, out in zip(self.ep.graph_signature.output_specs, outputs):
            if spec.kind == torch.export.graph_signature.OutputKind.USER_OUTPUT:
                value = self.env.get(out) if isinstance(out, Node) else out
                if not isinstance(value, Value):
                    raise ProgramError(f"{self.name}: forward() returns {value!r}; only tensor outputs are supported")
                results.append(value)
        if not results:
            raise ProgramError(f"{self.name}: forward() returns no tensor")
        program = self.b.build(results, roles=self.roles)
        return TorchImport(*_drop_unused_state(program, self.state))

    # In-place ops write a new version of their first argument: later readers see that version.
    def _functionalize(self) -> tuple[dict[Node, tuple[tuple, dict]], list[Any]]:
        version: dict[Node, Node] = {}

        def current(n: Node) -> Node:
            while n in version:
                n = version[n]
            return n

        resolved: dict[Node, tuple[tuple, dict]] = {}
        outputs: list[Any] = []
        for node in self.graph_nodes:
            if node.op == "call_function":
                resolved[node] = map_arg((node.args, node.kwargs), current)  # type: ignore[assignment]
                if _writes_self(node.target) and isinstance(node.args[0], Node):
                    self._check_not_an_input(node)
                    target = current(node.args[0])
                    self._check_no_alias(node, target)
                    version[target] = node
            elif node.op == "output":
                outputs = list(map_arg(node.args[0], current))
        return resolved, outputs

    def _check_not_an_input(self, node: Node) -> None:
        """Refuse an in-place write into forward()'s argument or a parameter (or a view of one): the caller
        would see the change, and a kernel does not write its inputs. Buffer updates (batch norm's
        ``num_batches_tracked += 1`` in training mode) are state bookkeeping, dropped like the running stats."""
        root = node.args[0]
        while isinstance(root, Node) and root.op == "call_function" and isinstance(root.args[0], Node) and (
                _name(root.target) in _VIEW_LIKE or _writes_self(root.target)):
            root = root.args[0]
        kinds = torch.export.graph_signature.InputKind
        if isinstance(root, Node) and root.op == "placeholder" and root.name in self.specs and \
                self.specs[root.name].kind in (kinds.USER_INPUT, kinds.PARAMETER):
            self._refuse_mutation(root.name, node)

    def _refuse_mutation(self, placeholder: str, node: Node | None) -> None:
        kinds = torch.export.graph_signature.InputKind
        spec = self.specs.get(placeholder)
        if spec is None or spec.kind == kinds.USER_INPUT:
            what = f"its input {placeholder!r}"
        else:
            what = f"its {spec.kind.name.lower().replace('_', ' ')} {spec.target!r}"
        op = _name(node.target) if node is not None else "an in-place op"
        location = _location(node) if node is not None else None
        at = f"{op} at {location}" if location else op
        raise UnsupportedOperation(f"{self.name}: forward() writes {what} in place ({at}), which is not supported: "
                                   "a kernel does not modify its inputs; use the out-of-place op (x = x + 1, not "
                                   "x.add_(1)) or clone() first", op=op, location=location)

    def _check_no_alias(self, node: Node, mutated: Node) -> None:
        """Refuse an in-place write when a tensor sharing memory with ``mutated`` is read afterwards."""
        root = mutated
        while root.op == "call_function" and _name(root.target) in _VIEW_LIKE and isinstance(root.args[0], Node):
            root = root.args[0]
        group: set[Node] = set()
        stack = [root]
        while stack:
            n = stack.pop()
            if n not in group:
                group.add(n)
                stack.extend(u for u in n.users if _name(u.target) in _VIEW_LIKE)
        group.discard(mutated)  # later reads of the mutated tensor itself see the new version
        if any(self.order[u] > self.order[node] for alias in group for u in alias.users if u is not node):
            raise _Ctx(self.b, _name(node.target), node, _location(node)).unsupported(
                "writes in place into a tensor that shares memory with a view read later; use the out-of-place op")

    def _live(self, resolved: dict[Node, tuple[tuple, dict]], outputs: list[Any]) -> set[Node]:
        live: set[Node] = set()
        stack = [o for o in outputs if isinstance(o, Node)]
        while stack:
            n = stack.pop()
            if n in live:
                continue
            live.add(n)
            if n in resolved:
                map_arg(resolved[n], stack.append)
        return live

    def _inputs(self, live: set[Node]) -> None:
        kinds = torch.export.graph_signature.InputKind
        placeholders = [n for n in self.graph_nodes if n.op == "placeholder"]
        users = [n for n in placeholders if self.specs[n.name].kind == kinds.USER_INPUT]
        state = [n for n in placeholders if self.specs[n.name].kind != kinds.USER_INPUT and n in live]
        for n in users + state:  # user inputs first, in forward() order; then parameters and buffers
            spec, val = self.specs[n.name], n.meta.get("val")
            if not isinstance(val, torch.Tensor):
                self.env[n] = val  # a Python number: torch.export specialized the graph on it
                continue
            if spec.kind == kinds.USER_INPUT:
                name = n.name
                self.env[n] = self.b.input(name, tuple(val.shape), _dtype(val.dtype, f"{self.name}: input {name!r}"))
                continue
            if spec.kind not in (kinds.PARAMETER, kinds.BUFFER, kinds.CONSTANT_TENSOR):
                raise UnsupportedOperation(f"{self.name}: graph input {n.name!r} of kind {spec.kind.name}",
                                           op=spec.kind.name)
            value = self.ep.state_dict[spec.target] if spec.target in self.ep.state_dict \
                else self.ep.constants[spec.target]
            what = f"{self.name}: {spec.kind.name.lower().replace('_', ' ')} {spec.target!r}"
            if spec.kind == kinds.CONSTANT_TENSOR and value.ndim == 0:  # torch.tensor(2.0) in forward()
                self.env[n] = self.b.constant(float(value), _dtype(value.dtype, what))
                continue
            self.env[n] = self.b.input(spec.target, tuple(value.shape), _dtype(value.dtype, what))
            self.roles[spec.target] = "parameter" if spec.kind == kinds.PARAMETER else "buffer"
            self.state[spec.target] = value.detach().to("cpu", torch.float64).numpy()

    def _translate(self, node: Node, args: tuple, kwargs: dict) -> Any:
        aten, location = _name(node.target), _location(node)
        args, kwargs = map_arg((args, kwargs), self.env.__getitem__)  # type: ignore[assignment]
        cx = _Ctx(self.b, aten, node, location)
        if node.target is operator.getitem:
            value = args[0][args[1]]
            if value is None:
                producer = _name(node.args[0].target)  # type: ignore[union-attr]
                raise _Ctx(self.b, producer, node, location).unsupported(
                    f"its output {args[1]} (indices) is used; axon_eg imports only the values output")
            return value
        handler = _handler(node.target)
        assert handler is not None  # checked in run()
        with self.b.at(location):
            return self._conform(cx, handler(cx, _bind_schema(node.target, args, kwargs)), node.meta.get("val"))

    def _conform(self, cx: _Ctx, value: Any, val: Any) -> Any:
        """Check a handler's result against torch's own shape; cast where torch's dtype rule differs."""
        if value is None or val is None:
            return value
        if isinstance(value, tuple):
            return tuple(self._conform(cx, v, t) for v, t in zip(value, val))
        want = tuple(int(d) for d in val.shape)
        if value.shape != want:
            raise ShapeError(f"{cx.where}: imported with shape {D.format_shape(value.shape)}, "
                             f"torch computes {list(want)} (an axon_eg import bug)")
        dtype = _dtype(val.dtype, f"{cx.where}: its result")
        return value if value.dtype == dtype else cx.emit("cast", value, dtype=dtype)


def _drop_unused_state(program: Program, state: dict[str, np.ndarray]) -> tuple[Program, dict[str, np.ndarray]]:
    """Rebuild without parameter/buffer inputs no op reads (e.g. running stats of training batch norm)."""
    users = program.users()
    unused = {n.attrs["name"] for i, n in enumerate(program.nodes)
              if n.op == "input" and not users[i] and n.attrs["name"] in state}
    if not unused:
        return program, state
    b = Builder(program.name)
    values: dict[int, Value] = {}
    for i, n in enumerate(program.nodes):
        if n.op == "input":
            if n.attrs["name"] not in unused:
                values[i] = b.input(n.attrs["name"], n.shape, n.dtype)
            continue
        with b.at(program.location(i)):
            values[i] = b.emit(n.op, *[values[j] for j in n.inputs], **dict(n.attrs))
    roles = {k: v for k, v in program.roles if k not in unused}
    kept = b.build([values[o] for o in program.outputs], roles=roles)
    return kept, {k: v for k, v in state.items() if k not in unused}


# ------------------------------------------------------------------------------------------------
# KernelBench problem files
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Problem:
    """A KernelBench-format problem: the Program, its module and the module's parameter values."""

    path: Path
    program: Program
    inputs: list[InputSpec]
    parameters: dict[str, np.ndarray]  # float64 values of the parameter and buffer inputs, by name
    example_inputs: tuple
    module: torch.nn.Module

    @property
    def user_inputs(self) -> list[InputSpec]:
        return [s for s in self.inputs if s.role == "input"]

    def _all_inputs(self, user_inputs: Mapping[str, Any] | Sequence[Any]) -> dict[str, Any]:
        if isinstance(user_inputs, Mapping):
            return {**self.parameters, **user_inputs}
        names = [s.name for s in self.user_inputs]
        if len(user_inputs) != len(names):
            raise ProgramError(f"{self.program.name}: takes {len(names)} user inputs ({', '.join(names)}), "
                               f"got {len(user_inputs)}")
        return {**self.parameters, **dict(zip(names, user_inputs))}

    def reference(self, user_inputs: Mapping[str, Any] | Sequence[Any]) -> np.ndarray:
        """The float64 result for these user inputs (by name, or positionally) and the stored parameters."""
        return interpret(self.program, self._all_inputs(user_inputs))  # type: ignore[return-value]

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Every program input: user inputs random (never zero), parameters and buffers the module's own."""
        return {**_random_inputs(self.program, seed), **self.parameters}


_counter = itertools.count()


def small_sizes(path: str | os.PathLike[str]) -> dict[str, int] | None:
    """A KernelBench file's ``SMALL_SIZES`` (module-level constants to set for a quick run, e.g.
    ``SMALL_SIZES = {"batch_size": 2, "hidden_size": 16}``), read without running the file; None when
    it defines none. A SMALL_SIZES that is not a literal dict of names to ints >= 1 is a ProblemLoadError."""
    path = Path(path)
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as e:
        raise ProblemLoadError(f"{e.filename or path}:{e.lineno}: syntax error: {e.msg}") from None
    except OSError as e:
        raise ProblemLoadError(f"{path}: cannot read it ({e.strerror or e})") from None
    found = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "SMALL_SIZES" for t in node.targets):
            found = node
    if found is None:
        return None
    try:
        value = ast.literal_eval(found.value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        value = None
    ok = isinstance(value, dict) and all(isinstance(k, str) and type(v) is int and v >= 1 for k, v in value.items())
    if not ok:
        raise ProblemLoadError(f"{path}:{found.lineno}: SMALL_SIZES must be a literal dict of module-level names to "
                               "ints >= 1, e.g. {\"batch_size\": 2}")
    return dict(value)  # type: ignore[arg-type]


def load_problem(path: str | os.PathLike[str], *, sizes: Mapping[str, int] | None = None) -> Problem:
    """Import a KernelBench file: ``Model(*get_init_inputs())`` applied to ``get_inputs()``.

    torch is seeded with 0 (on a forked RNG) before the model and its inputs are made. ``sizes``
    overrides module-level constants (``batch_size=4``) before either function runs. The module is
    used in the mode its constructor leaves it (training, as KernelBench evaluates it): batch norm
    then normalizes with batch statistics."""
    path = Path(path)
    if not path.is_file():
        raise ProblemLoadError(f"{path}: no such problem file")
    stem = re.sub(r"\W", "_", path.stem)
    module_name = f"axon_eg_problem_{stem}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ProblemLoadError(f"{path}: cannot be imported as a Python module")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = mod
    try:
        spec.loader.exec_module(mod)
    except SyntaxError as e:
        raise ProblemLoadError(f"{e.filename or path}:{e.lineno}: syntax error: {e.msg}") from None
    except Exception as e:  # noqa: BLE001 - any failure at import time is the file's
        raise ProblemLoadError(f"{path}: importing it raised {type(e).__name__}: {e}") from e
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(mod, n)]
    if missing:
        raise ProblemLoadError(f"{path}: missing {', '.join(missing)} (a KernelBench problem defines "
                               "class Model(nn.Module), get_inputs() and get_init_inputs())")
    if not (isinstance(mod.Model, type) and issubclass(mod.Model, torch.nn.Module)):
        raise ProblemLoadError(f"{path}: Model must be a torch.nn.Module subclass, got {mod.Model!r}")
    for key, value in (sizes or {}).items():
        if not hasattr(mod, key):
            raise ProblemLoadError(f"{path}: sizes names {key!r}, which the file does not define")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ProblemLoadError(f"{path}: sizes[{key!r}] must be an int >= 1, got {value!r}")
        setattr(mod, key, value)

    def call(what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as e:  # noqa: BLE001
            raise ProblemLoadError(f"{path}: {what} raised {type(e).__name__}: {e}") from e

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        init = call("get_init_inputs()", mod.get_init_inputs)
        model = call("Model(*get_init_inputs())", lambda: mod.Model(*init))
        example = tuple(call("get_inputs()", mod.get_inputs))
    imported = import_torch(model, example, name=path.stem)
    return Problem(path, imported.program, imported.program.inputs, imported.state, example, model)


__all__ = ["SUPPORTED_ATEN_OPS", "Problem", "TorchImport", "from_torch", "import_torch", "load_problem", "small_sizes"]
