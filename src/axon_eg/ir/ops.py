"""THE operator registry: every op axon_eg knows is declared here exactly once.

An :class:`OpDef` carries the op's attributes (validated), its shape rule over symbolic dims, its
dtype rule, its float64 NumPy reference and, for composites, its expansion into primitives. Later
stages (Z3 semantics, egglog sorts, backend lowerings) look ops up here by name; no other module
keeps a list of ops. Composite and library ops are declared in :mod:`axon_eg.ir.composites` and
:mod:`axon_eg.ir.library_ops`, which register into this same table.

This module is longer than the others by design: the registry is one table, and each op's entry (its
attributes, rules, reference and facts) reads best next to the others. The per-op facts other stages
read (``FACTS``: views, reduction identities, positivity, Trainium activations, ...) are declared,
typed and checked here too, with group helpers (:func:`views`, :func:`reductions`, :func:`identity`,
:func:`activations`, ...) so that no other module restates which ops have them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from axon_eg.errors import DtypeError, InvalidAttribute, ShapeError, UnknownOperation
from axon_eg.ir import dims as D
from axon_eg.ir.dims import Dim, Shape
from axon_eg.ir.dtypes import DType, as_dtype, bool_, fp32, int64, promote


class OpKind(str, Enum):
    SOURCE = "source"  # input, constant
    ELEMENTWISE = "elementwise"  # unary and binary maps, with NumPy broadcasting
    REDUCE = "reduce"  # sum, mean, max, min, logsumexp over axes
    SCAN = "scan"  # cumsum
    CONTRACTION = "contraction"  # matmul (batched, broadcast batch dims)
    LAYOUT = "layout"  # transpose, reshape, broadcast_to, expand_dims, squeeze, slice, concat
    COMPOSITE = "composite"  # expands into the primitives above
    LIBRARY = "library"  # opaque: conv, pool (reference through torch)


# --------------------------------------------------------------------------------------------
# Attributes
# --------------------------------------------------------------------------------------------
_REQUIRED = object()


@dataclass(frozen=True)
class Attr:
    """One attribute of an op. ``kind`` is one of: int, float, bool, str, ints, dim, dims, dtype,
    or ``optional_<kind>`` (None allowed)."""

    name: str
    kind: str
    default: Any = _REQUIRED
    choices: tuple | None = None

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    def coerce(self, op: str, value: Any) -> Any:
        bad = InvalidAttribute(
            f"{op}: attribute {self.name!r} must be {self.kind}"
            + (f" in {self.choices}" if self.choices else "")
            + f", got {value!r}"
        )
        k = self.kind
        if k.startswith("optional_"):
            if value is None:
                return None
            k = k.removeprefix("optional_")
        if k == "int":
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise bad
            value = int(value)
        elif k == "float":
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
                raise bad
            value = float(value)
            if math.isnan(value):
                raise bad
        elif k == "bool":
            if not isinstance(value, (bool, np.bool_)):
                raise bad
            value = bool(value)
        elif k == "str":
            if not isinstance(value, str):
                raise bad
        elif k == "ints":
            if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
                value = (int(value),)
            if not isinstance(value, (tuple, list)) or any(
                isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in value
            ):
                raise bad
            value = tuple(int(v) for v in value)
        elif k == "dim":
            if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
                return int(value)  # may be negative before canon (slice bounds from the end)
            try:
                value = D.as_dim(value)
            except ShapeError:
                raise bad from None
        elif k == "dims":
            if not isinstance(value, (tuple, list)):
                raise bad
            try:
                value = tuple(D.as_dim(v) for v in value)
            except ShapeError:
                raise bad from None
        elif k == "dtype":
            value = as_dtype(value)
        else:  # pragma: no cover - a registry bug, caught by the registry test
            raise AssertionError(f"unknown attribute kind {self.kind}")
        if self.choices is not None and value not in self.choices:
            raise bad
        return value


def _signed(v: Any) -> Any:
    """``v`` with each float paired with its sign, so that equality tells 0.0 from -0.0."""
    if isinstance(v, float):
        return (v, math.copysign(1.0, v))
    return tuple(_signed(x) for x in v) if isinstance(v, tuple) else v


class Attrs(Mapping[str, Any]):
    """Immutable, hashable attribute values of one node, in the op's declaration order."""

    __slots__ = ("_items", "_key", "_hash")

    def __init__(self, items: tuple[tuple[str, Any], ...] = ()):
        self._items = tuple(items)
        self._key = _signed(self._items)  # 0.0 == -0.0 in Python, but not in the reference: 1/-0.0 = -inf
        self._hash = hash(self._key)

    def __getitem__(self, key: str) -> Any:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Attrs) and self._key == other._key

    def replace(self, **changes: Any) -> Attrs:
        return Attrs(tuple((k, changes.get(k, v)) for k, v in self._items))

    def __repr__(self) -> str:
        return "Attrs(" + ", ".join(f"{k}={v!r}" for k, v in self._items) + ")"


# --------------------------------------------------------------------------------------------
# Op definitions
# --------------------------------------------------------------------------------------------
ShapeRule = Callable[[tuple[Shape, ...], Attrs], Shape]
DtypeRule = Callable[[tuple[DType, ...], Attrs], DType]
Reference = Callable[[tuple[np.ndarray, ...], Attrs], np.ndarray]
Canon = Callable[[tuple[Shape, ...], Attrs], Attrs]


@dataclass(frozen=True)
class OpDef:
    """Everything the system knows about one operator."""

    name: str
    kind: OpKind
    arity: tuple[int, int | None]  # (min, max) number of tensor inputs; max None = variadic
    shape: ShapeRule
    dtype: DtypeRule
    reference: Reference
    attrs: tuple[Attr, ...] = ()
    canon: Canon | None = None  # normalizes attrs given the input shapes (negative axes, ...)
    expand: Callable[..., Any] | None = None  # composites: (builder, *inputs, **attrs) -> value
    accumulates: bool = False  # reduces many products/terms: accumulate in fp32 for 16-bit inputs
    inputs: tuple[str, ...] = ()  # names of the tensor inputs, for messages and docs
    doc: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)  # per-op facts other stages read: see FACTS

    def make_attrs(self, values: Mapping[str, Any]) -> Attrs:
        known = {a.name for a in self.attrs}
        unknown = sorted(set(values) - known)
        if unknown:
            raise InvalidAttribute(
                f"{self.name}: unknown attribute {unknown[0]!r}; it takes {sorted(known) or 'none'}"
            )
        items = []
        for a in self.attrs:
            if a.name in values:
                items.append((a.name, a.coerce(self.name, values[a.name])))
            elif a.required:
                raise InvalidAttribute(f"{self.name}: missing required attribute {a.name!r}")
            else:
                items.append((a.name, a.default))
        return Attrs(tuple(items))

    def check_arity(self, n: int) -> None:
        lo, hi = self.arity
        if n < lo or (hi is not None and n > hi):
            want = f"{lo}" if lo == hi else f"{lo}..{hi if hi is not None else 'n'}"
            raise InvalidAttribute(f"{self.name}: takes {want} tensor inputs, got {n}")


REGISTRY: dict[str, OpDef] = {}

FACTS: dict[str, tuple[type, str]] = {
    "arity": (int, "element-wise ops: the number of tensor inputs (1, 2, or 3 for where)"),
    "logical": (bool, "a comparison, a logical or bitwise op or where: boolean (or integer bit) results or a boolean "
                      "operand, outside rule discovery"),
    "indices": (bool, "returns integer indices (argmax, argmin) or reads them (gather, index_select): no element "
                      "semantics (data-dependent), outside rule discovery and the random float programs"),
    "opaque": (bool, "the prover has no normal form for it (cumprod: a product over a prefix; bit operations): an "
                     "uninterpreted function of its inputs, as library ops, outside rule discovery and the random "
                     "programs the prover is tested on"),
    "commutative": (bool, "a binary op with f(x, y) == f(y, x)"),
    "steps": (bool, "the value jumps (rounding, sign, comparisons, indices of extremes): a kernel computing its "
                    "operand in fp32 may land on the other side of a step than the float64 reference, at isolated "
                    "elements (the harness's STEP_FRACTION)"),
    "index_dependent": (bool, "the value depends on the element's index, not only on input values (causal_mask)"),
    "positive_inputs": (tuple, "input slots that must be positive (>= 0 for sqrt) for a finite reference"),
    "nonzero_inputs": (tuple, "input slots that are denominators (pow's, for a negative exponent, is by attribute)"),
    "shape_family": (str, "how the output shape follows from the inputs (see shape_family)"),
    "spatial": (int, "library ops: the number of spatial axes"),
    "view": (bool, "moves no data: its consumer reads the input through an index map (no kernel of its own)"),
    "flat_view": (bool, "a view that keeps the row-major element order: the flat buffer is the input's"),
    "identity": (float, "a reduction folded with one binary op: that op's neutral element (the masked-lane fill)"),
    "preserves_positive": (bool, "every output element is an input element or a sum of them: positive in, positive out"),
    "activation": (bool, "a transcendental function: Trainium's Scalar (activation) engine computes it"),
    "nestable": (bool, "a variadic op equal, exactly, to itself over consecutive groups of its inputs with the same "
                       "attributes (concat: no arithmetic, no rounding): a node wider than a consumer takes becomes "
                       "a balanced tree of it (Program.nest_wide)"),
}
"""The facts an op's ``meta`` may declare: key -> (type, meaning). ``register`` rejects any other key or
a value of another type; the group helpers below (``views``, ``reductions``, ...) read them."""


def register(op: OpDef) -> OpDef:
    if op.name in REGISTRY:
        raise ValueError(f"op {op.name!r} registered twice")
    for key, value in op.meta.items():
        if key not in FACTS:
            raise ValueError(f"op {op.name!r}: unknown fact {key!r}; declare it in ops.FACTS")
        if not isinstance(value, FACTS[key][0]):
            raise ValueError(f"op {op.name!r}: fact {key!r} must be {FACTS[key][0].__name__}, got {value!r}")
    REGISTRY[op.name] = op
    return op


def get(name: str) -> OpDef:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownOperation(f"unknown op {name!r}; see axon_eg.ir.ops.REGISTRY") from None


def ops_of_kind(*kinds: OpKind) -> list[OpDef]:
    return [op for op in REGISTRY.values() if op.kind in kinds]


# --------------------------------------------------------------------------------------------
# Shared shape and dtype rules
# --------------------------------------------------------------------------------------------
def fmt(shape: Shape) -> str:
    return D.format_shape(shape)


def broadcast_shapes(*shapes: Shape) -> Shape:
    """NumPy broadcasting over symbolic dims: equal dims, or one of them 1."""
    rank = max(len(s) for s in shapes)
    out: list[Dim] = []
    for i in range(rank):
        dim: Dim = 1
        for s in shapes:
            j = i - (rank - len(s))
            if j < 0:
                continue
            d = s[j]
            if d == 1 or d == dim:
                continue
            if dim == 1:
                dim = d
            else:
                raise ShapeError(f"cannot broadcast {' and '.join(fmt(s) for s in shapes)} (axis {i - rank})")
        out.append(dim)
    return tuple(out)


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank:  # a scalar has no axis: the NumPy references cannot take one
        raise ShapeError(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


def same_shape(shapes: tuple[Shape, ...], attrs: Attrs) -> Shape:
    return shapes[0]


def same_dtype(dtypes: tuple[DType, ...], attrs: Attrs) -> DType:
    return dtypes[0]


def promoted(dtypes: tuple[DType, ...], attrs: Attrs) -> DType:
    """The promoted dtype of an arithmetic result; booleans add up to int64 (torch's bool + bool is a logical
    or: an import casts the int64 sum back to bool, which is the same)."""
    d = promote(*dtypes)
    return int64 if d.kind == "bool" else d


def _erf(x: np.ndarray) -> np.ndarray:
    import torch  # float64 erf; NumPy has none

    x = np.asarray(x, dtype=np.float64)  # ascontiguousarray alone would turn a 0-d array into [1]
    return torch.special.erf(torch.from_numpy(np.array(x, dtype=np.float64))).numpy().reshape(x.shape)


def _softplus(x: np.ndarray, beta: float = 1.0, threshold: float = 20.0) -> np.ndarray:
    bx = beta * x
    return np.where(bx > threshold, x, np.logaddexp(0.0, bx) / beta)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # exp of minus |x| never overflows, and for very negative x the result keeps its relative precision
    # (0.5 * (1 + tanh(x / 2)) cancels to a few ulps of 1 there)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


# --------------------------------------------------------------------------------------------
# Source ops
# --------------------------------------------------------------------------------------------
def _no_reference(name: str) -> Reference:
    def ref(xs: tuple[np.ndarray, ...], a: Attrs) -> np.ndarray:
        raise AssertionError(f"{name} nodes are bound by the interpreter, not computed")

    return ref


register(OpDef(
    "input", OpKind.SOURCE, (0, 0),
    shape=lambda s, a: a["shape"], dtype=lambda d, a: a["dtype"], reference=_no_reference("input"),
    attrs=(Attr("name", "str"), Attr("shape", "dims"), Attr("dtype", "dtype")),
    doc="A named program input (argument, parameter or buffer).",
    meta={"shape_family": "input"},
))
register(OpDef(
    "constant", OpKind.SOURCE, (0, 0),
    shape=lambda s, a: (), dtype=lambda d, a: a["dtype"],
    reference=lambda xs, a: np.array(a["value"], dtype=np.float64),
    attrs=(Attr("value", "float"), Attr("dtype", "dtype")),
    doc="A scalar constant; broadcasting gives it any shape.",
    meta={"shape_family": "scalar"},
))


# --------------------------------------------------------------------------------------------
# Element-wise ops
# --------------------------------------------------------------------------------------------
def floating(dtypes: tuple[DType, ...], attrs: Attrs) -> DType:
    """The promoted dtype, fp32 where that is an integer or bool (torch's default float: exp of an integer
    tensor, or one divided by another, is fp32)."""
    d = promote(*dtypes)
    return d if d.is_float else fp32


# integer in, integer out (torch's rule)
_KEEPS_INTEGERS = {"neg", "abs", "square", "relu", "clamp", "floor", "ceil", "round", "trunc", "sign"}


def _unary(name: str, ref: Callable[..., np.ndarray], doc: str, attrs: tuple[Attr, ...] = (),
           **meta: Any) -> None:
    register(OpDef(
        name, OpKind.ELEMENTWISE, (1, 1), shape=same_shape, dtype=same_dtype if name in _KEEPS_INTEGERS else floating,
        reference=lambda xs, a, _f=ref: _f(xs[0], **a), attrs=attrs, inputs=("x",), doc=doc,
        meta={"arity": 1, **meta},
    ))


def _gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _pow(x: np.ndarray, exponent: float) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.power(x, exponent)


def _log(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.log(x)


def _sqrt(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.sqrt(x)


def _rsqrt(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return 1.0 / np.sqrt(x)


def _reciprocal(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return 1.0 / x


_unary("neg", lambda x: -x, "-x")
_unary("exp", np.exp, "e**x", activation=True)
_unary("log", _log, "natural logarithm", positive_inputs=(0,), activation=True)
_unary("sqrt", _sqrt, "square root", positive_inputs=(0,), activation=True)
_unary("rsqrt", _rsqrt, "1/sqrt(x)", positive_inputs=(0,), activation=True)
_unary("reciprocal", _reciprocal, "1/x", nonzero_inputs=(0,))
_unary("abs", np.abs, "|x|")
_unary("square", np.square, "x*x")
_unary("relu", lambda x: np.maximum(x, 0.0), "max(x, 0)")
_unary("leaky_relu", lambda x, slope: np.where(x >= 0, x, slope * x), "x if x >= 0 else slope*x",
       (Attr("slope", "float", 0.01),))
_unary("sigmoid", _sigmoid, "1/(1+exp(-x))", activation=True)
_unary("tanh", np.tanh, "hyperbolic tangent", activation=True)
_unary("silu", lambda x: x * _sigmoid(x), "x*sigmoid(x)", activation=True)
_unary("gelu", _gelu, "x*Phi(x) (approximate='none') or its tanh form (approximate='tanh')",
       (Attr("approximate", "str", "none", ("none", "tanh")),), activation=True)
_unary("mish", lambda x: x * np.tanh(_softplus(x)), "x*tanh(softplus(x))", activation=True)
_unary("hardswish", lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0, "x*relu6(x+3)/6")
_unary("hardsigmoid", lambda x: np.clip(x / 6.0 + 0.5, 0.0, 1.0), "relu6(x+3)/6")
_unary("softplus", _softplus, "log(1+exp(beta*x))/beta, linear above threshold",
       (Attr("beta", "float", 1.0), Attr("threshold", "float", 20.0)), activation=True)
_unary("clamp", lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi), "min(max(x, lo), hi) (hardtanh)",
       (Attr("lo", "float", -math.inf), Attr("hi", "float", math.inf)))
_unary("pow", _pow, "x**exponent for a constant exponent", (Attr("exponent", "float"),), positive_inputs=(0,))
_unary("erf", _erf, "the error function", activation=True)
_unary("sin", np.sin, "sine")
_unary("cos", np.cos, "cosine")
# Rounding and sign: piecewise constant, so the prover keeps them opaque (an fp32 kernel and the float64
# reference may round a value computed near a step to either side: outside the random programs too)
_unary("floor", np.floor, "the largest integer <= x", opaque=True, steps=True)
_unary("ceil", np.ceil, "the smallest integer >= x", opaque=True, steps=True)
_unary("round", np.round, "the nearest integer, halves to even (torch.round)", opaque=True, steps=True)
_unary("trunc", np.trunc, "x rounded toward zero", opaque=True, steps=True)
_unary("sign", np.sign, "-1, 0 or 1 as x is negative, zero or positive (NaN stays NaN)", opaque=True, steps=True)
def _cast_ref(x: np.ndarray, dtype: DType) -> np.ndarray:
    if dtype.kind == "bool":
        return np.asarray(x != 0, dtype=np.float64)
    if dtype.kind == "int":
        return np.trunc(x)
    return x


register(OpDef(
    "cast", OpKind.ELEMENTWISE, (1, 1), shape=same_shape, dtype=lambda d, a: a["dtype"],
    reference=lambda xs, a: _cast_ref(xs[0], a["dtype"]), attrs=(Attr("dtype", "dtype"),), inputs=("x",),
    doc="convert to dtype (the float64 reference keeps floats; to an integer it truncates toward zero, to bool "
        "it tests x != 0)", meta={"arity": 1, "preserves_positive": True},
))


def _causal_canon(shapes: tuple[Shape, ...], a: Attrs) -> Attrs:
    if len(shapes[0]) < 2:
        raise ShapeError(f"needs rank >= 2, got {fmt(shapes[0])}")
    return a


def _causal_ref(xs: tuple[np.ndarray, ...], a: Attrs) -> np.ndarray:
    x = xs[0]
    rows, cols = x.shape[-2], x.shape[-1]
    keep = np.arange(cols)[None, :] - np.arange(rows)[:, None] <= a["diagonal"]
    return np.where(keep, x, a["fill"])


register(OpDef(
    "causal_mask", OpKind.ELEMENTWISE, (1, 1), shape=same_shape, dtype=same_dtype, reference=_causal_ref,
    attrs=(Attr("diagonal", "int", 0), Attr("fill", "float", -math.inf)), canon=_causal_canon,
    inputs=("x",), doc="x[..., i, j] where j - i <= diagonal, else fill (attention masks)",
    meta={"arity": 1, "index_dependent": True},
))


def _binary(name: str, ref: Callable[[np.ndarray, np.ndarray], np.ndarray], doc: str, **meta: Any) -> None:
    register(OpDef(
        name, OpKind.ELEMENTWISE, (2, 2), shape=lambda s, a: broadcast_shapes(*s),
        dtype=floating if name == "div" else promoted,
        reference=lambda xs, a, _f=ref: _f(xs[0], xs[1]), inputs=("x", "y"), doc=doc,
        meta={"arity": 2, **meta},
    ))


def _div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return x / y


_binary("add", np.add, "x + y", commutative=True, preserves_positive=True)
_binary("sub", np.subtract, "x - y")
_binary("mul", np.multiply, "x * y", commutative=True)
_binary("div", _div, "x / y", nonzero_inputs=(1,))
_binary("maximum", np.maximum, "element-wise max", commutative=True)
_binary("minimum", np.minimum, "element-wise min", commutative=True)


# --------------------------------------------------------------------------------------------
# Comparisons, logic and selection: boolean values (0.0 / 1.0 in the float64 reference)
# --------------------------------------------------------------------------------------------
def boolean(dtypes: tuple[DType, ...], attrs: Attrs) -> DType:
    """The dtype rule of comparisons and logic: bool, whatever the inputs."""
    return bool_


def _as_01(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _logical(name: str, arity: int, ref: Callable[..., np.ndarray], doc: str, **meta: Any) -> None:
    register(OpDef(
        name, OpKind.ELEMENTWISE, (arity, arity), shape=lambda s, a: broadcast_shapes(*s), dtype=boolean,
        reference=lambda xs, a, _f=ref: _as_01(_f(*xs)), inputs=("x", "y")[:arity], doc=doc,
        meta={"arity": arity, "logical": True, **meta},
    ))


_logical("gt", 2, np.greater, "x > y (bool)", steps=True)
_logical("ge", 2, np.greater_equal, "x >= y (bool)", steps=True)
_logical("lt", 2, np.less, "x < y (bool)", steps=True)
_logical("le", 2, np.less_equal, "x <= y (bool)", steps=True)
_logical("eq", 2, np.equal, "x == y (bool)", commutative=True, steps=True)
_logical("ne", 2, np.not_equal, "x != y (bool)", commutative=True, steps=True)
_logical("logical_and", 2, lambda x, y: (x != 0) & (y != 0), "x and y, nonzero being true (bool)", commutative=True)
_logical("logical_or", 2, lambda x, y: (x != 0) | (y != 0), "x or y, nonzero being true (bool)", commutative=True)
_logical("logical_xor", 2, lambda x, y: (x != 0) ^ (y != 0), "x xor y, nonzero being true (bool)",
         commutative=True)
_logical("logical_not", 1, lambda x: x == 0, "not x, nonzero being true (bool)")


def bitwise(dtypes: tuple[DType, ...], attrs: Attrs) -> DType:
    """The dtype rule of the bit operations: integer operands, promoted (on booleans torch's ``&``, ``|``,
    ``^``, ``~`` are the logical ops, which the front end imports as such)."""
    for d in dtypes:
        if d.kind != "int":
            raise DtypeError(f"bit operations take integer tensors, got {d.name}"
                             + (" (use logical_and / or / xor / not on booleans)" if d.kind == "bool" else ""))
    out = dtypes[0]
    for d in dtypes[1:]:
        out = promote(out, d)
    return out


def _bits(fn: Callable[..., np.ndarray]) -> Reference:
    return lambda xs, a: fn(*(np.asarray(x).astype(np.int64) for x in xs)).astype(np.float64)


def _shift_right(x: np.ndarray, y: np.ndarray) -> np.ndarray:  # torch: an arithmetic shift, >= 64 gives 0 or -1
    return np.right_shift(x, np.clip(y, 0, 63))


def _shift_left(x: np.ndarray, y: np.ndarray) -> np.ndarray:  # torch: a shift by 64 or more gives 0
    return np.where(y >= 64, 0, np.left_shift(x, np.clip(y, 0, 63)))


for _name, _fn, _doc, _comm in (
        ("bitwise_and", np.bitwise_and, "x & y on integer bits", True),
        ("bitwise_or", np.bitwise_or, "x | y on integer bits", True),
        ("bitwise_xor", np.bitwise_xor, "x ^ y on integer bits", True),
        ("bitwise_left_shift", _shift_left, "x << y (integers)", False),
        ("bitwise_right_shift", _shift_right, "x >> y (integers, arithmetic)", False)):
    register(OpDef(
        _name, OpKind.ELEMENTWISE, (2, 2), shape=lambda s, a: broadcast_shapes(*s), dtype=bitwise,
        reference=_bits(_fn), inputs=("x", "y"), doc=_doc,
        meta={"arity": 2, "logical": True, "opaque": True, **({"commutative": True} if _comm else {})},
    ))
register(OpDef(
    "bitwise_not", OpKind.ELEMENTWISE, (1, 1), shape=same_shape, dtype=bitwise, reference=_bits(np.invert),
    inputs=("x",), doc="~x on integer bits", meta={"arity": 1, "logical": True, "opaque": True},
))
register(OpDef(
    "where", OpKind.ELEMENTWISE, (3, 3), shape=lambda s, a: broadcast_shapes(*s),
    dtype=lambda d, a: promote(d[1], d[2]), reference=lambda xs, a: np.where(xs[0] != 0, xs[1], xs[2]),
    inputs=("cond", "x", "y"), doc="x where cond (nonzero) else y, broadcast together (masked_fill, masks)",
    meta={"arity": 3, "logical": True},
))


# --------------------------------------------------------------------------------------------
# Reductions and scans
# --------------------------------------------------------------------------------------------
def _axes_canon(shapes: tuple[Shape, ...], a: Attrs) -> Attrs:
    rank = len(shapes[0])
    axes = a["axes"] if a["axes"] else tuple(range(rank))  # () means all axes
    norm = tuple(sorted({normalize_axis(ax, rank) for ax in axes}))
    if len(norm) != len(axes):
        raise ShapeError(f"repeated axis in {a['axes']}")
    return a.replace(axes=norm)


def _reduce_shape(shapes: tuple[Shape, ...], a: Attrs) -> Shape:
    return tuple(
        (1 if a["keepdims"] else None) if i in a["axes"] else d for i, d in enumerate(shapes[0])
        if a["keepdims"] or i not in a["axes"]
    )


def _logsumexp(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def summed(dtypes: tuple[DType, ...], attrs: Attrs) -> DType:
    """A sum of integers or booleans is int64 (torch counts a mask so); of floats, their dtype."""
    return dtypes[0] if dtypes[0].is_float else int64


def _reduction(name: str, ref: Callable[..., np.ndarray], doc: str, accumulates: bool, **meta: Any) -> None:
    register(OpDef(
        name, OpKind.REDUCE, (1, 1), shape=_reduce_shape, dtype=summed if name == "sum" else same_dtype,
        reference=lambda xs, a, _f=ref: _f(xs[0], axis=a["axes"], keepdims=a["keepdims"]),
        attrs=(Attr("axes", "ints", ()), Attr("keepdims", "bool", False)), canon=_axes_canon,
        accumulates=accumulates, inputs=("x",), doc=doc, meta=meta,
    ))


_reduction("sum", np.sum, "sum over axes", True, identity=0.0)
_reduction("mean", np.mean, "mean over axes", True, identity=0.0)  # a sum, then scaled
_reduction("max", np.max, "maximum over axes", False, identity=-math.inf)
_reduction("min", np.min, "minimum over axes", False, identity=math.inf)
_reduction("logsumexp", _logsumexp, "log(sum(exp(x))) over axes, computed stably", True)  # from max and sum


def index_result(dtypes: tuple[DType, ...], attrs: Attrs) -> DType:
    """The dtype rule of argmax / argmin: int64 indices, whatever the input."""
    return int64


def _arg_canon(shapes: tuple[Shape, ...], a: Attrs) -> Attrs:
    a = _axes_canon(shapes, a)
    if len(a["axes"]) != 1:
        raise ShapeError(f"reduces one axis, got axes {a['axes']} (flatten first to search several)")
    return a


def _arg_ref(fn: Callable[..., np.ndarray]) -> Reference:
    def ref(xs: tuple[np.ndarray, ...], a: Attrs) -> np.ndarray:
        (axis,) = a["axes"]
        out = fn(xs[0], axis=axis).astype(np.float64)  # the first of equal extremes, as torch picks
        return np.expand_dims(out, axis) if a["keepdims"] else out

    return ref


for _name, _fn in (("argmax", np.argmax), ("argmin", np.argmin)):
    register(OpDef(
        _name, OpKind.REDUCE, (1, 1), shape=_reduce_shape, dtype=index_result, reference=_arg_ref(_fn),
        attrs=(Attr("axes", "ints"), Attr("keepdims", "bool", False)), canon=_arg_canon, inputs=("x",),
        doc=f"the index (int64) of the first {'largest' if _name == 'argmax' else 'smallest'} element along one axis",
        meta={"indices": True, "steps": True},
    ))


def _axis_canon(shapes: tuple[Shape, ...], a: Attrs) -> Attrs:
    return a.replace(axis=normalize_axis(a["axis"], len(shapes[0])))


register(OpDef(
    "cumprod", OpKind.SCAN, (1, 1), shape=same_shape, dtype=summed,
    reference=lambda xs, a: np.cumprod(xs[0], axis=a["axis"]),
    attrs=(Attr("axis", "int"),), canon=_axis_canon, accumulates=True, inputs=("x",),
    doc="inclusive prefix product along axis", meta={"opaque": True},
))


register(OpDef(
    "cumsum", OpKind.SCAN, (1, 1), shape=same_shape, dtype=summed,
    reference=lambda xs, a: np.cumsum(xs[0], axis=a["axis"]),
    attrs=(Attr("axis", "int"),), canon=_axis_canon, accumulates=True, inputs=("x",),
    doc="inclusive prefix sum along axis",
))


# --------------------------------------------------------------------------------------------
# Contraction
# --------------------------------------------------------------------------------------------
def _matmul_shape(shapes: tuple[Shape, ...], a: Attrs) -> Shape:
    x, y = shapes
    if len(x) < 2 or len(y) < 2:
        raise ShapeError(f"needs rank >= 2 operands, got {fmt(x)} @ {fmt(y)}")
    if x[-1] != y[-2]:
        raise ShapeError(f"contraction dims differ: {fmt(x)} @ {fmt(y)} ({x[-1]} vs {y[-2]})")
    try:
        batch = broadcast_shapes(x[:-2], y[:-2])
    except ShapeError:
        raise ShapeError(f"batch dims do not broadcast: {fmt(x)} @ {fmt(y)}") from None
    return (*batch, x[-2], y[-1])


register(OpDef(
    "matmul", OpKind.CONTRACTION, (2, 2), shape=_matmul_shape, dtype=promoted,
    reference=lambda xs, a: np.matmul(xs[0], xs[1]), accumulates=True, inputs=("x", "y"),
    doc="x @ y over the last two axes, batch axes broadcast",
    meta={"shape_family": "matmul"},
))


# --------------------------------------------------------------------------------------------
# Layout
# --------------------------------------------------------------------------------------------
def _transpose_canon(shapes: tuple[Shape, ...], a: Attrs) -> Attrs:
    rank = len(shapes[0])
    perm = tuple(normalize_axis(p, rank, "permutation entry") for p in a["perm"])
    if sorted(perm) != list(range(rank)):
        raise ShapeError(f"perm {a['perm']} is not a permutation of the {rank} axes of {fmt(shapes[0])}")
    return a.replace(perm=perm)


register(OpDef(
    "transpose", OpKind.LAYOUT, (1, 1),
    shape=lambda s, a: tuple(s[0][p] for p in a["perm"]), dtype=same_dtype,
    reference=lambda xs, a: np.transpose(xs[0], a["perm"]),
    attrs=(Attr("perm", "ints"),), canon=_transpose_canon, inputs=("x",),
    doc="permute axes: out axis i is input axis perm[i]",
    meta={"shape_family": "transpose", "preserves_positive": True},
))


def _reshape_shape(shapes: tuple[Shape, ...], a: Attrs) -> Shape:
    src, dst = D.product(shapes[0]), D.product(a["shape"])
    if src != dst:
        raise ShapeError(f"cannot reshape {fmt(shapes[0])} ({src} elements) to {fmt(a['shape'])} ({dst} elements)")
    return a["shape"]


register(OpDef(
    "reshape", OpKind.LAYOUT, (1, 1), shape=_reshape_shape, dtype=same_dtype,
    reference=lambda xs, a: xs[0].reshape(_concrete(a["shape"], xs[0])),
    attrs=(Attr("shape", "dims"),), inputs=("x",), doc="row-major reshape to the given shape",
    meta={"shape_family": "reshape", "view": True, "flat_view": True, "preserves_positive": True},
))


def _concrete(shape: Shape, x: np.ndarray) -> tuple[int, ...]:
    """Resolve a symbolic target shape against the actual element count (one unknown at most)."""
    if all(isinstance(d, int) for d in shape):
        return tuple(shape)  # type: ignore[arg-type]
    known = math.prod(d for d in shape if isinstance(d, int))
    unknown = [i for i, d in enumerate(shape) if not isinstance(d, int)]
    if len(unknown) == 1:
        return tuple(x.size // known if isinstance(d, D.Sym) else d for d in shape)  # type: ignore[misc]
    raise ShapeError(f"reshape target {fmt(shape)} is symbolic; interpret a program with bound dims")


def _broadcast_to_shape(shapes: tuple[Shape, ...], a: Attrs) -> Shape:
    target = a["shape"]
    if len(target) < len(shapes[0]) or broadcast_shapes(shapes[0], target) != target:
        raise ShapeError(f"cannot broadcast {fmt(shapes[0])} to {fmt(target)}")
    return target


register(OpDef(
    "broadcast_to", OpKind.LAYOUT, (1, 1), shape=_broadcast_to_shape, dtype=same_dtype,
    reference=lambda xs, a: np.broadcast_to(xs[0], _broadcast_target(xs[0], a["shape"])),
    attrs=(Attr("shape", "dims"),), inputs=("x",), doc="NumPy broadcast to a larger shape",
    meta={"shape_family": "reshape", "view": True, "preserves_positive": True},
))


def _broadcast_target(x: np.ndarray, shape: Shape) -> tuple[int, ...]:
    if all(isinstance(d, int) for d in shape):
        return tuple(shape)  # type: ignore[arg-type]
    raise ShapeError(f"broadcast_to target {fmt(shape)} is symbolic; interpret a program with bound dims")


register(OpDef(
    "expand_dims", OpKind.LAYOUT, (1, 1),
    shape=lambda s, a: (*s[0][: a["axis"]], 1, *s[0][a["axis"]:]), dtype=same_dtype,
    reference=lambda xs, a: np.expand_dims(xs[0], a["axis"]),
    attrs=(Attr("axis", "int"),),
    canon=lambda s, a: a.replace(axis=normalize_axis(a["axis"], len(s[0]) + 1)),
    inputs=("x",), doc="insert a size-1 axis at position axis",
    meta={"shape_family": "expand_dims", "view": True, "flat_view": True, "preserves_positive": True},
))


def _squeeze_canon(shapes: tuple[Shape, ...], a: Attrs) -> Attrs:
    shape = shapes[0]
    axes = a["axes"] if a["axes"] else tuple(i for i, d in enumerate(shape) if d == 1)
    if not axes and any(isinstance(d, D.Sym) for d in shape):  # stored axes=() would mean "all" again once bound
        raise ShapeError(f"squeeze without axes of {fmt(shape)}: which axes have size 1 depends on the sizes "
                         "bound to its dims; pass axes explicitly")
    norm = tuple(sorted({normalize_axis(ax, len(shape)) for ax in axes}))
    for ax in norm:
        if shape[ax] != 1:
            raise ShapeError(f"cannot squeeze axis {ax} of {fmt(shape)}: its size is {shape[ax]}, not 1")
    return a.replace(axes=norm)


register(OpDef(
    "squeeze", OpKind.LAYOUT, (1, 1),
    shape=lambda s, a: tuple(d for i, d in enumerate(s[0]) if i not in a["axes"]), dtype=same_dtype,
    reference=lambda xs, a: np.squeeze(xs[0], axis=a["axes"]) if a["axes"] else xs[0],
    attrs=(Attr("axes", "ints", ()),), canon=_squeeze_canon, inputs=("x",),
    doc="drop size-1 axes (all of them when axes is empty)",
    meta={"shape_family": "squeeze", "view": True, "flat_view": True, "preserves_positive": True},
))


def _slice_canon(shapes: tuple[Shape, ...], a: Attrs) -> Attrs:
    shape = shapes[0]
    axis = normalize_axis(a["axis"], len(shape))
    size = shape[axis]
    if a["step"] < 1:
        raise ShapeError(f"step must be >= 1, got {a['step']}")

    def resolve(v: Dim | None, default: Dim) -> Dim:
        if v is None:
            return default
        if isinstance(v, int) and v < 0:
            v = D.add(size, v)
        if isinstance(v, int) and isinstance(size, int):
            v = min(max(v, 0), size)
        return v

    start, stop = resolve(a["start"], 0), resolve(a["stop"], size)
    if isinstance(start, int) and isinstance(stop, int) and stop <= start:
        raise ShapeError(f"empty slice [{a['start']}:{a['stop']}] of axis {axis} in {fmt(shape)}")
    return a.replace(axis=axis, start=start, stop=stop)


def _slice_shape(shapes: tuple[Shape, ...], a: Attrs) -> Shape:
    out = list(shapes[0])
    out[a["axis"]] = D.ceildiv(D.add(a["stop"], D.mul(a["start"], -1)), a["step"])
    return tuple(out)


def _slice_ref(xs: tuple[np.ndarray, ...], a: Attrs) -> np.ndarray:
    x = xs[0]
    index = [slice(None)] * x.ndim
    bind = _infer_bindings(a, x.shape[a["axis"]])
    index[a["axis"]] = slice(D.evaluate(a["start"], bind), D.evaluate(a["stop"], bind), a["step"])
    return x[tuple(index)]


def _infer_bindings(a: Attrs, size: int) -> dict[str, int]:
    """Slice bounds may mention the sliced dim symbolically; it is the only name they can mention."""
    names = D.names(a["start"]) | D.names(a["stop"])
    if not names:
        return {}
    if len(names) == 1:
        return {names.pop(): size}
    raise ShapeError(f"slice bounds {a['start']}:{a['stop']} mention several dims; bind the program first")


def _gather_canon(shapes: tuple[Shape, ...], a: Attrs) -> Attrs:
    x, index = shapes
    axis = normalize_axis(a["axis"], len(x))
    def fits(i: Dim, d: Dim) -> bool:  # torch: index.size(k) <= x.size(k) off the gathered axis
        return i == d or (isinstance(i, int) and isinstance(d, int) and i <= d)

    if len(index) != len(x) or not all(fits(i, d) for k, (i, d) in enumerate(zip(index, x)) if k != axis):
        raise ShapeError(f"index {fmt(index)} must have the rank of {fmt(x)} and no larger size off axis {axis}")
    return a.replace(axis=axis)


def _gather_ref(xs: tuple[np.ndarray, ...], a: Attrs) -> np.ndarray:
    x, index = xs
    axis = a["axis"]
    x = x[tuple(slice(0, n) if k != axis else slice(None) for k, n in enumerate(index.shape))]
    return np.take_along_axis(x, index.astype(np.int64), axis)


def _index_dtype(i: int) -> DtypeRule:
    def rule(dtypes: tuple[DType, ...], attrs: Attrs) -> DType:
        if dtypes[i].kind != "int":
            raise DtypeError(f"the index must be an integer tensor, got {dtypes[i].name}")
        return dtypes[0]

    return rule


register(OpDef(
    "gather", OpKind.LAYOUT, (2, 2), shape=lambda s, a: s[1], dtype=_index_dtype(1), reference=_gather_ref,
    attrs=(Attr("axis", "int"),), canon=_gather_canon, inputs=("x", "index"),
    doc="out[..., i, ...] = x[..., index[..., i, ...], ...] along axis (torch.gather, take_along_dim)",
    meta={"shape_family": "gather", "indices": True},
))


def _index_select_shape(shapes: tuple[Shape, ...], a: Attrs) -> Shape:
    x, index = shapes
    if len(index) != 1:
        raise ShapeError(f"the index must be 1-d, got {fmt(index)}")
    out = list(x)
    out[a["axis"]] = index[0]
    return tuple(out)


register(OpDef(
    "index_select", OpKind.LAYOUT, (2, 2), shape=_index_select_shape, dtype=_index_dtype(1),
    reference=lambda xs, a: np.take(xs[0], xs[1].astype(np.int64), axis=a["axis"]),
    attrs=(Attr("axis", "int"),), canon=lambda s, a: a.replace(axis=normalize_axis(a["axis"], len(s[0]))),
    inputs=("x", "index"), doc="the slices of x at the 1-d integer index along axis (embedding rows, a weight per class)",
    meta={"shape_family": "index_select", "indices": True},
))


def _flip_canon(shapes: tuple[Shape, ...], a: Attrs) -> Attrs:
    rank = len(shapes[0])
    axes = tuple(sorted({normalize_axis(ax, rank) for ax in a["axes"]}))
    if len(axes) != len(a["axes"]):
        raise ShapeError(f"repeated axis in {a['axes']}")
    return a.replace(axes=axes)


register(OpDef(
    "flip", OpKind.LAYOUT, (1, 1), shape=same_shape, dtype=same_dtype,
    reference=lambda xs, a: np.flip(xs[0], axis=a["axes"]).copy() if a["axes"] else xs[0],
    attrs=(Attr("axes", "ints"),), canon=_flip_canon, inputs=("x",),
    doc="x with the order of its elements along axes reversed (torch.flip; a reverse scan is flip, scan, flip)",
    meta={"shape_family": "same", "preserves_positive": True},
))


register(OpDef(
    "slice", OpKind.LAYOUT, (1, 1), shape=_slice_shape, dtype=same_dtype, reference=_slice_ref,
    attrs=(Attr("axis", "int"), Attr("start", "dim", 0), Attr("stop", "optional_dim", None), Attr("step", "int", 1)),
    canon=_slice_canon, inputs=("x",), doc="x[start:stop:step] along axis",
    meta={"shape_family": "slice", "preserves_positive": True},
))


def _concat_canon(shapes: tuple[Shape, ...], a: Attrs) -> Attrs:
    rank = len(shapes[0])
    axis = normalize_axis(a["axis"], rank)
    for s in shapes[1:]:
        if len(s) != rank or any(s[i] != shapes[0][i] for i in range(rank) if i != axis):
            raise ShapeError(f"cannot concatenate {' and '.join(fmt(x) for x in shapes)} along axis {axis}")
    return a.replace(axis=axis)


def _concat_shape(shapes: tuple[Shape, ...], a: Attrs) -> Shape:
    out = list(shapes[0])
    out[a["axis"]] = 0
    for s in shapes:
        out[a["axis"]] = D.add(out[a["axis"]], s[a["axis"]])
    return tuple(out)


register(OpDef(
    "concat", OpKind.LAYOUT, (1, None), shape=_concat_shape, dtype=promoted,
    reference=lambda xs, a: np.concatenate(xs, axis=a["axis"]),
    attrs=(Attr("axis", "int"),), canon=_concat_canon, inputs=("*xs",), doc="join tensors along axis",
    meta={"shape_family": "concat", "preserves_positive": True, "nestable": True},
))


def shape_family(op: OpDef) -> str:
    """How an op's output shape follows from its inputs, for analyses that re-implement shape rules
    in another language (the νGraph's egglog shape analysis): declared in ``meta`` or given by kind."""
    if "shape_family" in op.meta:
        return op.meta["shape_family"]
    if op.kind is OpKind.ELEMENTWISE:
        return "same" if op.arity[1] == 1 else "broadcast"
    if op.kind is OpKind.REDUCE:
        return "reduce"
    if op.kind is OpKind.SCAN:
        return "same"
    raise KeyError(f"op {op.name} ({op.kind.value}) has no shape family")


def all_ops() -> list[OpDef]:
    """Every registered op, primitives first, in registration order."""
    return list(REGISTRY.values())


# --------------------------------------------------------------------------------------------
# Group helpers: which ops have a fact (names, in registration order)
# --------------------------------------------------------------------------------------------
def with_fact(key: str) -> tuple[str, ...]:
    """Names of the ops whose ``meta[key]`` is set (and true), in registration order."""
    if key not in FACTS:
        raise KeyError(f"unknown fact {key!r}; see ops.FACTS")
    return tuple(name for name, op in REGISTRY.items() if op.meta.get(key))


def is_source(name: str) -> bool:
    """Whether ``name`` is a source (input, constant): bound by the caller, never computed."""
    return get(name).kind is OpKind.SOURCE


def sources() -> tuple[str, ...]:
    return tuple(op.name for op in ops_of_kind(OpKind.SOURCE))


def is_view(name: str) -> bool:
    """Whether ``name`` moves no data (``meta["view"]``: reshape, broadcast_to, expand_dims, squeeze)."""
    return bool(get(name).meta.get("view"))


def views() -> tuple[str, ...]:
    return with_fact("view")


def flat_views() -> tuple[str, ...]:
    """The views that keep the row-major element order (reshape, expand_dims, squeeze; not broadcast_to)."""
    return with_fact("flat_view")


def reductions() -> tuple[str, ...]:
    """Every reduction (sum, mean, max, min, logsumexp)."""
    return tuple(op.name for op in ops_of_kind(OpKind.REDUCE))


def simple_reductions() -> tuple[str, ...]:
    """The reductions folded with one binary op, those with an ``identity`` (sum, mean, max, min)."""
    return tuple(name for name in reductions() if "identity" in REGISTRY[name].meta)


def identity(name: str) -> float:
    """The neutral element of a simple reduction: 0 for sum and mean, -inf for max, inf for min."""
    try:
        return float(get(name).meta["identity"])
    except KeyError:
        raise KeyError(f"op {name!r} has no reduction identity") from None


def positive_preserving() -> tuple[str, ...]:
    """Ops whose output elements are input elements or sums of them (add, cast, layout ops)."""
    return with_fact("preserves_positive")


def activations() -> tuple[str, ...]:
    """The transcendental functions Trainium computes on its Scalar (activation) engine."""
    return with_fact("activation")


def nestable() -> tuple[str, ...]:
    """The variadic ops that may be split into a tree of themselves over consecutive inputs (concat)."""
    return with_fact("nestable")


def is_partial(name: str) -> bool:
    """Whether ``name`` is undefined somewhere (a positive-domain or a denominator input: log, sqrt,
    rsqrt, pow, reciprocal, div, ...)."""
    meta = get(name).meta
    return bool(meta.get("positive_inputs") or meta.get("nonzero_inputs"))


# Composite and library ops register themselves into REGISTRY on import.
from axon_eg.ir import composites as _composites  # noqa: E402,F401
from axon_eg.ir import library_ops as _library_ops  # noqa: E402,F401
