"""The NumPy-like front end: ``@ax.program`` traces a Python function into a Program.

    import axon_eg as ax

    @ax.program(M=4096, N=4096)
    def rmsnorm(x: ax.Tensor["M", "N", ax.bf16], w: ax.Tensor["N", ax.bf16]):
        return x * ax.rsqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6) * w

Every registry op is exposed as a function of this module (``ax.exp``, ``ax.softmax``, ``ax.conv2d``,
...), generated from the registry rather than listed here. Errors name the op, the shapes and the
user's source line.

The dtype of an annotation may also be a string naming one (``ax.Tensor["M", "N", "bf16"]``; the names
of ``dtypes.DTYPE_NAMES``, which are therefore never dim names) or a torch/NumPy dtype; a misplaced or
unsupported one (``"int32"``) is an error naming it. ``ax.NAME`` that does not exist raises
``errors.UnknownName`` (an AttributeError) with what was probably meant: ``ax.softmaxx`` -> ``ax.softmax``.
"""

from __future__ import annotations

import difflib
import inspect
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from axon_eg.errors import AxonError, DtypeError, ProgramError, ShapeError, UnknownName
from axon_eg.ir import dims as D
from axon_eg.ir import ops as O
from axon_eg.ir.builder import Builder, Value
from axon_eg.ir.dims import Dim, Shape
from axon_eg.ir.dtypes import ALIASES, DTYPE_NAMES, DTYPES, DType, as_dtype, fp32, names_other_dtype
from axon_eg.ir.program import Program

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def user_location() -> str | None:
    """``file:line`` of the innermost caller outside the axon_eg package."""
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_PACKAGE_DIR + os.sep):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None


# ------------------------------------------------------------------------------------------------
# Annotations: ax.Tensor["M", "K", ax.bf16]
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TensorSpec:
    shape: Shape
    dtype: DType

    def __repr__(self) -> str:
        return f"ax.Tensor[{', '.join(repr(str(d)) for d in self.shape)}, ax.{self.dtype}]"


class Tensor:
    """Annotation factory: ``Tensor["M", "K", ax.bf16]`` (dims are names, ints or expressions like
    ``"H*D"``; the dtype comes last and defaults to fp32). At trace time arguments are ``Traced``.

    The dtype may be written ``ax.bf16``, ``torch.bfloat16`` or as a string naming one (``"bf16"``,
    ``"bfloat16"``; see ``dtypes.DTYPE_NAMES``); those strings are never dim names. A dtype anywhere but
    last, two dtypes, or a dtype axon_eg does not handle (``"int32"``, ``torch.bool``) is an error naming it."""

    def __class_getitem__(cls, item: Any) -> TensorSpec:
        items = list(item) if isinstance(item, tuple) else [item]
        where = f"ax.Tensor[{', '.join(_show(i) for i in items)}]"
        loc = user_location()
        at = f"{loc}: {where}" if loc else where
        dtype, explicit = fp32, bool(items) and _dtype_like(items[-1])
        if items and not explicit:
            _not_a_misspelled_dtype(items[-1], at)
        if explicit:
            dtype = _annotation_dtype(items.pop(), at)
        for d in items:
            if _dtype_like(d):
                _annotation_dtype(d, at)  # an unsupported one is named as such first
                raise ProgramError(f"{at}: two dtypes ({_show(d)} and ax.{dtype}); give one, last" if explicit
                                   else f"{at}: the dtype {_show(d)} must come last, after the dims")
        try:
            shape = tuple(D.as_dim(d) for d in items)
        except ShapeError as e:
            raise ShapeError(f"{at}: {e}") from None
        return TensorSpec(shape, dtype)


def _not_a_misspelled_dtype(x: Any, at: str) -> None:
    """A last item that reads like a misspelled dtype name (``"bf61"``, ``"fp23"``, ``"flaot32"``, ``"doubel"``)
    is refused, suggesting the dtype, rather than taken for a dim: letters then digits within one or two edits
    of a dtype name, or a word of five letters or more nearly equal to one."""
    if not isinstance(x, str):
        return
    if re.fullmatch(r"[A-Za-z_]+\d+", x):
        names, cutoff = [n for n in DTYPE_NAMES if any(c.isdigit() for c in n)], 0.75
    elif re.fullmatch(r"[A-Za-z_]{5,}", x):
        names, cutoff = sorted(DTYPE_NAMES), 0.8
    else:
        return
    swapped = [n for n in sorted(names) if sorted(n) == sorted(x.lower())]  # "fp61": fp16 (swapped), not fp64
    close = swapped[:1] or difflib.get_close_matches(x.lower(), sorted(names), n=1, cutoff=cutoff)
    if close:
        raise DtypeError(f"{at}: {x!r} is not a dtype: did you mean {close[0]!r}? (a dim named this close to a "
                         f"dtype is refused too: name it otherwise)")


def _show(x: Any) -> str:
    return repr(x) if isinstance(x, str) else f"ax.{x}" if isinstance(x, DType) else str(x)


def _dtype_like(x: Any) -> bool:
    """A dtype, handled or not: a DType, a dtype name, a torch dtype, a NumPy dtype or scalar type."""
    if isinstance(x, str):
        return x in DTYPE_NAMES or names_other_dtype(x)
    if isinstance(x, DType):
        return True
    import numpy as np

    if isinstance(x, np.dtype) or (isinstance(x, type) and issubclass(x, np.generic)):
        return True
    return type(x).__module__ == "torch" and type(x).__name__ == "dtype"


def _annotation_dtype(x: Any, at: str) -> DType:
    try:
        return as_dtype(x)
    except DtypeError:
        raise DtypeError(f"{at}: {_show(x)} is not a dtype axon_eg handles; the dtypes are "
                         f"{', '.join(repr(d) for d in DTYPES.values())}") from None


# ------------------------------------------------------------------------------------------------
# Traced values
# ------------------------------------------------------------------------------------------------
def _emit(op: str, *inputs: Value, **attrs: Any) -> Traced:
    b = inputs[0].builder if inputs else None
    assert b is not None
    with b.at(user_location()):
        return b.emit(op, *inputs, **attrs)  # type: ignore[return-value]


def _lift(x: Any, like: Traced) -> Traced:
    """Tensors pass through; Python numbers become constants of the other operand's dtype."""
    if isinstance(x, Traced):
        return x
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return like.builder.constant(float(x), like.dtype)  # type: ignore[return-value]
    raise TypeError(f"cannot combine a tensor with {type(x).__name__} {x!r}")


def _axes(axis: int | Sequence[int] | None) -> tuple[int, ...]:
    if axis is None:
        return ()
    return (axis,) if isinstance(axis, int) else tuple(axis)


class Traced(Value):
    """A symbolic tensor during tracing, with NumPy-style operators."""

    __slots__ = ()
    __array_priority__ = 1000

    # arithmetic
    def _bin(self, op: str, other: Any, reverse: bool = False) -> Traced:
        o = _lift(other, self)
        return _emit(op, o, self) if reverse else _emit(op, self, o)

    def __add__(self, o: Any) -> Traced: return self._bin("add", o)
    def __radd__(self, o: Any) -> Traced: return self._bin("add", o, True)
    def __sub__(self, o: Any) -> Traced: return self._bin("sub", o)
    def __rsub__(self, o: Any) -> Traced: return self._bin("sub", o, True)
    def __mul__(self, o: Any) -> Traced: return self._bin("mul", o)
    def __rmul__(self, o: Any) -> Traced: return self._bin("mul", o, True)
    def __truediv__(self, o: Any) -> Traced: return self._bin("div", o)
    def __rtruediv__(self, o: Any) -> Traced: return self._bin("div", o, True)
    def __matmul__(self, o: Any) -> Traced: return self._bin("matmul", o)
    def __rmatmul__(self, o: Any) -> Traced: return self._bin("matmul", o, True)
    def __neg__(self) -> Traced: return _emit("neg", self)
    def __pos__(self) -> Traced: return self
    def __abs__(self) -> Traced: return _emit("abs", self)

    def __pow__(self, exponent: float) -> Traced:
        if isinstance(exponent, (int, float)) and not isinstance(exponent, bool):
            return _emit("square", self) if exponent == 2 else _emit("pow", self, exponent=float(exponent))
        raise TypeError("only constant exponents are supported: x ** 2.0")

    def __bool__(self) -> bool:
        raise TypeError("a traced tensor has no truth value (data-dependent control flow is not traced)")

    # reductions
    def sum(self, axis: Any = None, keepdims: bool = False) -> Traced:
        return _emit("sum", self, axes=_axes(axis), keepdims=keepdims)

    def mean(self, axis: Any = None, keepdims: bool = False) -> Traced:
        return _emit("mean", self, axes=_axes(axis), keepdims=keepdims)

    def max(self, axis: Any = None, keepdims: bool = False) -> Traced:
        return _emit("max", self, axes=_axes(axis), keepdims=keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> Traced:
        return _emit("min", self, axes=_axes(axis), keepdims=keepdims)

    def cumsum(self, axis: int) -> Traced:
        return _emit("cumsum", self, axis=axis)

    # layout
    @property
    def T(self) -> Traced:
        return self.transpose()

    @property
    def mT(self) -> Traced:
        return swapaxes(self, -1, -2)

    def transpose(self, *perm: int | Sequence[int]) -> Traced:
        return transpose(self, perm[0] if len(perm) == 1 and not isinstance(perm[0], int) else (perm or None))

    def reshape(self, *shape: Any) -> Traced:
        return reshape(self, shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape)

    def astype(self, dtype: Any) -> Traced:
        return _emit("cast", self, dtype=as_dtype(dtype))

    def __getitem__(self, index: Any) -> Traced:
        return _getitem(self, index)


# ------------------------------------------------------------------------------------------------
# NumPy-style helpers with conveniences the registry's attribute names do not give
# ------------------------------------------------------------------------------------------------
def transpose(x: Traced, axes: Sequence[int] | None = None) -> Traced:
    perm = tuple(reversed(range(x.ndim))) if axes is None else tuple(axes)
    return _emit("transpose", x, perm=perm)


def swapaxes(x: Traced, a: int, b: int) -> Traced:
    perm = list(range(x.ndim))
    a, b = a % x.ndim, b % x.ndim
    perm[a], perm[b] = perm[b], perm[a]
    return _emit("transpose", x, perm=tuple(perm))


def reshape(x: Traced, shape: Sequence[Any]) -> Traced:
    target: list[Dim | None] = [None if (isinstance(d, int) and d == -1) else D.as_dim(d) for d in shape]
    where = f"reshape({D.format_shape(x.shape)}) at {user_location()}"
    if target.count(None) > 1:
        raise ShapeError(f"{where}: at most one -1 in {list(shape)}")
    if None in target:
        known = D.product([d for d in target if d is not None])
        total = D.product(x.shape)
        missing = D.floordiv(total, known)
        if D.mul(missing, known) != total:
            raise ShapeError(f"{where}: cannot reshape {D.format_shape(x.shape)} to {list(shape)}: "
                             f"{total} is not a multiple of {known}")
        target[target.index(None)] = missing
    return _emit("reshape", x, shape=tuple(target))


def concat(xs: Sequence[Traced], axis: int = 0) -> Traced:
    return _emit("concat", *xs, axis=axis)


concatenate = concat


def expand_dims(x: Traced, axis: int) -> Traced:
    return _emit("expand_dims", x, axis=axis)


def squeeze(x: Traced, axis: int | Sequence[int] | None = None) -> Traced:
    return _emit("squeeze", x, axes=_axes(axis))


def broadcast_to(x: Traced, shape: Sequence[Any]) -> Traced:
    return _emit("broadcast_to", x, shape=tuple(shape))


def hardtanh(x: Traced, min_val: float = -1.0, max_val: float = 1.0) -> Traced:
    return _emit("clamp", x, lo=min_val, hi=max_val)


def _getitem(x: Traced, index: Any) -> Traced:
    items = list(index) if isinstance(index, tuple) else [index]
    if sum(1 for i in items if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis")
    consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
    if consumed > x.ndim:
        raise IndexError(f"too many indices for {D.format_shape(x.shape)}")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at:at + 1] = [slice(None)] * (x.ndim - consumed)
    items += [slice(None)] * (x.ndim - consumed - sum(1 for i in items if i is Ellipsis))
    out, axis, drop = x, 0, []
    for item in items:
        if item is None:
            out = _emit("expand_dims", out, axis=axis)
            axis += 1
        elif isinstance(item, slice):
            if item != slice(None) and item != slice(None, None, 1):
                out = _emit("slice", out, axis=axis, start=item.start if item.start is not None else 0,
                            stop=item.stop, step=item.step or 1)
            axis += 1
        elif isinstance(item, int) and not isinstance(item, bool):
            size = out.shape[axis]
            start = item if item >= 0 else D.add(size, item)
            out = _emit("slice", out, axis=axis, start=start, stop=D.add(start, 1), step=1)
            drop.append(axis)
            axis += 1
        else:
            raise IndexError(f"unsupported index {item!r}: use ints, slices, None and ...")
    return _emit("squeeze", out, axes=tuple(drop)) if drop else out


# ------------------------------------------------------------------------------------------------
# Functions generated from the registry
# ------------------------------------------------------------------------------------------------
def _make_function(op: O.OpDef) -> Callable[..., Traced]:
    attr_names = [a.name for a in op.attrs]
    max_inputs = op.arity[1]

    def fn(*args: Any, **kwargs: Any) -> Traced:
        if op.kind is O.OpKind.REDUCE and "axis" in kwargs:
            kwargs["axes"] = _axes(kwargs.pop("axis"))
        tensors = [a for a in args if isinstance(a, Traced)]
        if not tensors:
            raise TypeError(f"ax.{op.name} needs at least one traced tensor argument")
        inputs: list[Traced] = []
        rest = list(args)
        # leading positional args are tensor inputs (numbers lifted to constants for n-ary ops)
        while rest and (max_inputs is None or len(inputs) < max_inputs):
            a = rest[0]
            if isinstance(a, Traced) or (op.arity[0] > len(inputs) and isinstance(a, (int, float))):
                inputs.append(_lift(a, tensors[0]))
                rest.pop(0)
            elif a is None and len(inputs) >= op.arity[0]:  # an absent optional input (bias=None)
                rest.pop(0)
            else:
                break
        # remaining positional args fill attributes in declaration order
        for name, value in zip(attr_names, rest):
            if name in kwargs:
                raise TypeError(f"ax.{op.name}: {name} given twice")
            kwargs[name] = value
        if len(rest) > len(attr_names):
            raise TypeError(f"ax.{op.name}: too many arguments")
        for name in list(kwargs):  # optional tensor inputs given by keyword (weight=..., bias=...)
            if name in op.inputs and name not in attr_names:
                value = kwargs.pop(name)
                if value is not None:
                    position = op.inputs.index(name)
                    if position != len(inputs):
                        raise TypeError(f"ax.{op.name}: {name} given without the inputs before it")
                    inputs.append(_lift(value, tensors[0]))
        return _emit(op.name, *inputs, **kwargs)

    fn.__name__ = fn.__qualname__ = op.name
    ins = ", ".join(op.inputs)
    attrs = ", ".join(f"{a.name}" + ("" if a.required else f"={a.default!r}") for a in op.attrs)
    fn.__doc__ = f"ax.{op.name}({ins}{', ' if attrs else ''}{attrs}): {op.doc}"
    return fn


# Kept out of this module's globals: several (sum, max, min, abs, pow, slice) would shadow builtins.
_generated = {op.name: _make_function(op) for op in O.all_ops() if op.kind is not O.OpKind.SOURCE}


def __getattr__(name: str) -> Callable[..., Traced]:
    try:
        return _generated[name]
    except KeyError:
        pass
    if name.startswith("__"):  # protocol probes (__path__, __wrapped__, ...): the plain error, quickly
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    raise unknown_name(name, sorted(set(__all__) | set(globals())))


def unknown_name(name: str, known: Sequence[str]) -> UnknownName:
    """The error for ``ax.NAME`` that does not exist: the user's line, then what was probably meant."""
    loc = user_location()
    head = f"{loc}: ax.{name}" if loc else f"ax.{name}"
    dtypes = ", ".join(repr(d) for d in DTYPES.values())
    if name in ALIASES:
        return UnknownName(f"{head} does not exist; did you mean ax.{ALIASES[name]}? (the dtypes are {dtypes})")
    if names_other_dtype(name):
        return UnknownName(f"{head} does not exist: axon_eg has no {name} dtype; the dtypes are {dtypes}")
    public = [k for k in known if not k.startswith("_")]
    close = [k for k in public if k.lower() == name.lower()] or difflib.get_close_matches(name, public, n=3, cutoff=0.6)
    names = [f"ax.{c}" for c in close]
    hint = (f"did you mean {', '.join(names[:-1])} or {names[-1]}?" if len(names) > 1 else f"did you mean {names[0]}?")\
        if names else "`axon-eg ops` lists the ops, and the dtypes are " + dtypes
    return UnknownName(f"{head} does not exist; {hint}")


# ------------------------------------------------------------------------------------------------
# The decorator
# ------------------------------------------------------------------------------------------------
def _trace(fn: Callable[..., Any], name: str | None, sizes: dict[str, int], scope: dict[str, Any]) -> Program:
    try:  # string annotations (from __future__ import annotations) may name the caller's locals
        annotations = inspect.get_annotations(fn, eval_str=True, locals=scope)
    except AxonError:  # an ax.Tensor[...] that is wrong, or an unknown ax.NAME: already names itself
        raise
    except Exception as e:  # noqa: BLE001 - report which annotation failed
        raise ProgramError(f"{fn.__qualname__}: cannot evaluate its annotations: {e}") from None
    b = Builder(name or fn.__name__, value_type=Traced)
    args = []
    for pname in inspect.signature(fn).parameters:
        spec = annotations.get(pname)
        if not isinstance(spec, TensorSpec):
            raise ProgramError(f"{fn.__qualname__}: parameter {pname!r} needs an annotation like "
                               f"ax.Tensor['M', 'K', ax.bf16], got {spec!r}")
        args.append(b.input(pname, spec.shape, spec.dtype))
    result = fn(*args)
    outputs = list(result) if isinstance(result, (tuple, list)) else [result]
    for o in outputs:
        if not isinstance(o, Traced):
            raise ProgramError(f"{fn.__qualname__} must return traced tensors, got {type(o).__name__}")
    return b.build(outputs, dims=sizes or None)


def program(fn: Callable[..., Any] | None = None, /, *, name: str | None = None, **sizes: int) -> Any:
    """Trace ``fn`` into a Program; keyword arguments bind dims (``@ax.program(M=4096)``)."""
    scope = dict(sys._getframe(1).f_locals)
    if fn is not None:
        return _trace(fn, name, sizes, scope)
    return lambda f: _trace(f, name, sizes, scope)


__all__ = sorted(
    {"program", "Tensor", "TensorSpec", "Traced", "transpose", "swapaxes", "reshape", "concat", "concatenate",
     "expand_dims", "squeeze", "broadcast_to", "hardtanh", "bf16", "fp16", "fp32", "fp64", "user_location"}
    | set(_generated)
)
