"""What a value can be where its domain fails: NaN, +inf, -inf, or a finite number.

The normal forms (``nf``) and their domains (``domains``) say what a side is where every partial
function it applies is inside its domain, and nothing outside. Equality of two sides (``prover``) is
the float64 reference's: at every input both are finite and equal, or both are not finite. Equal
domains and equal values on them give that only if, outside the domain, each side is *not finite*:
``log(x) * 0`` is NaN at x = -1 and ``0`` is not, but ``relu(log x)`` is 0 at x = 0 (relu(-inf)),
``(log x > 0)`` is 0 at x = -1 (NaN > 0 is false) and ``where(log x > 0, log x, 0)`` is then 0, while
``relu(log x)`` is NaN there.

``Kinds`` follows IEEE arithmetic (NumPy's float64, which the reference is) through a program: for each
node, the set of kinds its value can take where its domain fails (empty where the node has no
condition). A partial op adds its own failures (log: NaN below 0, -inf at 0; reciprocal: +-inf; ...),
every op maps its operands' kinds (exp(-inf) = 0 and 1/inf = 0 are finite, max(-inf, y) = y, a
comparison or a cast to an integer is always finite, NaN propagates through arithmetic, max / min and
sums), and ``where`` gives its branches' kinds, plus a finite one where its condition itself fails. A
side whose kinds include ``FINITE`` may be finite where its domain fails, and the prover does not admit
the identity (``unknown``): what it is there is nothing the normal forms say. Signed zeros are why
1/x is +inf or -inf and rsqrt(x) may be -inf (1/sqrt(-0.0)); x ** 0 is 1 even for NaN, so ``pow`` with
exponent 0 has no condition at all (``op_semantics``).

The analysis is per node, not per element, and over-approximates: a ``FINITE`` it reports may not be
reachable (the identity is then unknown, never wrongly proved).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import product
from typing import Any

from axon_eg.ir import ops as O
from axon_eg.ir.program import Program

NAN, PINF, NINF, FINITE = "NaN", "+inf", "-inf", "finite"
ALL = frozenset((NAN, PINF, NINF, FINITE))
INF = frozenset((PINF, NINF))
Kinds = frozenset

# -- unary ops: operand kind -> result kinds -------------------------------------------------------


def _unary(nan: Iterable[str] = (NAN,), pinf: Iterable[str] = (PINF,), ninf: Iterable[str] = (NINF,),
           finite: Iterable[str] = (FINITE,)) -> dict[str, frozenset]:
    return {NAN: frozenset(nan), PINF: frozenset(pinf), NINF: frozenset(ninf), FINITE: frozenset(finite)}


_BOUNDED = _unary(pinf=(FINITE,), ninf=(FINITE,))  # +-inf -> +-1, 0, ...
_TO_FINITE = _unary(nan=(FINITE,), pinf=(FINITE,), ninf=(FINITE,))  # comparisons, logic, casts to int / bool
_UNKNOWN = _unary(pinf=ALL, ninf=ALL)  # NaN propagates; an infinity may become anything

UNARY: dict[str, dict[str, frozenset]] = {
    "neg": _unary(pinf=(NINF,), ninf=(PINF,)),
    "exp": _unary(ninf=(FINITE,)),  # exp(-inf) = 0
    "log": _unary(ninf=(NAN,)),
    "sqrt": _unary(ninf=(NAN,)),
    "rsqrt": _unary(pinf=(FINITE,), ninf=(NAN,)),  # 1/sqrt(inf) = 0
    "reciprocal": _unary(pinf=(FINITE,), ninf=(FINITE,)),  # 1/inf = 0
    "abs": _unary(ninf=(PINF,)),
    "square": _unary(ninf=(PINF,)),
    "relu": _unary(ninf=(FINITE,)),  # max(-inf, 0) = 0
    "leaky_relu": _unary(pinf=(PINF, NINF, NAN), ninf=(PINF, NINF, NAN)),  # slope * inf: its sign, or 0 * inf
    "sigmoid": _BOUNDED, "tanh": _BOUNDED, "erf": _BOUNDED, "hardsigmoid": _BOUNDED,
    "sin": _unary(pinf=(NAN,), ninf=(NAN,)), "cos": _unary(pinf=(NAN,), ninf=(NAN,)),
    "logical_not": _TO_FINITE,
}

# The failures of a partial op's own condition (its operands inside their domains): NumPy's values.
OWN: dict[str, frozenset] = {
    "log": frozenset((NAN, NINF)),  # log(x < 0), log(0)
    "sqrt": frozenset((NAN,)),
    "rsqrt": frozenset((NAN, PINF, NINF)),  # 1/sqrt(-0.0) = -inf
    "reciprocal": INF,
    "div": frozenset((NAN, PINF, NINF)),  # x / 0, 0 / 0
}


def _pow(exponent: float) -> tuple[dict[str, frozenset], frozenset]:
    """``x ** e``'s map and own failures (NumPy's power)."""
    integer = exponent == int(exponent)
    if exponent > 0:
        ninf = (PINF,) if integer and int(exponent) % 2 == 0 else (NINF,) if integer else (PINF, NAN)
        return _unary(ninf=ninf), frozenset() if integer else frozenset((NAN,))
    if integer:  # a negative integer power: +-inf at 0
        return _unary(pinf=(FINITE,), ninf=(FINITE,)), INF
    return _unary(pinf=(FINITE,), ninf=(FINITE,)), frozenset((NAN, PINF))


def _clamp(lo: float, hi: float) -> dict[str, frozenset]:
    return _unary(pinf=(PINF,) if hi == math.inf else (FINITE,), ninf=(NINF,) if lo == -math.inf else (FINITE,))


# -- binary ops: (kind, kind) -> result kinds ------------------------------------------------------
def _add(a: str, b: str) -> frozenset:
    if NAN in (a, b) or {a, b} == INF:
        return frozenset((NAN,))
    for inf in (PINF, NINF):
        if inf in (a, b):
            return frozenset((inf,))
    return frozenset((FINITE,))


def _neg(k: str) -> str:
    return {PINF: NINF, NINF: PINF}.get(k, k)


def _mul(a: str, b: str) -> frozenset:
    if NAN in (a, b):
        return frozenset((NAN,))
    if a == b == FINITE:
        return frozenset((FINITE,))
    if FINITE in (a, b):  # the finite factor's sign, or 0 * inf
        return frozenset((PINF, NINF, NAN))
    return INF


def _div(a: str, b: str) -> frozenset:
    if NAN in (a, b) or (a in INF and b in INF):
        return frozenset((NAN,))
    if b in INF:
        return frozenset((FINITE,))  # x / inf = 0
    if a in INF:
        return INF
    return frozenset((FINITE,))


def _extreme(big: str) -> Callable[[str, str], frozenset]:
    """maximum (``big`` = +inf) or minimum (-inf): NaN propagates, the other infinity is the other operand."""
    small = _neg(big)

    def f(a: str, b: str) -> frozenset:
        if NAN in (a, b):
            return frozenset((NAN,))
        if big in (a, b):
            return frozenset((big,))
        if a == small:
            return frozenset((b,))
        if b == small:
            return frozenset((a,))
        return frozenset((FINITE,))

    return f


def _finite(a: str, b: str) -> frozenset:
    return frozenset((FINITE,))


def _unknown(a: str, b: str) -> frozenset:
    return frozenset((NAN,)) if NAN in (a, b) else ALL


BINARY: dict[str, Callable[[str, str], frozenset]] = {
    "add": _add, "sub": lambda a, b: _add(a, _neg(b)), "mul": _mul, "div": _div,
    "maximum": _extreme(PINF), "minimum": _extreme(NINF),
    **{op: _finite for op in ("gt", "ge", "lt", "le", "eq", "ne", "logical_and", "logical_or", "logical_xor")},
}
_REDUCE = {"sum": _add, "mean": _add, "max": _extreme(PINF), "min": _extreme(NINF)}
_SAME = frozenset(O.views()) | {"transpose", "slice", "flip", "broadcast_to", "expand_dims", "squeeze", "reshape",
                                "causal_mask"}


def closure(kinds: frozenset, f: Callable[[str, str], frozenset]) -> frozenset:
    """The kinds of a fold of ``f`` over elements of which some take ``kinds`` and the rest are finite."""
    out = kinds
    while True:
        more = out | frozenset(k for a in out for b in out | {FINITE} for k in f(a, b))
        if more == out:
            return out
        out = more


def lift(f: Callable[..., frozenset], operands: Sequence[frozenset]) -> frozenset:
    """The kinds of ``f`` where at least one operand is outside its domain (the others may be finite)."""
    out: set[str] = set()
    for picks in product(*(sorted(k | {FINITE}) for k in operands)):
        if any(p in k for p, k in zip(picks, operands)):
            out |= f(*picks)
    return frozenset(out)


def _map(table: Mapping[str, frozenset], kinds: frozenset) -> frozenset:
    return frozenset(k for x in kinds for k in table[x])


def node_kinds(program: Program, i: int, operands: Sequence[frozenset]) -> tuple[frozenset, str]:
    """The kinds of node ``i`` where its domain fails, given its operands' (``operands``), and why a
    ``FINITE`` is among them when no operand's kinds had it ("" otherwise)."""
    node = program.nodes[i]
    op, a = node.op, node.attrs
    own: frozenset = OWN.get(op, frozenset())
    if op == "pow":
        table, own = _pow(a["exponent"])
        out = _map(table, operands[0])
    elif op == "clamp":
        out = _map(_clamp(a["lo"], a["hi"]), operands[0])
    elif op == "cast":
        out = operands[0] if a["dtype"].kind == "float" else _map(_TO_FINITE, operands[0])
    elif op in UNARY:
        out = _map(UNARY[op], operands[0])
    elif op == "where":  # a branch's kinds where it is selected; either branch's value where the condition fails
        out = operands[1] | operands[2] | (frozenset((FINITE,)) if operands[0] else frozenset())
    elif op in BINARY:
        out = lift(BINARY[op], operands)
    elif op in _REDUCE:
        out = closure(operands[0], _REDUCE[op])
    elif op == "cumsum":
        out = closure(operands[0], _add)
    elif op == "matmul":
        out = closure(lift(_mul, operands), _add)
    elif O.get(op).meta.get("shape_family") == "conv":  # a sum of weight x input products, a read outside
        # the input a zero that multiplies too (0 * inf is NaN in the reference, torch's float64 convolution)
        out = closure(lift(_mul, operands[:2]), _add) if any(operands[:2]) else frozenset()
        if len(operands) == 3:
            out = lift(_add, [out, operands[2]])
    elif op in _SAME or op == "concat":
        out = frozenset().union(*operands)
    elif len(operands) == 1 and O.get(op).kind == O.OpKind.ELEMENTWISE and not O.get(op).meta.get("logical"):
        out = _map(_UNKNOWN, operands[0])
    else:  # library, opaque, index-reading, logsumexp, ...: anything
        out = ALL if any(operands) else frozenset()
    out = out | own
    if FINITE in out and not any(FINITE in k for k in operands):
        given = sorted(frozenset().union(*operands))
        return out, f"{op} of {' or '.join(given) if given else 'a value outside its domain'} may be finite"
    return out, ""


def kinds_of(program: Program, partial: Iterable[int]) -> list[tuple[frozenset, str]]:
    """Every node's kinds where its domain fails and the first reason a ``FINITE`` entered; ``partial``:
    the nodes that have a domain condition (the others are defined everywhere: no kinds)."""
    partial = set(partial)
    out: list[tuple[frozenset, str]] = []
    for i, node in enumerate(program.nodes):
        if i not in partial:
            out.append((frozenset(), ""))
            continue
        operands = [out[j][0] for j in node.inputs]
        kinds, why = node_kinds(program, i, operands)
        if not why:
            why = next((out[j][1] for j in node.inputs if FINITE in out[j][0]), "")
        out.append((kinds, why))
    return out


def describe(kinds: Any) -> str:
    return ", ".join(sorted(kinds)) or "nothing"
