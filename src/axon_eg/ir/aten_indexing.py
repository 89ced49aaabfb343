"""Handlers of the PyTorch front end for aten ops made of index arithmetic (part of :mod:`axon_eg.ir.torch_import`,
each registered in the table with :func:`~axon_eg.ir.aten_handlers.handles`): advanced indexing by integer
tensors (``x[idx]``, ``table[i, j]``), ``torch.roll``, ``torch.diff`` and the resampling of ``F.interpolate`` /
``nn.Upsample`` (nearest, nearest-exact, linear, bilinear, trilinear, bicubic, and the antialiased bilinear /
bicubic).

Each becomes registry ops only: ``index_select`` along one axis (the indexed axes moved in front and merged,
their indices combined into one flat index by integer multiply-adds), slices and concats, and for resampling,
per spatial axis, a weighted sum of ``index_select`` taps. Which input elements and weights a resampled element
takes is torch's own: read at import time by running the aten op itself on a one-hot probe along each axis
(the other spatial axes kept at size 1), so the taps, borders, clamping and ``align_corners`` / ``scale_factor``
rules are exactly torch's, in float64. An index that may be negative is wrapped as torch wraps it (``i + n``
where ``i < 0``), unless its values are constants of the program that are not (``torch.arange``'s, through views).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from axon_eg.ir.aten_handlers import Ctx, handles, ints, slice_tensor
from axon_eg.ir.builder import Value
from axon_eg.ir.dtypes import fp32, int64

# -- advanced indexing ----------------------------------------------------------------------------------
_VIEWS = frozenset({"expand_dims", "reshape", "broadcast_to", "squeeze", "transpose", "slice", "flip", "cast"})


def _nonnegative(cx: Ctx, v: Value) -> bool:
    """Whether every value of the integer tensor ``v`` is known to be >= 0: a constant, or a buffer the importer
    made from values computed in forward() (``torch.arange``), seen through views and casts."""
    nodes = v.builder.nodes
    node = nodes[v.id]
    while node.op in _VIEWS:
        node = nodes[node.inputs[0]]
    if node.op == "constant":
        return node.attrs["value"] >= 0
    if node.op == "input":
        values = cx.known(node.attrs["name"])
        return values is not None and bool(np.all(values >= 0))
    return False


def _wrapped(cx: Ctx, index: Value, size: int) -> Value:
    """``index`` with each negative entry counted from the end (``i + size`` where ``i < 0``), as torch reads it."""
    if _nonnegative(cx, index):
        return index
    negative = cx.binary("lt", index, 0)
    return cx.emit("where", negative, cx.binary("add", index, size), index)


@handles("aten.index.Tensor", "aten._unsafe_index.Tensor")
def _index(cx: Ctx, a: dict[str, Any]) -> Value:
    """``x[i0, :, i2]`` with integer tensors (``aten.index.Tensor``; ``None`` for an axis taken whole), NumPy's
    rule: the indices broadcast to one shape B, which replaces the indexed axes where they are adjacent, else
    leads the result. The indexed axes merged into one (moved in front first where they are not adjacent),
    the indices combined into one flat index (``i0 * n2 + i2``), then one ``index_select`` along the merged axis
    and a reshape that puts B in its place."""
    x, indices = a["self"], list(a["indices"])
    while indices and indices[-1] is None:
        indices.pop()
    if len(indices) > x.ndim:
        raise cx.unsupported(f"{len(indices)} indices for a tensor of rank {x.ndim}")
    for i in indices:
        if isinstance(i, Value) and i.dtype.kind == "bool":
            raise cx.unsupported("a boolean mask index selects a data-dependent number of elements; index with "
                                 "integer tensors, or use torch.where")
        if i is not None and (not isinstance(i, Value) or i.dtype.kind != "int"):
            raise cx.unsupported(f"index {i!r} is not an integer tensor")
    axes = [k for k, i in enumerate(indices) if i is not None]
    if not axes:
        return x
    block = tuple(int(d) for d in torch.broadcast_shapes(*(tuple(indices[k].shape) for k in axes)))
    if indices[axes[-1]].ndim == 0 and block:
        raise cx.unsupported("a 0-d index tensor after indices of more dims: torch.export's shape inference takes "
                             "the last index's shape for the result (a torch quirk; the kernel would disagree); "
                             "index with a Python int or a 1-element tensor there, or put it first")
    shape = tuple(int(d) for d in x.shape)
    sizes = [shape[k] for k in axes]
    idx = [_wrapped(cx, indices[k], n) for k, n in zip(axes, sizes)]
    first = axes[0]
    if axes != list(range(first, first + len(axes))):  # apart: the indexed axes go in front, B leads the result
        rest = [k for k in range(x.ndim) if k not in axes]
        x = cx.emit("transpose", x, perm=tuple(axes + rest))
        shape = tuple(sizes) + tuple(shape[k] for k in rest)
        first = 0
    before, after = shape[:first], shape[first + len(axes):]
    table = x if len(axes) == 1 else cx.emit("reshape", x, shape=before + (math.prod(sizes),) + after)
    flat = idx[0]
    for i, n in zip(idx[1:], sizes[1:]):
        flat = cx.binary("add", cx.binary("mul", flat, n), i)
    flat = flat if flat.shape == block else cx.emit("broadcast_to", flat, shape=block)
    count = math.prod(block)
    line = flat if flat.shape == (count,) else cx.emit("reshape", flat, shape=(count,))
    out = cx.emit("index_select", table, line, axis=first)
    want = before + block + after
    return out if out.shape == want else cx.emit("reshape", out, shape=want)


# -- roll and diff ----------------------------------------------------------------------------------------
def _rolled(cx: Ctx, x: Value, shift: int, axis: int) -> Value:
    n = int(x.shape[axis])
    s = shift % n if n else 0
    if not s:
        return x
    piece = [slice_tensor(cx, {"self": x, "dim": axis, "start": lo, "end": hi, "step": 1}) for lo, hi in ((n - s, n), (0, n - s))]
    return cx.emit("concat", *piece, axis=axis)


@handles("aten.roll.default")
def _roll(cx: Ctx, a: dict[str, Any]) -> Value:
    """``torch.roll``: per axis, the last ``shift`` elements concatenated before the rest; without ``dims``,
    the flattened tensor rolled and reshaped back."""
    x, shifts, dims = a["self"], ints(a["shifts"]), ints(a["dims"]) if a["dims"] is not None else ()
    if not dims:
        if len(shifts) != 1:
            raise cx.unsupported(f"shifts {list(shifts)} without dims must be one number")
        shape = tuple(int(d) for d in x.shape)
        flat = x if x.ndim == 1 else cx.emit("reshape", x, shape=(math.prod(shape),))
        out = _rolled(cx, flat, shifts[0], 0)
        return out if out.shape == shape else cx.emit("reshape", out, shape=shape)
    if len(shifts) != len(dims):
        raise cx.unsupported(f"shifts {list(shifts)} and dims {list(dims)} differ in length")
    for s, d in zip(shifts, dims):
        x = _rolled(cx, x, s, d % x.ndim)
    return x


@handles("aten.diff.default")
def _diff(cx: Ctx, a: dict[str, Any]) -> Value:
    """``torch.diff(x, n, dim, prepend, append)``: the pieces concatenated along ``dim``, then ``n`` times the
    next element minus this one (``!=`` on booleans, as torch); ``n = 0`` is ``x`` itself, as torch."""
    x, n = a["self"], int(a["n"])
    if n == 0:  # torch returns the input itself, without the pieces
        return x
    axis = a["dim"] % max(x.ndim, 1)
    parts = [p for p in (a["prepend"], x, a["append"]) if p is not None]
    if len(parts) > 1:
        x = cx.emit("concat", *parts, axis=axis)
    length = int(x.shape[axis])
    if n >= length:
        raise cx.unsupported(f"the {n}-th difference of {length} elements is empty; axon_eg has no empty tensors")
    for _ in range(n):
        length = int(x.shape[axis])
        later, earlier = (slice_tensor(cx, {"self": x, "dim": axis, "start": lo, "end": lo + length - 1, "step": 1})
                          for lo in (1, 0))
        x = cx.emit("logical_xor" if x.dtype.kind == "bool" else "sub", later, earlier)
    return x


# -- resampling: F.interpolate ------------------------------------------------------------------------------
def _upsample(spatial: int, corners: bool) -> Any:
    """``aten.upsample_*`` (``.vec`` and the sized overload) over the last ``spatial`` axes; ``corners``: the op
    takes ``align_corners``."""
    def handle(cx: Ctx, a: dict[str, Any]) -> Value:
        x = a.get("input", a.get("self"))
        packet = cx.aten.split(".")[1]
        out_sizes = cx.out_shape[-spatial:]
        if "scale_factors" in a:
            scales = list(a["scale_factors"]) if a["scale_factors"] else [None] * spatial
        else:
            scales = [a[k] for k in _SCALE_KEYS[spatial]]
        align = bool(a["align_corners"]) if corners else None
        if packet.endswith("_aa") and out_sizes[-1] == 1 and out_sizes[0] != int(x.shape[-2]):
            raise cx.unsupported("antialiased resampling to a width of 1: torch's CPU kernel then gives every "
                                 "row the first row's weights (a torch quirk, not imported); resize the height "
                                 "and the width in two calls")
        sized = getattr(torch.ops.aten, packet).default
        taps = [_taps(sized, align, int(x.shape[x.ndim - spatial + d]), int(out_sizes[d]), scales[d], d, spatial)
                for d in range(spatial)]
        weighted = any(len(t) > 1 or any(not np.all(w == 1.0) for _, w in t) for t in taps)
        if weighted and not x.dtype.is_float:
            raise cx.unsupported(f"{packet} of a {x.dtype.name} tensor (torch interpolates floats only)")
        low = weighted and x.dtype.name in ("bf16", "fp16")  # torch computes in float32 and rounds once
        y = cx.emit("cast", x, dtype=fp32) if low else x
        for d in reversed(range(spatial)):
            y = _resampled(cx, y, y.ndim - spatial + d, taps[d])
        return cx.emit("cast", y, dtype=x.dtype) if low else y

    return handle


for _packet, _n, _corners in (
        ("upsample_nearest1d", 1, False), ("upsample_nearest2d", 2, False), ("upsample_nearest3d", 3, False),
        ("_upsample_nearest_exact1d", 1, False), ("_upsample_nearest_exact2d", 2, False),
        ("_upsample_nearest_exact3d", 3, False), ("upsample_linear1d", 1, True), ("upsample_bilinear2d", 2, True),
        ("upsample_trilinear3d", 3, True), ("upsample_bicubic2d", 2, True), ("_upsample_bilinear2d_aa", 2, True),
        ("_upsample_bicubic2d_aa", 2, True)):
    handles(f"aten.{_packet}.vec", f"aten.{_packet}.default")(_upsample(_n, _corners))

_SCALE_KEYS = {1: ("scales",), 2: ("scales_h", "scales_w"), 3: ("scales_d", "scales_h", "scales_w")}


def _taps(sized: Any, align: bool | None, n_in: int, n_out: int, scale: float | None, d: int,
          spatial: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Axis ``d``'s resampling as torch computes it: [(input index, weight) per output element], one pair per
    tap, read by running ``sized`` (the op's sized overload) on the one-hot rows of an identity along that axis,
    every other spatial axis of size 2 kept at 2 (an unscaled axis, which torch copies; 2 channels and sizes of
    2, not 1, so that torch never reads the probe as channels-last: its antialiased kernels go wrong there)."""
    shape = [n_in, 2] + [2] * spatial
    shape[2 + d] = n_in
    sizes = [2] * spatial
    sizes[d] = n_out
    scales = [None] * spatial
    scales[d] = scale
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily(), torch.no_grad():
        along = [1] * (2 + spatial)
        along[0], along[2 + d] = n_in, n_in
        probe = torch.eye(n_in, dtype=torch.float64).reshape(along).expand(shape).contiguous()
        args = (probe, sizes) + ((align,) if align is not None else ()) + tuple(scales)
        out = sized(*args)[(slice(None), 0) + tuple(slice(None) if k == d else 0 for k in range(spatial))]
        weights = out.numpy()  # weights[j, o]: input j's weight in output o
    rows = [np.flatnonzero(weights[:, o]) for o in range(n_out)]
    k = max(1, max(len(r) for r in rows))
    taps = []
    for t in range(k):
        index = np.array([r[t] if t < len(r) else (r[0] if len(r) else 0) for r in rows], dtype=np.int64)
        weight = np.array([weights[r[t], o] if t < len(r) else 0.0 for o, r in enumerate(rows)])
        taps.append((index, weight))
    return taps


def _resampled(cx: Ctx, x: Value, axis: int, taps: list[tuple[np.ndarray, np.ndarray]]) -> Value:
    """sum over taps of weight * x[index] along ``axis`` (a weight of 1 and an index that is every element, each
    repeated r times or every step-th one read without a gather: a broadcast or a slice)."""
    n = int(x.shape[axis])
    out: Value | None = None
    for index, weight in taps:
        term = _picked(cx, x, axis, index, n)
        if not np.all(weight == 1.0):
            trailing = x.ndim - 1 - axis
            w = cx.buffer("resample_weight", weight.reshape((len(weight),) + (1,) * trailing), x.dtype)
            term = cx.emit("mul", term, w)
        out = term if out is None else cx.emit("add", out, term)
    assert out is not None
    return out


def _picked(cx: Ctx, x: Value, axis: int, index: np.ndarray, n: int) -> Value:
    m = len(index)
    if m == n and np.array_equal(index, np.arange(n)):
        return x
    if m % n == 0 and np.array_equal(index, np.arange(m) // (m // n)):  # each element repeated r times
        r = m // n
        shape = tuple(int(s) for s in x.shape)
        wide = cx.emit("broadcast_to", cx.emit("expand_dims", x, axis=axis + 1),
                       shape=shape[:axis + 1] + (r,) + shape[axis + 1:])
        return cx.emit("reshape", wide, shape=shape[:axis] + (m,) + shape[axis + 1:])
    step = int(index[1] - index[0]) if m > 1 else 1
    if step >= 1 and np.array_equal(index, index[0] + step * np.arange(m)):  # every step-th element: a slice
        start = int(index[0])
        return slice_tensor(cx, {"self": x, "dim": axis, "start": start, "end": start + step * (m - 1) + 1, "step": step})
    return cx.emit("index_select", x, cx.buffer("resample_index", index, int64), axis=axis)

