"""How each supported aten op becomes registry ops (part of the PyTorch front end, :mod:`axon_eg.ir.torch_import`).

A handler takes a :class:`Ctx` (the builder, the aten op's name, its fx node and the user's source line)
and the op's arguments bound to its schema names, and returns the Value(s) it computes. Each handler names the
aten overloads it handles where it is defined, with :func:`handles`, which adds them to ``ATEN``: THE table of
the front end (read it through :mod:`axon_eg.ir.aten_table`, which imports every module of handlers, this one,
:mod:`~axon_eg.ir.aten_layout`, :mod:`~axon_eg.ir.aten_nn`, :mod:`~axon_eg.ir.aten_losses` and
:mod:`~axon_eg.ir.aten_indexing`, so that the table is whole wherever it is read). Here: the handlers' context and
decorator, element-wise ops, comparisons and selection, matmul, slicing, reductions, constructors and the
recurrent cells.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import torch
from torch.fx.node import Node

from axon_eg.errors import DtypeError, UnsupportedOperation
from axon_eg.ir.builder import Builder, Value
from axon_eg.ir.dtypes import DType, as_dtype


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
def vector_norm(cx: Ctx, a: dict[str, Any]) -> Value:
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


# -- slicing (the layout handlers are in aten_layout; the pooling and recurrent cells here slice too) ------
@handles("aten.slice.Tensor")
def slice_tensor(cx: Ctx, a: dict[str, Any]) -> Value:
    x = a["self"]
    axis = a["dim"] % x.ndim
    size = x.shape[axis]
    start, stop = slice(a["start"], a["end"]).indices(size)[:2]
    if (start, stop, a["step"]) == (0, size, 1):
        return x
    return cx.emit("slice", x, axis=axis, start=start, stop=max(stop, start), step=a["step"])


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
