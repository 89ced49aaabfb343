"""Triton expressions for the registry's element-wise ops, looked up by op name.

Each entry maps the argument expressions (fp32 Triton values) and the node's attributes to one
expression. Only ``tl`` core functions are used (no libdevice), so the same source runs under
``TRITON_INTERPRET=1`` and on every GPU Triton supports; ``tanh`` goes through ``exp``, which
saturates correctly at both ends. An op without an entry is lowered by the torch fallback; the
test ``tests/backends/test_triton.py`` lists which registry ops have no Triton lowering yet.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from axon_eg.ir import ops as O

Lowering = Callable[[Sequence[str], Mapping[str, Any]], str]

_SQRT_HALF = repr(math.sqrt(0.5))
_GELU_C = repr(math.sqrt(2.0 / math.pi))


def lit(v: float) -> str:
    """A float literal Triton accepts (inf and nan through float())."""
    v = float(v)
    if math.isinf(v):
        return 'float("inf")' if v > 0 else 'float("-inf")'
    if math.isnan(v):
        return 'float("nan")'
    return repr(v)


def _sigmoid(x: str) -> str:
    # exp(-x) overflowing to inf for x < -88 gives 1 / inf = 0, the fp32 value anyway, and for very
    # negative x the quotient keeps its relative precision (no 1 - tiny cancellation)
    return f"(1.0 / (1.0 + tl.exp(-({x}))))"


def _tanh(x: str) -> str:
    return f"(1.0 - 2.0 / (tl.exp(2.0 * ({x})) + 1.0))"


def _softplus(x: str, beta: float, threshold: float) -> str:
    bx = f"({lit(beta)} * ({x}))"
    return f"tl.where({bx} > {lit(threshold)}, {x}, tl.log(1.0 + tl.exp({bx})) / {lit(beta)})"


def _gelu(x: str, approximate: str) -> str:
    if approximate == "tanh":
        return f"(0.5 * ({x}) * (1.0 + {_tanh(f'{_GELU_C} * (({x}) + 0.044715 * ({x}) * ({x}) * ({x}))')}))"
    return f"(0.5 * ({x}) * (1.0 + tl.erf(({x}) * {_SQRT_HALF})))"


def _pow(x: str, e: float) -> str:
    if float(e).is_integer() and 0 <= e <= 4:
        return "(" + " * ".join([f"({x})"] * int(e)) + ")" if e else "1.0"
    if e == 0.5:
        return f"tl.sqrt({x})"
    if e == -0.5:
        return f"tl.rsqrt({x})"
    if float(e).is_integer() and -4 <= e < 0:
        return f"(1.0 / {_pow(x, -e)})"
    return f"tl.exp({lit(e)} * tl.log({x}))"  # the registry's pow is defined for x > 0 here


def _clamp(x: str, lo: float, hi: float) -> str:
    out = x
    if lo != -math.inf:
        out = f"tl.maximum({out}, {lit(lo)})"
    if hi != math.inf:
        out = f"tl.minimum({out}, {lit(hi)})"
    return out


def _bool(test: str) -> str:
    """A boolean value as the emitters carry every value: an fp32 0.0 or 1.0 (stored to a bool output as is)."""
    return f"tl.where({test}, 1.0, 0.0)"


def _cast(x: str, dtype: Any) -> str:
    name = str(dtype)
    if name == "bool":
        return _bool(f"({x}) != 0.0")
    if name in ("bf16", "bfloat16"):
        return f"({x}).to(tl.bfloat16).to(tl.float32)"
    if name in ("fp16", "float16"):
        return f"({x}).to(tl.float16).to(tl.float32)"
    return x  # fp32 (the compute type); fp64 groups are never lowered to Triton


def _round_half_even(x: str) -> str:
    """torch.round: the nearest integer, a half to the even one. floor(x + 0.5), one less where that landed
    on an odd integer from exactly halfway; from 2**23 up every fp32 is an integer (and x + 0.5 would round)."""
    r = f"tl.floor(({x}) + 0.5)"
    near = f"tl.where((({r}) - ({x}) == 0.5) & ((({r}) * 0.5) != tl.floor(({r}) * 0.5)), ({r}) - 1.0, {r})"
    return f"tl.where(tl.abs({x}) < 8388608.0, {near}, {x})"


ELEMENTWISE: dict[str, Lowering] = {
    "neg": lambda a, _: f"(-({a[0]}))",
    "exp": lambda a, _: f"tl.exp({a[0]})",
    "log": lambda a, _: f"tl.log({a[0]})",
    "sqrt": lambda a, _: f"tl.sqrt({a[0]})",
    "rsqrt": lambda a, _: f"tl.rsqrt({a[0]})",
    "reciprocal": lambda a, _: f"(1.0 / ({a[0]}))",
    "abs": lambda a, _: f"tl.abs({a[0]})",
    "square": lambda a, _: f"(({a[0]}) * ({a[0]}))",
    "relu": lambda a, _: f"tl.maximum({a[0]}, 0.0)",
    "leaky_relu": lambda a, t: f"tl.where(({a[0]}) >= 0.0, {a[0]}, {lit(t['slope'])} * ({a[0]}))",
    "sigmoid": lambda a, _: _sigmoid(a[0]),
    "tanh": lambda a, _: _tanh(a[0]),
    "silu": lambda a, _: f"(({a[0]}) / (1.0 + tl.exp(-({a[0]}))))",
    "gelu": lambda a, t: _gelu(a[0], t["approximate"]),
    "mish": lambda a, _: f"(({a[0]}) * {_tanh(_softplus(a[0], 1.0, 20.0))})",
    "hardswish": lambda a, _: f"(({a[0]}) * {_clamp(f'({a[0]}) + 3.0', 0.0, 6.0)} / 6.0)",
    "hardsigmoid": lambda a, _: _clamp(f"({a[0]}) / 6.0 + 0.5", 0.0, 1.0),
    "softplus": lambda a, t: _softplus(a[0], t["beta"], t["threshold"]),
    "clamp": lambda a, t: _clamp(a[0], t["lo"], t["hi"]),
    "pow": lambda a, t: _pow(a[0], t["exponent"]),
    "erf": lambda a, _: f"tl.erf({a[0]})",
    "sin": lambda a, _: f"tl.sin({a[0]})",
    "cos": lambda a, _: f"tl.cos({a[0]})",
    "floor": lambda a, _: f"tl.floor({a[0]})",
    "ceil": lambda a, _: f"tl.ceil({a[0]})",
    "trunc": lambda a, _: f"tl.where(({a[0]}) >= 0.0, tl.floor({a[0]}), tl.ceil({a[0]}))",
    "round": lambda a, _: _round_half_even(a[0]),
    "sign": lambda a, _: f"tl.where(({a[0]}) > 0.0, 1.0, tl.where(({a[0]}) < 0.0, -1.0, {a[0]}))",
    "cast": lambda a, t: _cast(a[0], t["dtype"]),
    "add": lambda a, _: f"(({a[0]}) + ({a[1]}))",
    "sub": lambda a, _: f"(({a[0]}) - ({a[1]}))",
    "mul": lambda a, _: f"(({a[0]}) * ({a[1]}))",
    "div": lambda a, _: f"(({a[0]}) / ({a[1]}))",
    "maximum": lambda a, _: f"tl.maximum({a[0]}, {a[1]})",
    "minimum": lambda a, _: f"tl.minimum({a[0]}, {a[1]})",
    **{op: (lambda a, _, _s=sym: _bool(f"({a[0]}) {_s} ({a[1]})")) for op, sym in (
        ("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="), ("eq", "=="), ("ne", "!="))},
    **{op: (lambda a, _, _s=sym: _bool(f"(({a[0]}) != 0.0) {_s} (({a[1]}) != 0.0)")) for op, sym in (
        ("logical_and", "&"), ("logical_or", "|"), ("logical_xor", "^"))},
    "logical_not": lambda a, _: _bool(f"({a[0]}) == 0.0"),
    "where": lambda a, _: f"tl.where(({a[0]}) != 0.0, {a[1]}, {a[2]})",
}
"""Element-wise op name -> Triton expression builder (fp32 in, fp32 out; booleans as 0.0 / 1.0)."""

# Row reductions over the last axis: the tl function; the masked-lane fill is the registry's identity.
_REDUCE_FNS = {
    "sum": "tl.sum",
    "mean": "tl.sum",
    "max": "tl.max",
    "min": "tl.min",
}
REDUCTIONS: dict[str, tuple[str, str]] = {name: (lit(O.identity(name)), fn) for name, fn in _REDUCE_FNS.items()}
"""Reduction op name -> (neutral element, Triton reduction); logsumexp is built from max and sum."""


def mean_scale(op: str, count: int) -> float | None:
    """What a row reduction's accumulated sum over ``count`` elements is multiplied by to give its value:
    ``1 / count`` for a mean (its ``REDUCTIONS`` entry accumulates a sum); None for the others, whose value
    is their accumulator."""
    return 1.0 / count if op == "mean" else None


def finish(op: str, acc: str, count: int) -> str:
    """A row reduction's value from its accumulator expression ``acc`` over ``count`` elements (``mean_scale``)."""
    scale = mean_scale(op, count)
    return acc if scale is None else f"{acc} * {scale!r}"
