"""How each supported aten op becomes registry ops (part of the PyTorch front end, :mod:`axon_eg.ir.torch_import`).

A handler takes a :class:`Ctx` (the builder, the aten op's name, its fx node and the user's source line)
and the op's arguments bound to its schema names, and returns the Value(s) it computes. Each handler names the
aten overloads it handles where it is defined, with :func:`handles`, which adds them to ``ATEN``: THE table of
the front end (read it through :mod:`axon_eg.ir.aten_table`, which imports every module of handlers, this one
and :mod:`axon_eg.ir.aten_indexing`, so that the table is whole wherever it is read).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import torch
from torch.fx.node import Node

from axon_eg.errors import DtypeError, UnsupportedOperation
from axon_eg.ir import dims as D
from axon_eg.ir.builder import Builder, Value
from axon_eg.ir.dtypes import DType, as_dtype
from axon_eg.ir.einsum import EinsumError, expand


def checked_dtype(torch_dtype: torch.dtype, what: str) -> DType:
    try:
        return as_dtype(torch_dtype)
    except DtypeError:
        raise DtypeError(f"{what} has dtype {torch_dtype}; axon_eg handles bf16, fp16, fp32, fp64, int32, int64 "
                         "and bool (cast it to one of them in the module)") from None


# ------------------------------------------------------------------------------------------------
# Per-node context handed to the handlers
# ------------------------------------------------------------------------------------------------
class Ctx:
    def __init__(self, builder: Builder, aten: str, node: Node, location: str | None,
                 buffer: Callable[[str, Any, DType], Value] | None = None,
                 known: Callable[[str], np.ndarray | None] | None = None):
        self.b, self.aten, self.node, self.location = builder, aten, node, location
        self._buffer, self._known = buffer, known

    def known(self, name: str) -> np.ndarray | None:
        """The float64 values of input ``name`` where they are constants of the program (a buffer the importer
        made from values computed in forward()), else None."""
        return self._known(name) if self._known is not None else None

    def buffer(self, stem: str, values: Any, dtype: DType) -> Value:
        """A tensor of known values made inside forward() (``torch.arange``): a buffer of the program, whose
        values travel with the parameters."""
        if self._buffer is None:
            raise self.unsupported("a tensor made from values here has no buffer to go to")
        return self._buffer(stem, values, dtype)

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


Handler = Callable[[Ctx, dict[str, Any]], Any]
_H = TypeVar("_H", bound=Callable[..., Any])

ATEN: dict[str, Handler] = {}
"""THE table: aten overload name -> handler. Nothing else decides which aten ops are supported. Filled by
:func:`handles` where each handler is defined; read it through :mod:`axon_eg.ir.aten_table`, which imports
every module of handlers."""

CONTRACTIONS: dict[str, int] = {}
"""aten overload name -> how many contractions it imports as, where some (``aten_table.contracts`` reads it)."""


def handles(*names: str, contractions: int = 0) -> Callable[[_H], _H]:
    """Decorator: the decorated handler is the one of the aten overloads ``names`` (each is handled once).
    ``contractions``: how many contractions the op imports as (a matmul, attention or convolution one, a
    recurrent cell two: its input's and its hidden state's linears). A made handler is registered by a call:
    ``handles("aten.add.Tensor", "aten.add.Scalar")(_binary("add"))``."""

    def register(handler: _H) -> _H:
        for name in names:
            if name in ATEN:
                raise ValueError(f"aten op {name!r} is handled twice")
            ATEN[name] = handler
            if contractions:
                CONTRACTIONS[name] = contractions
        return handler

    return register


def ints(v: Any) -> tuple[int, ...]:
    return (int(v),) if isinstance(v, int) else tuple(int(x) for x in v)


def _axes(dim: Any) -> tuple[int, ...]:
    return () if dim is None else ints(dim)


# -- element-wise --------------------------------------------------------------------------------
def _unary(op: str, **fixed: Any) -> Handler:
    return lambda cx, a: cx.emit(op, a["self"], **fixed)


for _op in ("neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "abs", "square", "relu", "sigmoid", "tanh", "silu",
            "mish", "hardswish", "hardsigmoid", "erf", "sin", "cos", "floor", "ceil", "round", "trunc", "sign"):
    handles(f"aten.{_op}.default")(_unary(_op))
handles("aten.negative.default")(_unary("neg"))
handles("aten.absolute.default")(_unary("abs"))
handles("aten.relu6.default")(_unary("clamp", lo=0.0, hi=6.0))


def _binary(op: str) -> Handler:
    def handle(cx: Ctx, a: dict[str, Any]) -> Value:
        other, alpha = a["other"], a.get("alpha", 1)
        if alpha != 1:
            other = other * alpha if not isinstance(other, Value) else cx.scale(other, alpha)
        return cx.binary(op, a["self"], other)

    return handle


for _op in ("add", "sub", "mul", "div"):
    handles(f"aten.{_op}.Tensor", f"aten.{_op}.Scalar")(_binary(_op))
# the aliases torch.export keeps as written (torch.multiply, torch.subtract, torch.true_divide, ...)
handles("aten.multiply.Tensor")(_binary("mul"))
handles("aten.subtract.Tensor")(_binary("sub"))
handles("aten.divide.Tensor", "aten.true_divide.Tensor")(_binary("div"))
handles("aten.maximum.default", "aten.max.other")(_binary("maximum"))
handles("aten.minimum.default", "aten.min.other")(_binary("minimum"))


@handles("aten.rsub.Tensor", "aten.rsub.Scalar")
def _rsub(cx: Ctx, a: dict[str, Any]) -> Value:  # other - alpha * self
    return cx.binary("sub", a["other"], cx.scale(a["self"], a["alpha"]))


@handles("aten.pow.Tensor_Scalar")
def _pow(cx: Ctx, a: dict[str, Any]) -> Value:
    e = float(a["exponent"])
    return cx.emit("square", a["self"]) if e == 2 else cx.emit("pow", a["self"], exponent=e)


@handles("aten.pow.Scalar")
def _pow_scalar_base(cx: Ctx, a: dict[str, Any]) -> Value:  # base ** x = exp(x * ln(base))
    base = float(a["self"])
    if base <= 0:
        raise cx.unsupported(f"a non-positive base {base} ** tensor has no registry equivalent")
    return cx.emit("exp", cx.scale(a["exponent"], math.log(base)))


def _clamp(lo_key: str | None, hi_key: str | None) -> Handler:
    def handle(cx: Ctx, a: dict[str, Any]) -> Value:
        lo = a[lo_key] if lo_key else None
        hi = a[hi_key] if hi_key else None
        return cx.emit("clamp", a["self"], lo=-math.inf if lo is None else lo, hi=math.inf if hi is None else hi)

    return handle


handles("aten.clamp.default", "aten.clip.default")(_clamp("min", "max"))
handles("aten.clamp_min.default")(_clamp("min", None))
handles("aten.clamp_max.default")(_clamp(None, "max"))
handles("aten.hardtanh.default")(_clamp("min_val", "max_val"))


@handles("aten.clamp_min.Tensor")
def _clamp_min_tensor(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.binary("maximum", a["self"], a["min"])


@handles("aten.clamp_max.Tensor")
def _clamp_max_tensor(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.binary("minimum", a["self"], a["max"])


@handles("aten.elu.default")
def _elu(cx: Ctx, a: dict[str, Any]) -> Value:  # scale * (relu(x) + alpha * (exp(min(x, 0) * s) - 1))
    x = a["self"]
    negative = cx.scale(cx.binary("minimum", x, 0.0), a["input_scale"])
    tail = cx.scale(cx.binary("sub", cx.emit("exp", negative), 1.0), a["alpha"])
    return cx.scale(cx.emit("add", cx.emit("relu", x), tail), a["scale"])


_SELU = {"alpha": 1.6732632423543772848170429916717, "scale": 1.0507009873554804934193349852946, "input_scale": 1.0}


@handles("aten.selu.default")
def _selu(cx: Ctx, a: dict[str, Any]) -> Value:
    return _elu(cx, {**a, **_SELU})


@handles("aten.celu.default")
def _celu(cx: Ctx, a: dict[str, Any]) -> Value:
    return _elu(cx, {**a, "scale": 1.0, "input_scale": 1.0 / a["alpha"]})


@handles("aten.leaky_relu.default")
def _leaky_relu(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.emit("leaky_relu", a["self"], slope=a["negative_slope"])


@handles("aten.gelu.default")
def _gelu(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.emit("gelu", a["self"], approximate=a["approximate"])


@handles("aten.softplus.default")
def _softplus(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.emit("softplus", a["self"], beta=a["beta"], threshold=a["threshold"])


@handles("aten.log_sigmoid.default")
def _log_sigmoid(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.emit("neg", cx.emit("softplus", cx.emit("neg", a["self"]), threshold=math.inf))


@handles("aten.addcmul.default")
def _addcmul(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.binary("add", a["self"], cx.scale(cx.binary("mul", a["tensor1"], a["tensor2"]), a["value"]))


@handles("aten.addcdiv.default")
def _addcdiv(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.binary("add", a["self"], cx.scale(cx.binary("div", a["tensor1"], a["tensor2"]), a["value"]))


@handles("aten.linalg_vector_norm.default")
def _vector_norm(cx: Ctx, a: dict[str, Any]) -> Value:
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


# .to(device=...) / .to(other): devices are the caller's (a kernel runs where its inputs are), so a cast or
# nothing
@handles("aten._to_copy.default", "aten.to.dtype", "aten.type_as.default", "aten.to.dtype_layout", "aten.to.device",
         "aten.to.other")
def _cast(cx: Ctx, a: dict[str, Any]) -> Value:  # the result dtype comes from torch's own metadata
    want = checked_dtype(cx.node.meta["val"].dtype, cx.where)
    x = a["self"]
    return x if x.dtype == want else cx.emit("cast", x, dtype=want)


# -- comparisons, logic, selection ------------------------------------------------------------------
def _compare(op: str) -> Handler:
    return lambda cx, a: cx.binary(op, a["self"], a["other"])


for _op in ("gt", "ge", "lt", "le", "eq", "ne"):
    handles(f"aten.{_op}.Tensor", f"aten.{_op}.Scalar")(_compare(_op))


def _logic(op: str) -> Handler:
    """``logical_and`` / ``or`` / ``xor`` / ``not``: nonzero is true, the result is bool."""
    return lambda cx, a: cx.emit(op, *[cx.lift(x, a["self"]) for x in [a["self"]] + ([a["other"]] if "other" in a else [])])


for _op in ("logical_and", "logical_or", "logical_xor", "logical_not"):
    handles(f"aten.{_op}.default")(_logic(_op))


def _bitwise(op: str, logical: str | None) -> Handler:
    """The bit operations (``&``, ``|``, ``^``, ``~``, ``<<``, ``>>``): on booleans the first four are the
    logical ops (``logical``); on integers the bit operation, a boolean operand promoted to the integer
    dtype and a Python int taking the tensor's; a float operand is refused, as torch does."""
    def handle(cx: Ctx, a: dict[str, Any]) -> Value:
        xs = [a["self"]] + ([a["other"]] if "other" in a else [])
        values = [x for x in xs if isinstance(x, Value)]
        if any(v.dtype.is_float for v in values) or any(isinstance(x, float) for x in xs):
            raise cx.unsupported("bit operations take integer or boolean tensors (torch refuses floats too)")
        if logical and all(v.dtype.kind == "bool" for v in values) and all(isinstance(x, (Value, bool)) for x in xs):
            return cx.emit(logical, *[cx.lift(x, values[0]) for x in xs])
        want = checked_dtype(cx.node.meta["val"].dtype, cx.where)
        if want.kind != "int":
            raise cx.unsupported(f"a bit operation with a {want.name} result")
        ins = [x if isinstance(x, Value) and x.dtype == want else
               cx.emit("cast", x, dtype=want) if isinstance(x, Value) else cx.b.constant(float(x), want) for x in xs]
        return cx.emit(op, *ins)

    return handle


for _op in ("and", "or", "xor"):  # the logical ops on booleans, the bit operations on integers
    handles(*(f"aten.{name}.{o}" for name in (f"__{_op}__", f"bitwise_{_op}") for o in ("Tensor", "Scalar")))(
        _bitwise(f"bitwise_{_op}", f"logical_{_op}"))
handles("aten.bitwise_not.default")(_bitwise("bitwise_not", "logical_not"))
for _way, _short in (("left", "lshift"), ("right", "rshift")):
    handles(f"aten.__{_short}__.Tensor", f"aten.__{_short}__.Scalar", f"aten.bitwise_{_way}_shift.Tensor",
            f"aten.bitwise_{_way}_shift.Tensor_Scalar")(_bitwise(f"bitwise_{_way}_shift", None))


@handles("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar")
def _where(cx: Ctx, a: dict[str, Any]) -> Value:
    """``torch.where(cond, x, y)`` (either of x, y may be a Python number, taking the other's dtype)."""
    cond, x, y = a["condition"], a["self"], a["other"]
    like = x if isinstance(x, Value) else y if isinstance(y, Value) else None
    if like is None:
        dtype = checked_dtype(cx.node.meta["val"].dtype, cx.where)
        x, y = cx.b.constant(float(x), dtype), cx.b.constant(float(y), dtype)
    else:
        x, y = cx.lift(x, like), cx.lift(y, like)
    return cx.emit("where", cond, x, y)


@handles("aten.masked_fill.Scalar", "aten.masked_fill.Tensor")
def _masked_fill(cx: Ctx, a: dict[str, Any]) -> Value:
    x, value = a["self"], a["value"]
    return cx.emit("where", a["mask"], cx.lift(value, x), x)


@handles("aten.clone.default", "aten.contiguous.default", "aten.alias.default", "aten.detach.default",
         "aten.lift_fresh_copy.default")
def _identity(cx: Ctx, a: dict[str, Any]) -> Value:
    return a["self"]


@handles("aten.dropout.default")
def _dropout(cx: Ctx, a: dict[str, Any]) -> Value:
    if a["train"] and a["p"] > 0:
        raise cx.unsupported(f"dropout with p={a['p']} in training mode is random; call module.eval()")
    return a["input"]


# -- matmul --------------------------------------------------------------------------------------
@handles("aten.mm.default", "aten.bmm.default", "aten.matmul.default", "aten.mv.default", contractions=1)
def _matmul(cx: Ctx, a: dict[str, Any]) -> Value:
    x, y = a["self"], a.get("other", a.get("mat2", a.get("vec")))
    x2 = cx.emit("expand_dims", x, axis=0) if x.ndim == 1 else x
    y2 = cx.emit("expand_dims", y, axis=-1) if y.ndim == 1 else y
    out = cx.emit("matmul", x2, y2)
    if y.ndim == 1:
        out = cx.emit("squeeze", out, axes=(-1,))
    if x.ndim == 1:
        out = cx.emit("squeeze", out, axes=(-1 if y.ndim == 1 else -2,))
    return out


@handles("aten.addmm.default", contractions=1)
def _addmm(cx: Ctx, a: dict[str, Any]) -> Value:  # beta * self + alpha * (mat1 @ mat2)
    product = cx.scale(cx.emit("matmul", a["mat1"], a["mat2"]), a["alpha"])
    return cx.emit("add", product, cx.scale(a["self"], a["beta"]))


@handles("aten.linear.default", contractions=1)
def _linear(cx: Ctx, a: dict[str, Any]) -> Value:
    ins = [a["input"], a["weight"]] + ([a["bias"]] if a["bias"] is not None else [])
    return cx.emit("linear", *ins)


# -- layout --------------------------------------------------------------------------------------
@handles("aten.view.default", "aten.reshape.default", "aten._unsafe_view.default", "aten.flatten.using_ints",
         "aten.unflatten.int")
def _reshape(cx: Ctx, a: dict[str, Any]) -> Value:
    x = a["self"]
    return x if x.shape == cx.out_shape else cx.emit("reshape", x, shape=cx.out_shape)


@handles("aten.expand.default", "aten.expand_as.default")
def _expand(cx: Ctx, a: dict[str, Any]) -> Value:
    x = a["self"]
    return x if x.shape == cx.out_shape else cx.emit("broadcast_to", x, shape=cx.out_shape)


def _swap(cx: Ctx, x: Value, d0: int, d1: int) -> Value:
    if x.ndim < 2 or d0 % x.ndim == d1 % x.ndim:
        return x
    perm = list(range(x.ndim))
    perm[d0 % x.ndim], perm[d1 % x.ndim] = perm[d1 % x.ndim], perm[d0 % x.ndim]
    return cx.emit("transpose", x, perm=tuple(perm))


@handles("aten.t.default")
def _t(cx: Ctx, a: dict[str, Any]) -> Value:
    return _swap(cx, a["self"], 0, 1)


@handles("aten.transpose.int")
def _transpose(cx: Ctx, a: dict[str, Any]) -> Value:
    return _swap(cx, a["self"], a["dim0"], a["dim1"])


@handles("aten.permute.default")
def _permute(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.emit("transpose", a["self"], perm=ints(a["dims"]))


@handles("aten.unsqueeze.default")
def _unsqueeze(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.emit("expand_dims", a["self"], axis=a["dim"])


@handles("aten.flip.default")
def _flip(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.emit("flip", a["self"], axes=ints(a["dims"]))


@handles("aten.fliplr.default")
def _fliplr(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.emit("flip", a["self"], axes=(1,))


@handles("aten.flipud.default")
def _flipud(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.emit("flip", a["self"], axes=(0,))


@handles("aten.numpy_T.default")
def _reverse_axes(cx: Ctx, a: dict[str, Any]) -> Value:  # x.T
    x = a["self"]
    return x if x.ndim < 2 else cx.emit("transpose", x, perm=tuple(reversed(range(x.ndim))))


@handles("aten.squeeze.default", "aten.squeeze.dim", "aten.squeeze.dims")
def _squeeze(cx: Ctx, a: dict[str, Any]) -> Value:
    x = a["self"]
    dims = a.get("dim", a.get("dims"))
    candidates = range(x.ndim) if dims is None else [d % max(x.ndim, 1) for d in ints(dims)]
    axes = tuple(sorted({d for d in candidates if x.ndim and x.shape[d] == 1}))  # torch ignores non-1 dims
    return cx.emit("squeeze", x, axes=axes) if axes else x


@handles("aten.slice.Tensor")
def slice_tensor(cx: Ctx, a: dict[str, Any]) -> Value:
    x = a["self"]
    axis = a["dim"] % x.ndim
    size = x.shape[axis]
    start, stop = slice(a["start"], a["end"]).indices(size)[:2]
    if (start, stop, a["step"]) == (0, size, 1):
        return x
    return cx.emit("slice", x, axis=axis, start=start, stop=max(stop, start), step=a["step"])


@handles("aten.narrow.default")
def _narrow(cx: Ctx, a: dict[str, Any]) -> Value:
    x = a["self"]
    axis = a["dim"] % x.ndim
    start = a["start"] % x.shape[axis] if a["start"] < 0 else a["start"]
    return slice_tensor(cx, {"self": x, "dim": axis, "start": start, "end": start + a["length"], "step": 1})


@handles("aten.repeat_interleave.self_int")
def _repeat_interleave(cx: Ctx, a: dict[str, Any]) -> Value:
    """Each element repeated ``repeats`` times in a row along ``dim`` (the flattened tensor without one):
    a size-1 axis after ``dim``, broadcast to ``repeats``, merged into ``dim`` by a reshape. Grouped-query
    attention's head repetition is this, so the νGraph sees a broadcast, not a copy."""
    x, r = a["self"], int(a["repeats"])
    if a.get("dim") is None:
        x = x if x.ndim == 1 else cx.emit("reshape", x, shape=(math.prod(int(d) for d in x.shape),))
        axis = 0
    else:
        axis = a["dim"] % max(x.ndim, 1)
    if r == 1:
        return x
    shape = tuple(int(d) for d in x.shape)
    wide = cx.emit("broadcast_to", cx.emit("expand_dims", x, axis=axis + 1),
                   shape=shape[:axis + 1] + (r,) + shape[axis + 1:])
    return cx.emit("reshape", wide, shape=shape[:axis] + (shape[axis] * r,) + shape[axis + 1:])


@handles("aten.repeat.default")
def _repeat(cx: Ctx, a: dict[str, Any]) -> Value:
    """``x.repeat(*repeats)``: the whole tensor tiled ``repeats[d]`` times along each dim d (leading 1s
    added to ``x``'s shape first): each dim split into (copies, size), the copies broadcast, merged back."""
    x, reps = a["self"], ints(a["repeats"])
    shape = (1,) * (len(reps) - x.ndim) + tuple(int(d) for d in x.shape)
    if all(r == 1 for r in reps):
        return x if len(shape) == x.ndim else cx.emit("reshape", x, shape=shape)
    split = tuple(d for s in shape for d in (1, s))
    wide = cx.emit("broadcast_to", cx.emit("reshape", x, shape=split),
                   shape=tuple(d for r, s in zip(reps, shape) for d in (r, s)))
    return cx.emit("reshape", wide, shape=tuple(r * s for r, s in zip(reps, shape)))


@handles("aten.pad.default", "aten.constant_pad_nd.default")
def _pad(cx: Ctx, a: dict[str, Any]) -> Value:
    """``F.pad``: per axis from the last, a (before, after) pair; a negative amount crops (a slice), a positive
    one concatenates what the mode puts there: the constant ``value`` broadcast, the edge slice broadcast
    (replicate), the mirrored neighbours without the edge (reflect: a flip of a slice) or the other end
    (circular)."""
    x, pads, mode = a["self"], ints(a["pad"]), a.get("mode") or "constant"
    if len(pads) % 2 or len(pads) // 2 > x.ndim:
        raise cx.unsupported(f"pad {list(pads)} must give (before, after) pairs for at most {x.ndim} axes")
    if mode not in ("constant", "replicate", "reflect", "circular"):
        raise cx.unsupported(f"padding mode {mode!r} is not one of constant, replicate, reflect, circular")
    value = float(a.get("value") or 0.0)
    for k in range(len(pads) // 2):
        axis = x.ndim - 1 - k
        before, after = pads[2 * k], pads[2 * k + 1]
        if before < 0 or after < 0:  # crop first
            size = int(x.shape[axis])
            x = slice_tensor(cx, {"self": x, "dim": axis, "start": max(0, -before), "end": size - max(0, -after), "step": 1})
        before, after = max(0, before), max(0, after)
        if not before and not after:
            continue
        size = int(x.shape[axis])
        if mode == "reflect" and (before >= size or after >= size):
            raise cx.unsupported(f"reflect padding of {max(before, after)} on an axis of {size} (torch needs less)")

        def piece(lo: int, hi: int) -> Value:
            return slice_tensor(cx, {"self": x, "dim": axis, "start": lo, "end": hi, "step": 1})

        def side(n: int, first: bool) -> Value:
            shape = tuple(n if d == axis else int(s) for d, s in enumerate(x.shape))
            if mode == "constant":
                return cx.emit("broadcast_to", cx.b.constant(value, x.dtype), shape=shape)
            if mode == "replicate":
                return cx.emit("broadcast_to", piece(0, 1) if first else piece(size - 1, size), shape=shape)
            if mode == "reflect":
                return cx.emit("flip", piece(1, n + 1) if first else piece(size - 1 - n, size - 1), axes=(axis,))
            return piece(size - n, size) if first else piece(0, n)  # circular

        parts = ([side(before, True)] if before else []) + [x] + ([side(after, False)] if after else [])
        x = cx.emit("concat", *parts, axis=axis)
    return x


@handles("aten.tril.default")
def _tril(cx: Ctx, a: dict[str, Any]) -> Value:
    """``torch.tril(x, k)``: ``x[..., i, j]`` where ``j - i <= k``, else 0 (the registry's ``causal_mask``)."""
    x = a["self"]
    return cx.emit("causal_mask", x, diagonal=int(a.get("diagonal", 0)), fill=0.0)


@handles("aten.triu.default")
def _triu(cx: Ctx, a: dict[str, Any]) -> Value:
    """``torch.triu(x, k)``: ``x[..., i, j]`` where ``j - i >= k``, else 0: the lower triangle of the swapped
    last two axes, swapped back (index maps on load, no copies)."""
    x = a["self"]
    return _swap(cx, cx.emit("causal_mask", _swap(cx, x, -2, -1), diagonal=-int(a.get("diagonal", 0)), fill=0.0),
                 -2, -1)


@handles("aten.diag.default")
def _diag(cx: Ctx, a: dict[str, Any]) -> Value:
    """``torch.diag``: a vector ``v`` becomes the square matrix with ``v`` on its diagonal (``v[j]`` broadcast
    over the rows, then both triangles cut away); a matrix gives its diagonal (its leading square, everything
    off the diagonal cut to 0, summed along the rows: each sum has one nonzero term). Offset diagonals are
    refused."""
    x, k = a["self"], int(a.get("diagonal", 0))
    if k != 0:
        raise cx.unsupported(f"diagonal={k}: only the main diagonal (0) is supported")
    if x.ndim == 1:
        n = int(x.shape[0])
        full = cx.emit("broadcast_to", x, shape=(n, n))
    else:
        n = min(int(d) for d in x.shape)
        full = x
        for axis in (0, 1):
            full = slice_tensor(cx, {"self": full, "dim": axis, "start": 0, "end": n, "step": 1})
    band = _triu(cx, {"self": _tril(cx, {"self": full})})
    return band if x.ndim == 1 else cx.emit("sum", band, axes=(1,), keepdims=False)


@handles("aten.einsum.default")
def _einsum(cx: Ctx, a: dict[str, Any]) -> Value:
    """``torch.einsum``, expanded into transposes, reshapes, products, sums and matmuls (``ir.einsum``)."""
    try:
        return expand(a["equation"], list(a["tensors"]), cx.emit)
    except EinsumError as e:
        raise cx.unsupported(str(e)) from None


@handles("aten.select.int")
def _select(cx: Ctx, a: dict[str, Any]) -> Value:
    x = a["self"]
    axis = a["dim"] % x.ndim
    i = a["index"] % x.shape[axis]
    return cx.emit("squeeze", cx.emit("slice", x, axis=axis, start=i, stop=i + 1), axes=(axis,))


# -- reductions ----------------------------------------------------------------------------------
def _reduce(op: str, dim_key: str | None = "dim", values_and_indices: bool = False) -> Handler:
    def handle(cx: Ctx, a: dict[str, Any]) -> Any:
        axes = _axes(a[dim_key]) if dim_key else ()
        keep = bool(a.get("keepdim", False))
        out = cx.emit(op, a["self"], axes=axes, keepdims=keep)
        if not values_and_indices:
            return out
        return out, cx.emit(f"arg{op}", a["self"], axes=axes, keepdims=keep)  # x.max(dim) gives both

    return handle


for _op in ("sum", "mean", "max", "min"):
    handles(f"aten.{_op}.default")(_reduce(_op, None))
handles("aten.sum.dim_IntList")(_reduce("sum"))
handles("aten.mean.dim")(_reduce("mean"))
handles("aten.amax.default")(_reduce("max"))
handles("aten.amin.default")(_reduce("min"))
handles("aten.max.dim")(_reduce("max", values_and_indices=True))
handles("aten.min.dim")(_reduce("min", values_and_indices=True))
handles("aten.logsumexp.default")(_reduce("logsumexp"))


@handles("aten.aminmax.default")
def _aminmax(cx: Ctx, a: dict[str, Any]) -> tuple[Value, Value]:
    return _reduce("min")(cx, a), _reduce("max")(cx, a)


@handles("aten.cumsum.default")
def _cumsum(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.emit("cumsum", a["self"], axis=a["dim"])


@handles("aten.cumprod.default")
def _cumprod(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.emit("cumprod", a["self"], axis=a["dim"])


def _arg_extremum(op: str) -> Handler:
    """``argmax`` / ``argmin`` over one axis, or over the flattened tensor when ``dim`` is None."""
    def handle(cx: Ctx, a: dict[str, Any]) -> Value:
        x, dim, keep = a["self"], a.get("dim"), bool(a.get("keepdim", False))
        if dim is None:
            flat = cx.emit("reshape", x, shape=(math.prod(int(d) for d in x.shape),)) if x.ndim != 1 else x
            out = cx.emit(op, flat, axes=(0,), keepdims=False)
            return cx.emit("reshape", out, shape=(1,) * x.ndim) if keep and x.ndim else out
        return cx.emit(op, x, axes=(int(dim),), keepdims=keep)

    return handle


handles("aten.argmax.default")(_arg_extremum("argmax"))
handles("aten.argmin.default")(_arg_extremum("argmin"))


@handles("aten.gather.default", "aten.take_along_dim.default")
def _gather(cx: Ctx, a: dict[str, Any]) -> Value:
    """``torch.gather`` and ``take_along_dim`` (whose operands broadcast against each other off ``dim``)."""
    x, index, dim = a["self"], a.get("index", a.get("indices")), a["dim"]
    if dim is None:
        return _take_along_flat(cx, a)
    if cx.aten.startswith("aten.take_along_dim"):
        axis = dim % x.ndim
        shape = tuple(max(int(p), int(q)) for p, q in zip(x.shape, index.shape))
        xs = tuple(int(d) if k == axis else shape[k] for k, d in enumerate(x.shape))
        ix = tuple(int(d) if k == axis else shape[k] for k, d in enumerate(index.shape))
        x = x if x.shape == xs else cx.emit("broadcast_to", x, shape=xs)
        index = index if index.shape == ix else cx.emit("broadcast_to", index, shape=ix)
    return cx.emit("gather", x, index, axis=int(dim))


def _take_along_flat(cx: Ctx, a: dict[str, Any]) -> Value:
    """``torch.take_along_dim(x, indices)`` without ``dim``: the flattened x at the flattened indices."""
    x, index = a["self"], a["indices"]
    flat = [v if v.ndim == 1 else cx.emit("reshape", v, shape=(math.prod(int(d) for d in v.shape),)) for v in (x, index)]
    return cx.emit("gather", *flat, axis=0)


@handles("aten.sort.default", "aten.sort.stable")
def _sort(cx: Ctx, a: dict[str, Any]) -> tuple[Value, Value]:
    """``torch.sort`` (values and indices; stable, whatever ``stable`` says: a stable order is one torch may give)."""
    attrs = {"axis": int(a["dim"]), "descending": bool(a["descending"])}
    return cx.emit("sort", a["self"], **attrs), cx.emit("argsort", a["self"], **attrs)


@handles("aten.argsort.default", "aten.argsort.stable")
def _argsort(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.emit("argsort", a["self"], axis=int(a["dim"]), descending=bool(a["descending"]))


@handles("aten.msort.default")
def _msort(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.emit("sort", a["self"], axis=0)


@handles("aten.topk.default")
def _topk(cx: Ctx, a: dict[str, Any]) -> tuple[Value, Value]:
    """``torch.topk`` (values and indices, largest first; ``sorted=False`` leaves the order to torch, and the
    sorted order is one it may give)."""
    x = a["self"]
    if x.ndim == 0:
        raise cx.unsupported("topk of a 0-d tensor (unsqueeze it first)")
    attrs = {"k": int(a["k"]), "axis": int(a["dim"]), "largest": bool(a["largest"])}
    return cx.emit("topk", x, **attrs), cx.emit("topk_indices", x, **attrs)


@handles("aten.index_select.default")
def _index_select(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.emit("index_select", a["self"], a["index"], axis=int(a["dim"]))


@handles("aten.embedding.default")
def _embedding(cx: Ctx, a: dict[str, Any]) -> Value:
    """``F.embedding(indices, weight)``: the weight's rows at the indices, in the indices' shape (padding_idx
    only matters for gradients)."""
    weight, idx = a["weight"], a["indices"]
    flat = idx if idx.ndim == 1 else cx.emit("reshape", idx, shape=(math.prod(int(d) for d in idx.shape),))
    rows = cx.emit("index_select", weight, flat, axis=0)
    return rows if idx.ndim == 1 else cx.emit("reshape", rows, shape=cx.out_shape)


def _variance(cx: Ctx, a: dict[str, Any], sqrt: bool) -> Value:
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


@handles("aten.var.dim", "aten.var.correction")
def _var(cx: Ctx, a: dict[str, Any]) -> Value:
    return _variance(cx, a, False)


@handles("aten.std.dim", "aten.std.correction")
def _std(cx: Ctx, a: dict[str, Any]) -> Value:
    return _variance(cx, a, True)


# -- softmax and normalizations --------------------------------------------------------------------
@handles("aten.softmax.int", "aten._softmax.default")
def _softmax(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.emit("softmax", a["self"], axis=a["dim"])


@handles("aten.log_softmax.int", "aten._log_softmax.default")
def _log_softmax(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.emit("log_softmax", a["self"], axis=a["dim"])


def _channel(cx: Ctx, v: Value, rank: int) -> Value:
    return cx.emit("reshape", v, shape=(v.shape[0],) + (1,) * (rank - 2))


def _with_affine(cx: Ctx, op: str, x: Value, stats: list[Value], weight: Value | None, bias: Value | None,
                 channel_bias: bool, **attrs: Any) -> Value:
    """Emit a norm composite; a bias without a weight is added after it (the composites take weight first)."""
    ins = stats + ([weight] if weight is not None else []) + ([bias] if weight is not None and bias is not None
                                                               else [])
    y = cx.emit(op, x, *ins, **attrs)
    if weight is None and bias is not None:
        y = cx.emit("add", y, _channel(cx, bias, x.ndim) if channel_bias else bias)
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
    centered = cx.emit("sub", x, _channel(cx, mean, x.ndim))
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


# -- joining tensors: cat, stack and the *stack forms ----------------------------------------------
# One concat of every tensor, whatever their number: a concat wider than the νGraph's constructors enters
# it as a balanced tree of concats (Program.nest_wide).
@handles("aten.cat.default")
def _cat(cx: Ctx, a: dict[str, Any]) -> Value:
    return cx.emit("concat", *a["tensors"], axis=a["dim"])


@handles("aten.stack.default")
def _stack(cx: Ctx, a: dict[str, Any]) -> Value:
    """``torch.stack``: each tensor given a size-1 axis at ``dim`` (of the result: -1 is after the last
    axis), then concatenated along it."""
    xs = a["tensors"]
    rank = xs[0].ndim + 1
    if not -rank <= a["dim"] < rank:
        raise cx.unsupported(f"dim {a['dim']} is out of range for stacking tensors of rank {rank - 1}")
    axis = a["dim"] % rank
    return cx.emit("concat", *[cx.emit("expand_dims", x, axis=axis) for x in xs], axis=axis)


def _at_least(cx: Ctx, x: Value, rank: int) -> Value:
    """``torch.atleast_{rank}d``: a 0-d tensor is (1, ...); a 1-d (n,) is (1, n), then (1, n, 1); a 2-d (m, n)
    is (m, n, 1)."""
    if x.ndim >= rank:
        return x
    if x.ndim == 0:
        return cx.emit("reshape", x, shape=(1,) * rank)
    if x.ndim == 1:
        x = cx.emit("expand_dims", x, axis=0)
    return x if x.ndim >= rank else cx.emit("expand_dims", x, axis=2)


def _joined(rank: int, axis: int) -> Handler:
    """``vstack`` / ``row_stack`` (2, 0), ``dstack`` (3, 2), ``hstack`` (1, 1: along axis 0 for 1-d tensors):
    each tensor at least ``rank``-d, concatenated along ``axis``."""
    def handle(cx: Ctx, a: dict[str, Any]) -> Value:
        xs = [_at_least(cx, x, rank) for x in a["tensors"]]
        return cx.emit("concat", *xs, axis=axis if xs[0].ndim > 1 else 0)

    return handle


handles("aten.hstack.default")(_joined(1, 1))
handles("aten.vstack.default", "aten.row_stack.default")(_joined(2, 0))
handles("aten.dstack.default")(_joined(3, 2))


@handles("aten.column_stack.default")
def _column_stack(cx: Ctx, a: dict[str, Any]) -> Value:
    """``torch.column_stack``: 0-d and 1-d tensors as columns (n, 1), the others as they are, along axis 1."""
    xs = [x if x.ndim > 1 else cx.emit("reshape", x, shape=(math.prod(int(d) for d in x.shape), 1))
          for x in a["tensors"]]
    return cx.emit("concat", *xs, axis=1)


# -- multi-output layout -------------------------------------------------------------------------
@handles("aten.broadcast_tensors.default")
def _broadcast_tensors(cx: Ctx, a: dict[str, Any]) -> tuple[Value, ...]:
    """Each tensor broadcast to the common shape (torch's own, from the node's metadata)."""
    out = []
    for x, val in zip(a["tensors"], cx.node.meta["val"]):
        shape = tuple(int(d) for d in val.shape)
        out.append(x if x.shape == shape else cx.emit("broadcast_to", x, shape=shape))
    return tuple(out)


PIECES = tuple(f"aten.{op}" for op in ("chunk.default", "split.Tensor", "split_with_sizes.default",
                                        "tensor_split.sections", "tensor_split.indices", "unbind.int"))
"""The ops that cut a tensor into consecutive pieces along one axis (views; an empty piece is refused where used)."""


@handles(*PIECES)
def _split(cx: Ctx, a: dict[str, Any]) -> tuple[Value, ...]:
    """``chunk``, ``split``, ``split_with_sizes``, ``tensor_split`` and ``unbind``: consecutive slices along
    ``dim``, sized as torch sizes them (the node's metadata), squeezed for ``unbind``; an empty piece is None
    (refused where it is used)."""
    x = a["self"]
    axis = a["dim"] % x.ndim
    squeeze = cx.aten.startswith("aten.unbind")
    out, start = [], 0
    for val in cx.node.meta["val"]:
        size = 1 if squeeze else int(val.shape[axis])
        if size == 0:  # an empty piece: fine unless used (the IR has no empty tensors)
            out.append(None)
            continue
        part = x if (start, size) == (0, x.shape[axis]) else cx.emit(
            "slice", x, axis=axis, start=start, stop=start + size, step=1)
        out.append(cx.emit("squeeze", part, axes=(axis,)) if squeeze else part)
        start += size
    return tuple(out)


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
        terms = logp if weight is None else cx.emit("mul", logp, weight if logp.ndim == 1 else _channel(cx, weight, logp.ndim))
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
        terms = cx.emit("mul", terms, w if x.ndim == 1 else _channel(cx, w, x.ndim))
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
    return _vector_norm(cx, {"self": d, "ord": p, "dim": (-1 % d.ndim,), "keepdim": False})


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


# -- constructors and small forms --------------------------------------------------------------------
def _filled(fill: float | None) -> Handler:
    """``torch.zeros`` / ``ones`` / ``full``, ``x.new_zeros`` / ..., ``zeros_like`` / ``ones_like`` / ``full_like``:
    a constant broadcast to the result's shape."""
    def handle(cx: Ctx, a: dict[str, Any]) -> Value:
        dtype = checked_dtype(cx.node.meta["val"].dtype, cx.where)
        value = cx.b.constant(float(a["fill_value"] if fill is None else fill), dtype)
        return value if not cx.out_shape else cx.emit("broadcast_to", value, shape=cx.out_shape)

    return handle


handles("aten.zeros_like.default", "aten.zeros.default", "aten.new_zeros.default")(_filled(0.0))
handles("aten.ones_like.default", "aten.ones.default", "aten.new_ones.default")(_filled(1.0))
handles("aten.full_like.default", "aten.full.default", "aten.new_full.default")(_filled(None))


@handles("aten.clamp.Tensor")
def _clamp_tensor(cx: Ctx, a: dict[str, Any]) -> Value:
    """``torch.clamp`` with tensor bounds: min(max(x, lo), hi), as torch (the upper bound wins where they cross)."""
    x = a["self"]
    if a.get("min") is not None:
        x = cx.binary("maximum", x, a["min"])
    if a.get("max") is not None:
        x = cx.binary("minimum", x, a["max"])
    return x


@handles("aten.lerp.Scalar", "aten.lerp.Tensor")
def _lerp(cx: Ctx, a: dict[str, Any]) -> Value:
    """``torch.lerp(start, end, weight)``: start + weight * (end - start)."""
    return cx.binary("add", a["self"], cx.binary("mul", a["weight"], cx.binary("sub", a["end"], a["self"])))


@handles("aten.logaddexp.default")
def _logaddexp(cx: Ctx, a: dict[str, Any]) -> Value:
    """``torch.logaddexp``: max + log(1 + exp(-|a - b|)), and a itself where a == b is infinite (as torch)."""
    x, y = a["self"], a["other"]
    top = cx.binary("maximum", x, y)
    gap = cx.emit("neg", cx.emit("abs", cx.binary("sub", x, y)))
    out = cx.binary("add", top, cx.emit("log", cx.binary("add", 1.0, cx.emit("exp", gap))))
    same_inf = cx.emit("logical_and", cx.binary("eq", x, y), cx.binary("eq", cx.emit("abs", x), math.inf))
    return cx.emit("where", same_inf, x, out)


@handles("aten.arange.default", "aten.arange.start", "aten.arange.start_step")
def _arange(cx: Ctx, a: dict[str, Any]) -> Value:
    """``torch.arange`` (a constant of the program: its values become a buffer, as torch.export sees them)."""
    start, end, step = a.get("start", 0), a["end"], a.get("step", 1)
    dtype = checked_dtype(cx.node.meta["val"].dtype, cx.where)
    values = np.arange(start, end, step, dtype=np.float64)
    if not values.size:
        raise cx.unsupported(f"arange({start}, {end}, {step}) is empty; axon_eg has no empty tensors")
    if not dtype.is_float:
        values = np.trunc(values)
    return cx.buffer("arange", values, dtype)


@handles("aten.one_hot.default")
def _one_hot(cx: Ctx, a: dict[str, Any]) -> Value:
    """``F.one_hot(index, num_classes)``: index[..., None] == arange(num_classes), as int64."""
    index, n = a["self"], int(a["num_classes"])
    if n < 1:
        raise cx.unsupported("one_hot needs num_classes given (it cannot be read from the values)")
    classes = cx.buffer("classes", np.arange(n, dtype=np.float64), index.dtype)
    hot = cx.emit("eq", cx.emit("expand_dims", index, axis=index.ndim), classes)
    return cx.emit("cast", hot, dtype=checked_dtype(cx.node.meta["val"].dtype, cx.where))


# -- recurrent cells ---------------------------------------------------------------------------------
def _gates(cx: Ctx, a: dict[str, Any], h: Value, count: int) -> tuple[list[Value], list[Value]]:
    """The input's and the hidden state's gate pre-activations, ``linear(input, w_ih, b_ih)`` and
    ``linear(h, w_hh, b_hh)``, each cut into ``count`` equal pieces along the last axis (torch's chunk)."""
    out = []
    for x, w, b in ((a["input"], a["w_ih"], a["b_ih"]), (h, a["w_hh"], a["b_hh"])):
        y = cx.emit("linear", x, w, *([b] if b is not None else []))
        width = int(y.shape[-1]) // count
        out.append([slice_tensor(cx, {"self": y, "dim": -1, "start": k * width, "end": (k + 1) * width, "step": 1})
                    for k in range(count)])
    return out[0], out[1]


@handles("aten.lstm_cell.default", contractions=2)
def _lstm_cell(cx: Ctx, a: dict[str, Any]) -> tuple[Value, Value]:
    """``aten.lstm_cell`` as torch computes it: gates = the two linears added, cut into input, forget, cell
    and output gates; c' = sigmoid(f) c + sigmoid(i) tanh(g), h' = sigmoid(o) tanh(c')."""
    h, c = a["hx"]
    xs, hs = _gates(cx, a, h, 4)
    i, f, g, o = (cx.emit("add", p, q) for p, q in zip(xs, hs))
    c_new = cx.emit("add", cx.emit("mul", cx.emit("sigmoid", f), c),
                    cx.emit("mul", cx.emit("sigmoid", i), cx.emit("tanh", g)))
    return cx.emit("mul", cx.emit("sigmoid", o), cx.emit("tanh", c_new)), c_new


@handles("aten.gru_cell.default", contractions=2)
def _gru_cell(cx: Ctx, a: dict[str, Any]) -> Value:
    """``aten.gru_cell`` as torch computes it: r = sigmoid(h_r + x_r), z = sigmoid(h_z + x_z),
    n = tanh(x_n + h_n r), h' = (h - n) z + n."""
    h = a["hx"]
    (xr, xz, xn), (hr, hz, hn) = _gates(cx, a, h, 3)
    r = cx.emit("sigmoid", cx.emit("add", hr, xr))
    z = cx.emit("sigmoid", cx.emit("add", hz, xz))
    n = cx.emit("tanh", cx.emit("add", xn, cx.emit("mul", hn, r)))
    return cx.emit("add", cx.emit("mul", cx.emit("sub", h, n), z), n)


def _rnn_cell(activation: str) -> Handler:
    """``aten.rnn_tanh_cell`` / ``rnn_relu_cell``: activation(linear(input, w_ih, b_ih) + linear(h, w_hh, b_hh))."""
    def handle(cx: Ctx, a: dict[str, Any]) -> Value:
        (x,), (h,) = _gates(cx, a, a["hx"], 1)
        return cx.emit(activation, cx.emit("add", x, h))

    return handle


handles("aten.rnn_tanh_cell.default", contractions=2)(_rnn_cell("tanh"))
handles("aten.rnn_relu_cell.default", contractions=2)(_rnn_cell("relu"))
