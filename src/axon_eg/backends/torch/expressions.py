"""Per-op PyTorch expressions (part of :mod:`axon_eg.backends.torch.lower`, which writes whole functions from them):
the ``LOWERINGS`` registry and its ``@lowers`` decorator, the formatting helpers every lowering uses, and
the lowerings of sources, element-wise ops, reductions, scans, matmul and layout ops. Composites and
library ops are in :mod:`axon_eg.backends.torch.composite_expressions`.
"""

from __future__ import annotations

import ast
import keyword
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from axon_eg.ir import dims as D
from axon_eg.ir import ops as O
from axon_eg.ir.dtypes import DType

Shape = tuple[int, ...]
Lowering = Callable[[list[str], O.Attrs, list[Shape], Shape, Mapping[str, int]], str]

LOWERINGS: dict[str, Lowering] = {}


def lowers(*names: str) -> Callable[[Lowering], Lowering]:
    """Decorator: register the decorated function as the lowering of the named ops."""

    def wrap(fn: Lowering) -> Lowering:
        for name in names:
            if name in LOWERINGS:
                raise ValueError(f"op {name!r} lowered twice")
            LOWERINGS[name] = fn
        return fn

    return wrap


def missing_lowerings() -> list[str]:
    """Registry ops without a PyTorch lowering (a test keeps this empty)."""
    return [name for name in O.REGISTRY if name not in LOWERINGS]


# --------------------------------------------------------------------------------------------
# Formatting helpers
# --------------------------------------------------------------------------------------------
def literal(value: float) -> str:
    """A Python float literal; infinities as ``float('inf')``."""
    return repr(float(value)) if math.isfinite(value) else f"float('{'inf' if value > 0 else '-inf'}')"


def is_literal(text: str) -> bool:
    """Whether an argument expression is a Python number (a weak scalar to torch), not a tensor."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return False
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "float":
        return True
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float))


def atom(text: str) -> str:
    """``text`` parenthesized unless it already binds tighter than any operator."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return f"({text})"
    simple = isinstance(node, (ast.Name, ast.Call, ast.Attribute, ast.Subscript))
    return text if simple or (isinstance(node, ast.Constant) and not text.startswith("-")) else f"({text})"


def ints(values: Sequence[int]) -> str:
    return f"({values[0]},)" if len(values) == 1 else f"({', '.join(str(v) for v in values)})"


def dim_arg(axis: int, rank: int) -> str:
    """``axis`` as a ``dim=`` argument: ``-1`` for the last axis of a tensor of rank 2 or more."""
    return "-1" if axis == rank - 1 and rank > 1 else str(axis)


def _dims(axes: Sequence[int], rank: int) -> str:
    return dim_arg(axes[0], rank) if len(axes) == 1 else ints(axes)


def _kwargs(pairs: Sequence[tuple[str, Any, Any]]) -> str:
    """``, k=v`` for each (name, value, default) whose value is not the default."""
    return "".join(f", {k}={v}" for k, v, default in pairs if v != default)


def _quoted(text: str) -> str:
    return '"' + text + '"'


def torch_dtype(dtype: DType) -> str:
    return f"torch.{dtype.torch_name}"


# --------------------------------------------------------------------------------------------
# Sources and element-wise ops
# --------------------------------------------------------------------------------------------
def identifier(name: str) -> str:
    """A Python identifier for an input name (``fc.weight`` -> ``fc_weight``); callers dedupe."""
    text = re.sub(r"\W", "_", name) or "_"
    if text[0].isdigit():
        text = "_" + text
    if keyword.iskeyword(text) or text in _RESERVED or re.fullmatch(r"v\d+", text):
        text += "_"
    return text


_RESERVED = {"torch", "F", "math", "float", "forward", "forward_float64", "eager", "compiled", "reference"}


@lowers("input")
def _input(args, a, ins, out, b):
    return identifier(a["name"])


@lowers("constant")
def _constant(args, a, ins, out, b):
    return literal(a["value"])


_UNARY_CALLS = {
    "exp": "torch.exp", "log": "torch.log", "sqrt": "torch.sqrt", "rsqrt": "torch.rsqrt",
    "reciprocal": "torch.reciprocal", "abs": "torch.abs", "square": "torch.square", "relu": "torch.relu",
    "sigmoid": "torch.sigmoid", "tanh": "torch.tanh", "erf": "torch.erf", "silu": "F.silu", "mish": "F.mish",
    "hardswish": "F.hardswish", "hardsigmoid": "F.hardsigmoid", "sin": "torch.sin", "cos": "torch.cos",
    "floor": "torch.floor", "ceil": "torch.ceil", "round": "torch.round", "trunc": "torch.trunc", "sign": "torch.sign",
}


def _call(fn: str) -> Lowering:
    return lambda args, a, ins, out, b: f"{fn}({args[0]})"


for _name, _fn in _UNARY_CALLS.items():
    lowers(_name)(_call(_fn))


@lowers("neg")
def _neg(args, a, ins, out, b):
    return f"-{atom(args[0])}"


@lowers("leaky_relu")
def _leaky_relu(args, a, ins, out, b):
    return f"F.leaky_relu({args[0]}{_kwargs([('negative_slope', a['slope'], 0.01)])})"


@lowers("gelu")
def _gelu(args, a, ins, out, b):
    return f"F.gelu({args[0]}{_kwargs([('approximate', _quoted(a['approximate']), _quoted('none'))])})"


@lowers("softplus")
def _softplus(args, a, ins, out, b):
    return f"F.softplus({args[0]}{_kwargs([('beta', a['beta'], 1.0), ('threshold', a['threshold'], 20.0)])})"


@lowers("clamp")
def _clamp(args, a, ins, out, b):
    bounds = [f"{k}={literal(v)}" for k, v in (("min", a["lo"]), ("max", a["hi"])) if math.isfinite(v)]
    return f"torch.clamp({args[0]}, {', '.join(bounds)})" if bounds else f"{atom(args[0])}.clone()"


@lowers("pow")
def _pow(args, a, ins, out, b):
    return f"torch.pow({args[0]}, {literal(a['exponent'])})"


@lowers("cast")
def _cast(args, a, ins, out, b):
    return f"{atom(args[0])}.to({torch_dtype(a['dtype'])})"


def triangle(rows: int, cols: int, like: str, part: str) -> str:
    """A bool [rows, cols] tensor: ``triu(k)`` or ``tril(k)`` of ones, on ``like``'s device."""
    return f"torch.ones({rows}, {cols}, dtype=torch.bool, device={atom(like)}.device).{part}"


@lowers("causal_mask")
def _causal_mask(args, a, ins, out, b):
    rows, cols = ins[0][-2:]
    above = triangle(rows, cols, args[0], f"triu({a['diagonal'] + 1})")
    return f"{atom(args[0])}.masked_fill({above}, {literal(a['fill'])})"


_OPERATORS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "gt": ">", "ge": ">=", "lt": "<", "le": "<=",
              "eq": "==", "ne": "!="}


def _truth(x: str) -> str:
    return f"({atom(x)} != 0)"


_LOGICAL = {"logical_and": "&", "logical_or": "|", "logical_xor": "^"}
for _name, _symbol in _LOGICAL.items():
    lowers(_name)(lambda args, a, ins, out, b, _s=_symbol: f"{_truth(args[0])} {_s} {_truth(args[1])}")


for _name in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift"):
    lowers(_name)(lambda args, a, ins, out, b, _n=_name: f"torch.{_n}({args[0]}, {args[1]})")
lowers("bitwise_not")(lambda args, a, ins, out, b: f"torch.bitwise_not({args[0]})")


@lowers("logical_not")
def _logical_not(args, a, ins, out, b):
    return f"({atom(args[0])} == 0)"


def _arg_extremum(fn: str) -> Lowering:
    def lower(args, a, ins, out, b):
        (axis,) = a["axes"]
        return f"torch.{fn}({args[0]}, dim={axis}{', keepdim=True' if a['keepdims'] else ''})"

    return lower


lowers("argmax")(_arg_extremum("argmax"))
lowers("argmin")(_arg_extremum("argmin"))


@lowers("flip")
def _flip(args, a, ins, out, b):
    return f"torch.flip({args[0]}, dims={ints(a['axes'])})" if a["axes"] else args[0]


@lowers("gather")
def _gather(args, a, ins, out, b):  # .long(): computing in float64 (the reference) turns the index to floats
    return f"torch.gather({args[0]}, {a['axis']}, {atom(args[1])}.long())"


@lowers("index_select")
def _index_select(args, a, ins, out, b):
    return f"torch.index_select({args[0]}, {a['axis']}, {atom(args[1])}.long())"


@lowers("where")
def _where(args, a, ins, out, b):
    return f"torch.where({_truth(args[0])}, {args[1]}, {args[2]})"


def _operator(symbol: str) -> Lowering:
    return lambda args, a, ins, out, b: f"{atom(args[0])} {symbol} {atom(args[1])}"


for _name, _symbol in _OPERATORS.items():
    lowers(_name)(_operator(_symbol))


def _extremum(fn: str, bound: str) -> Lowering:
    def lower(args, a, ins, out, b):
        x, y = args
        if is_literal(y) or is_literal(x):  # torch.maximum takes tensors only
            tensor, scalar = (y, x) if is_literal(x) else (x, y)
            return f"torch.clamp({tensor}, {bound}={scalar})"
        return f"{fn}({x}, {y})"

    return lower


lowers("maximum")(_extremum("torch.maximum", "min"))
lowers("minimum")(_extremum("torch.minimum", "max"))


# --------------------------------------------------------------------------------------------
# Reductions, scans, contraction
# --------------------------------------------------------------------------------------------
def _reduction(fn: str) -> Lowering:
    def lower(args, a, ins, out, b):
        rank, axes = len(ins[0]), a["axes"]
        if not axes:  # a 0-d input: reducing over no axes is the identity
            return args[0]
        if len(axes) == rank and not a["keepdims"] and fn != "torch.logsumexp":
            return f"{fn}({args[0]})"
        return f"{fn}({args[0]}, dim={_dims(axes, rank)}{', keepdim=True' if a['keepdims'] else ''})"

    return lower


for _name, _fn in {"sum": "torch.sum", "mean": "torch.mean", "max": "torch.amax", "min": "torch.amin",
                   "logsumexp": "torch.logsumexp"}.items():
    lowers(_name)(_reduction(_fn))


@lowers("cumsum")
def _cumsum(args, a, ins, out, b):
    return f"torch.cumsum({args[0]}, dim={dim_arg(a['axis'], len(ins[0]))})"


@lowers("cumprod")
def _cumprod(args, a, ins, out, b):
    return f"torch.cumprod({args[0]}, dim={dim_arg(a['axis'], len(ins[0]))})"


@lowers("matmul")
def _matmul(args, a, ins, out, b):
    return f"{atom(args[0])} @ {atom(args[1])}"


# --------------------------------------------------------------------------------------------
# Layout (views; emit_function makes returned outputs contiguous)
# --------------------------------------------------------------------------------------------
@lowers("transpose")
def _transpose(args, a, ins, out, b):
    perm, x = a["perm"], atom(args[0])
    rank, moved = len(perm), [i for i, p in enumerate(perm) if i != p]
    if not moved:
        return args[0]
    if len(moved) > 2:
        return f"{x}.permute{ints(perm)}"
    if rank == 2:
        return f"{x}.T"
    i, j = moved  # a permutation moving two axes swaps them
    return f"{x}.transpose(-2, -1)" if (i, j) == (rank - 2, rank - 1) else f"{x}.transpose({i}, {j})"


@lowers("reshape")
def _reshape(args, a, ins, out, b):
    return f"{atom(args[0])}.reshape{ints(out) if out else '(())'}"


@lowers("broadcast_to")
def _broadcast_to(args, a, ins, out, b):
    return args[0] if tuple(ins[0]) == tuple(out) else f"{atom(args[0])}.expand{ints(out) if out else '(())'}"


@lowers("expand_dims")
def _expand_dims(args, a, ins, out, b):
    return f"{atom(args[0])}.unsqueeze({a['axis']})"


@lowers("squeeze")
def _squeeze(args, a, ins, out, b):
    axes = a["axes"]
    return f"{atom(args[0])}.squeeze({_dims(axes, len(ins[0])) if len(axes) == 1 else ints(axes)})" if axes else args[0]


@lowers("slice")
def _slice(args, a, ins, out, b):
    rank, axis, size = len(ins[0]), a["axis"], ins[0][a["axis"]]
    start, stop = D.evaluate(a["start"], b), D.evaluate(a["stop"], b)
    part = (f"{start}" if start else "") + ":" + (f"{stop}" if stop < size else "")
    part += f":{a['step']}" if a["step"] != 1 else ""
    index = ["..."] if axis == rank - 1 and rank > 1 else [":"] * axis
    return f"{atom(args[0])}[{', '.join([*index, part])}]"


@lowers("concat")
def _concat(args, a, ins, out, b):
    return f"torch.cat([{', '.join(args)}], dim={dim_arg(a['axis'], len(ins[0]))})"


