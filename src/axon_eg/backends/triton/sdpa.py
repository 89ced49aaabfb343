"""Attention through the library (``isa="sdpa"``): ``torch.nn.functional.scaled_dot_product_attention``
as the ISA choice of an attention group, next to our flash-attention kernel.

The group's pattern is the one the flash kernel matches (``attention_match.match``): q, k, v and the
additive mask are HBM buffers read through views, so each becomes a ``torch.as_strided`` view of its
buffer in the library's 4-D form ``[batch, heads, rows, cols]`` (its fused kernels take nothing else: a 5-D
call with the grouped-query heads broadcast at stride 0 ran the math fallback, 10.9 ms against 0.42 ms on
the H200). Grouped-query heads are passed as fewer key/value heads with ``enable_gqa=True``. A causal
mask maps to ``is_causal`` only in the library's own convention (key j <= query i, filled with -inf);
another diagonal or fill stays with our kernel. The result is copied into the group's output buffer (the
library allocates its own).
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
    heads: tuple[int, int]  # (batch, query heads) of the 4-D call
    kv_heads: int  # key / value heads (fewer than the query heads: grouped-query attention, ``enable_gqa``)
    strides: dict[str, tuple[int, int] | None]  # per operand role: its (batch, head) strides in the 4-D call;
    # None: its batch dims do not fold into two strides (a value broadcast over the query heads of a call
    # whose keys are already per query head): the view over all of them, reshaped to 4-D (a copy, as eager's
    # ``repeat_interleave`` makes)
    batch: tuple[int, ...] = ()  # the attention's batch dims (for the roles whose strides are None)


def _merge(sizes: tuple[int, ...], strides: tuple[int, ...]) -> int | None:
    """The stride of one dim standing for the row-major nest of ``sizes`` (size-1 dims ignored; 0 when none
    is above 1), or None when they do not nest."""
    dims = [(size, stride) for size, stride in zip(sizes, strides) if size != 1]
    if not dims:
        return 0
    if any(outer[1] != inner[1] * inner[0] for outer, inner in zip(dims, dims[1:])):
        return None
    return dims[-1][1]


def core(plan: FusionPlan, gi: int) -> Call | None:
    """Group ``gi`` as one library attention call in the library's 4-D form ``[batch, heads, rows, cols]``,
    or None: the batch dims of q, k, v (and the mask) must fold into (batch, heads), grouped-query heads
    being the innermost batch dim that k and v broadcast over."""
    if plan.groups[gi].kind != ATTENTION or len(plan.outputs_of(gi)) != 1:
        return None
    try:
        a = match(plan, gi)
    except NotLowerable:
        return None
    if a.causal is not None and a.causal != (0, -math.inf):
        return None
    roles = {"q": a.q, "k": a.k, "v": a.v, **({"mask": a.mask} if a.mask is not None else {})}
    sizes = a.batch
    group = 1
    if a.group > 1:  # the innermost batch dim is the query heads of one key/value head
        if a.mask is not None or len(sizes) < 2 or not (a.k.batch[-1] == a.v.batch[-1] == 0 != a.q.batch[-1]):
            return None
        group = sizes[-1]
    lead, heads = (sizes[:-2], sizes[-2:]) if len(sizes) >= 2 else ((), sizes)
    strides: dict[str, tuple[int, int]] = {}
    for role, o in roles.items():
        kv = role in ("k", "v") and group > 1
        head_sizes = heads[:-1] if kv else heads
        b = _merge(lead, o.batch[:len(lead)])
        h = _merge(head_sizes, o.batch[len(lead):len(lead) + len(head_sizes)])
        strides[role] = None if b is None or h is None else (b, h)
    n_heads = math.prod(heads)
    return Call(a, plan.outputs_of(gi)[0], (math.prod(lead), n_heads), n_heads // group, strides, tuple(sizes))


def _view(buf: str, call: Call, role: str, o: Operand, rows: int, cols: int) -> str:
    """The operand in the library's 4-D form; copied to row-major when its last dim is not unit-stride (a
    transposed key buffer): the library's fused kernels need that, its fallback materializes the scores
    (4.2 ms against 0.55 ms for our kernel, measured on an H100 for 32 heads x 2048 x 128, causal)."""
    heads = call.kv_heads if role in ("k", "v") else call.heads[1]
    dense = "" if o.cols == 1 or cols == 1 else ".contiguous()"
    at = f", {buf}.storage_offset() + {o.offset}" if o.offset else ""  # a slice (a fused qkv's chunk) of the buffer
    if call.strides[role] is None:  # every batch dim of its own, then the 4-D form (reshape copies)
        kv = role in ("k", "v") and call.kv_heads != call.heads[1]
        sizes, strides = (call.batch[:-1], o.batch[:-1]) if kv else (call.batch, o.batch)
        return (f"torch.as_strided({buf}, {(*sizes, rows, cols)}, {(*strides, o.rows, o.cols)}{at})"
                f".reshape{(call.heads[0], heads, rows, cols)}{dense}")
    b, h = call.strides[role]
    return f"torch.as_strided({buf}, {(call.heads[0], heads, rows, cols)}, {(b, h, o.rows, o.cols)}{at}){dense}"


def source(call: Call, bufs: dict[int, str], out: str) -> list[str]:
    """The launcher lines copying the attention into the buffer ``out``; ``bufs`` names the buffer of every
    operand node."""
    shape = (*call.heads, call.attention.s, call.attention.dv)
    return [f"    {out}.view{shape}.copy_({expression(call, bufs)})"]


def bound(call: Call, bufs: dict[int, str], name: str, shape: tuple[int, ...], contiguous: bool = False) -> list[str]:
    """The launcher line binding ``name`` to the library's own result tensor, of the node's ``shape``
    (no copy where the shapes agree; torch's result may be strided, as eager's is): for a kernel that
    returns its outputs. ``contiguous``: other kernels read it too, as a row-major buffer."""
    four = (*call.heads, call.attention.s, call.attention.dv)
    tail = ("" if tuple(shape) == four else f".reshape{tuple(shape)}") + (".contiguous()" if contiguous else "")
    return [f"    {name} = {expression(call, bufs)}{tail}"]


def expression(call: Call, bufs: dict[int, str]) -> str:
    """The ``F.scaled_dot_product_attention`` call on 4-D views of the operands."""
    a = call.attention
    q = _view(bufs[a.q.node], call, "q", a.q, a.s, a.d)
    k = _view(bufs[a.k.node], call, "k", a.k, a.t, a.d)
    v = _view(bufs[a.v.node], call, "v", a.v, a.t, a.dv)
    extra = [f"scale={a.scale!r}"]
    if a.mask is not None:
        extra.insert(0, f"attn_mask={_view(bufs[a.mask.node], call, 'mask', a.mask, a.s, a.t)}")
    if a.causal is not None:
        extra.append("is_causal=True")
    if call.kv_heads != call.heads[1]:
        extra.append("enable_gqa=True")
    return f"F.scaled_dot_product_attention({q}, {k}, {v}, {', '.join(extra)})"


def describe(call: Call) -> str:
    a = call.attention
    flags = (", causal" if a.causal else "") + (", additive mask" if a.mask is not None else "") + (
        f", {a.group} query heads per kv head" if a.group > 1 else "")
    return (f"library attention F.scaled_dot_product_attention over {a.heads} heads, {a.s} queries x {a.t} keys, "
            f"head dim {a.d}{flags}, scale {a.scale:.6g}")
