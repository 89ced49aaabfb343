"""``torch.einsum`` expanded into primitives the νGraph sees through: transposes, reshapes, broadcasts,
element-wise products, sums and matmuls.

The operands are contracted left to right. Before each step a label that no later operand and not the
output needs is summed out of the operand that alone holds it; then the two operands' labels fall into
batch labels (in both, still needed), contracted labels (in both, no longer needed), and labels of one
side only. With contracted labels the pair is one (batched) matmul ``[batch..., M, K] @ [batch..., K, N]``
(each side permuted and its labels grouped by a reshape); without, it is a broadcast product. The result
is permuted into the output's order. An ellipsis stands for the same run of fresh labels in every operand
(aligned from the right, as torch broadcasts them); a label repeated within one operand (a diagonal,
``"ii->i"``) is refused in one line.
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable, Sequence

from axon_eg.ir.builder import Value

Emit = Callable[..., Value]
_FRESH = string.ascii_uppercase + "αβγδεζηθικλμνξοπρστυφχψω"


class EinsumError(ValueError):
    """An equation this expansion does not take (the caller names the op and the user's line)."""


def parse(equation: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    """The operands' label strings and the output's, ellipses replaced by fresh labels, the implicit
    output (no ``->``: the labels seen once, sorted, after the ellipsis) made explicit."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise EinsumError(f"equation {equation!r} names {len(terms)} operands, {len(ranks)} given")
    used = set(eq) - set(".,->")
    if any(not c.isalpha() for c in used):
        raise EinsumError(f"equation {equation!r}: labels must be letters")
    fresh = [c for c in _FRESH if c not in used]
    ell = max((r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t), default=0)
    if ell > len(fresh):
        raise EinsumError(f"equation {equation!r}: an ellipsis of {ell} dims")
    dots = "".join(fresh[:ell])
    out_terms = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            n = r - len(t.replace("...", ""))
            t = t.replace("...", dots[ell - n:] if n else "")
        if len(t) != r:
            raise EinsumError(f"equation {equation!r}: operand {t!r} has {r} dims")
        if len(set(t)) != len(t):
            raise EinsumError(f"equation {equation!r}: a label repeated within one operand (a diagonal) "
                              "is not supported")
        out_terms.append(t)
    if arrow:
        out = rhs.replace("...", dots)
    else:
        counts = {c: sum(t.count(c) for t in out_terms) for c in set("".join(out_terms))}
        out = dots + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in dots))
    if len(set(out)) != len(out) or any(c not in "".join(out_terms) for c in out):
        raise EinsumError(f"equation {equation!r}: output labels {out!r} must be distinct operand labels")
    return out_terms, out


def expand(equation: str, operands: Sequence[Value], emit: Emit) -> Value:
    """``einsum(equation, *operands)`` built with ``emit(op, *inputs, **attrs)``."""
    terms, out = parse(equation, [x.ndim for x in operands])
    sizes: dict[str, int] = {}
    for t, x in zip(terms, operands):
        for c, d in zip(t, x.shape):
            d = int(d)
            if sizes.get(c, 1) not in (1, d) and d != 1:
                raise EinsumError(f"equation {equation!r}: label {c!r} has sizes {sizes[c]} and {d}")
            sizes[c] = max(sizes.get(c, 1), d)
    items = list(zip(terms, operands))
    acc_t, acc = _sum_unneeded(*items[0], [t for t, _ in items[1:]], out, emit)
    for k in range(1, len(items)):
        later = [t for t, _ in items[k + 1:]]
        t, x = _sum_unneeded(*items[k], [acc_t, *later], out, emit)
        acc_t, acc = _sum_unneeded(acc_t, acc, [t, *later], out, emit)
        acc_t, acc = _pair(acc_t, acc, t, x, set(out).union(*map(set, later)), sizes, emit)
    acc_t, acc = _sum_unneeded(acc_t, acc, [], out, emit)
    if acc_t != out:
        acc = emit("transpose", acc, perm=tuple(acc_t.index(c) for c in out))
    return acc


def _sum_unneeded(t: str, x: Value, others: Sequence[str], out: str, emit: Emit) -> tuple[str, Value]:
    """Sum out the labels of ``t`` that neither ``others`` nor the output hold."""
    needed = set(out).union(*map(set, others))
    axes = tuple(i for i, c in enumerate(t) if c not in needed)
    if not axes:
        return t, x
    return "".join(c for c in t if c in needed), emit("sum", x, axes=axes, keepdims=False)


def _broadcast(t: str, x: Value, order: str, emit: Emit) -> Value:
    """``x`` (labels ``t``, a subset of ``order``) permuted into ``order``'s relative order, with size-1
    dims where it lacks a label (the product with the other operand broadcasts them)."""
    kept = [c for c in order if c in t]
    if kept != list(t):
        x = emit("transpose", x, perm=tuple(t.index(c) for c in kept))
    if len(kept) != len(order):
        x = emit("reshape", x, shape=tuple(int(x.shape[kept.index(c)]) if c in t else 1 for c in order))
    return x


def _pair(ta: str, a: Value, tb: str, b: Value, needed: set[str], sizes: dict[str, int],
          emit: Emit) -> tuple[str, Value]:
    """Contract two operands: a (batched) matmul over the shared labels no longer needed, else a product."""
    shared = [c for c in ta if c in tb]
    contracted = [c for c in shared if c not in needed]
    batch = [c for c in shared if c in needed]
    only_a = [c for c in ta if c not in tb]
    only_b = [c for c in tb if c not in ta]
    if not contracted:  # a broadcast product over the union of the labels
        order = "".join(batch + only_a + only_b)
        xa, xb = _broadcast(ta, a, order, emit), _broadcast(tb, b, order, emit)
        return order, emit("mul", xa, xb)
    bshape = tuple(sizes[c] for c in batch)
    m, n, k = (math.prod(sizes[c] for c in cs) for cs in (only_a, only_b, contracted))
    xa = _grouped(ta, a, batch, only_a, contracted, sizes, bshape + (m, k), emit)
    xb = _grouped(tb, b, batch, contracted, only_b, sizes, bshape + (k, n), emit)
    y = emit("matmul", xa, xb)
    full = tuple(sizes[c] for c in batch + only_a + only_b)
    if tuple(int(d) for d in y.shape) != full:
        y = emit("reshape", y, shape=full)
    return "".join(batch + only_a + only_b), y


def _grouped(t: str, x: Value, batch: list[str], rows: list[str], cols: list[str], sizes: dict[str, int],
             shape: tuple[int, ...], emit: Emit) -> Value:
    order = "".join(batch + rows + cols)
    x = _broadcast(t, x, order, emit)
    full = tuple(sizes[c] for c in order)
    if tuple(int(d) for d in x.shape) != full:
        x = emit("broadcast_to", x, shape=full)
    return x if tuple(int(d) for d in x.shape) == shape else emit("reshape", x, shape=shape)
