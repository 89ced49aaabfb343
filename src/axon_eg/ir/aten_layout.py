"""Handlers of the PyTorch front end for layout ops (part of :mod:`axon_eg.ir.torch_import`, each registered
in the table with :func:`~axon_eg.ir.aten_handlers.handles`): views and permutations, flips, squeezes, slices
and narrowing, repeats, padding, triangles and diagonals, einsum, select; joining tensors (cat, stack and the
``*stack`` forms: one concat of every tensor, whatever their number) and the multi-output layout ops
(broadcast_tensors, split and chunk).
"""

from __future__ import annotations

import math
from typing import Any

from axon_eg.ir.aten_handlers import Ctx, Handler, handles, ints, slice_tensor
from axon_eg.ir.builder import Value
from axon_eg.ir.einsum import EinsumError, expand


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
