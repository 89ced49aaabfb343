"""Attention through the library (``isa="sdpa"``): ``torch.nn.functional.scaled_dot_product_attention``
as the ISA choice of an attention group, next to our flash-attention kernel.

The group's pattern is the one the flash kernel matches (``attention_match.match``): q, k, v and the
additive mask are HBM buffers read through views, so each becomes a ``torch.as_strided`` view of its
buffer (broadcast heads, as in grouped-query attention, are stride 0: nothing is copied) and the library
picks its own kernel (FlashAttention, memory-efficient or math). A causal mask maps to ``is_causal`` only
in the library's own convention (key j <= query i, filled with -inf); another diagonal or fill stays with
our kernel. The result is copied into the group's output buffer (the library allocates its own).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from axon_eg.extract.fusion import ATTENTION, FusionPlan

from .attention_match import Attention, Operand, match
from .base import NotLowerable


@dataclass(frozen=True)
class Call:
    attention: Attention
    out: int  # the node the group writes


def core(plan: FusionPlan, gi: int) -> Call | None:
    """Group ``gi`` as one library attention call, or None."""
    if plan.groups[gi].kind != ATTENTION or len(plan.outputs_of(gi)) != 1:
        return None
    try:
        a = match(plan, gi)
    except NotLowerable:
        return None
    if a.causal is not None and a.causal != (0, -math.inf):
        return None
    return Call(a, plan.outputs_of(gi)[0])


def _view(buf: str, o: Operand, batch: tuple[int, ...], rows: int, cols: int) -> str:
    return f"torch.as_strided({buf}, {(*batch, rows, cols)}, {(*o.batch, o.rows, o.cols)})"


def source(call: Call, bufs: dict[int, str], out: str) -> list[str]:
    """The launcher lines; ``bufs`` names the buffer of every operand node."""
    a = call.attention
    q = _view(bufs[a.q.node], a.q, a.batch, a.s, a.d)
    k = _view(bufs[a.k.node], a.k, a.batch, a.t, a.d)
    v = _view(bufs[a.v.node], a.v, a.batch, a.t, a.dv)
    extra = [f"scale={a.scale!r}"]
    if a.mask is not None:
        extra.insert(0, f"attn_mask={_view(bufs[a.mask.node], a.mask, a.batch, a.s, a.t)}")
    if a.causal is not None:
        extra.append("is_causal=True")
    shape = (*a.batch, a.s, a.dv)
    return [f"    {out}.view{shape}.copy_(F.scaled_dot_product_attention({q}, {k}, {v}, {', '.join(extra)}))"]


def describe(call: Call) -> str:
    a = call.attention
    flags = (", causal" if a.causal else "") + (", additive mask" if a.mask is not None else "") + (
        f", {a.group} query heads per kv head" if a.group > 1 else "")
    return (f"library attention F.scaled_dot_product_attention over {a.heads} heads, {a.s} queries x {a.t} keys, "
            f"head dim {a.d}{flags}, scale {a.scale:.6g}")
