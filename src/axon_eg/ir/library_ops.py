"""Opaque library ops: convolutions, pooling and sorting (sort, argsort, topk). Later stages fuse around them, never through them.

A convolution's bias is one value per output channel added to its result (:data:`BIAS_AFTER`): an
expanded program (``Program.expand``) computes ``conv(x, w) + bias`` with the add in the epilogue, where
the fused kernel adds it for free; torch's cuDNN path adds it in a pass of its own over the output, which
torch.compile also moves into its epilogue.

Their float64 reference runs through ``torch.nn.functional`` (imported lazily). Spatial attributes
accept an int or a per-axis tuple and are stored as per-axis tuples.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from axon_eg.errors import ShapeError
from axon_eg.ir import dims as D
from axon_eg.ir.dims import Dim, Shape
from axon_eg.ir.ops import Attr, Attrs, OpDef, OpKind, fmt, index_result, normalize_axis, promoted, register, same_dtype


def _torch_ref(fn_name: str, **fixed: Any):
    def ref(xs: tuple[np.ndarray, ...], a: Attrs) -> np.ndarray:
        import torch
        import torch.nn.functional as F

        tensors = [torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64)) for x in xs]
        kwargs = {k: (list(v) if isinstance(v, tuple) else v) for k, v in a.items()}
        with torch.no_grad():
            return getattr(F, fn_name)(*tensors, **kwargs, **fixed).numpy()

    return ref


def _per_axis(a: Attrs, n: int, names: tuple[str, ...], defaults: dict[str, Any]) -> Attrs:
    changes = {}
    for name in names:
        v = a[name]
        if v == () and name in defaults:
            v = defaults[name]
        if len(v) == 1:
            v = v * n
        if len(v) != n:
            raise ShapeError(f"{name}={a[name]} needs 1 or {n} entries")
        changes[name] = tuple(v)
    return a.replace(**changes)


def _window(size: Dim, kernel: Dim, stride: int, padding: int, dilation: int, ceil_mode: bool = False) -> Dim:
    span = D.add(D.add(size, D.mul(2, padding)), D.add(D.mul(D.mul(-1, dilation), D.add(kernel, -1)), -1))
    if not ceil_mode:
        return D.add(D.floordiv(span, stride), 1)
    if not isinstance(span, int):
        raise ShapeError("ceil_mode=True needs concrete spatial sizes")
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + padding:  # the last window must start inside the input
        out -= 1
    return out


# -- convolutions -------------------------------------------------------------------------------
CONV_FAMILIES = ("conv", "conv_transpose")
"""The shape families of the convolutions (``meta["shape_family"]``)."""
BIAS_AFTER: set[str] = set()
"""Library ops whose third input is a per-channel bias added to their result (the convolutions)."""


def _conv(n: int) -> None:
    name = f"conv{n}d"
    BIAS_AFTER.add(name)

    def canon(shapes: tuple[Shape, ...], a: Attrs) -> Attrs:
        a = _per_axis(a, n, ("stride", "padding", "dilation"), {})
        x, w = shapes[0], shapes[1]
        if len(x) != n + 2 or len(w) != n + 2:
            raise ShapeError(f"input must be [N, C, {n} spatial], weight [Cout, C/groups, {n} kernel]; "
                             f"got {fmt(x)} and {fmt(w)}")
        g = a["groups"]  # an int, or a symbolic dim in a proof obligation (``Builder._attrs``)
        if (isinstance(g, int) and g < 1) or D.mul(w[1], g) != x[1]:
            raise ShapeError(f"input has {x[1]} channels, weight expects {w[1]} x groups={g}")
        if isinstance(w[0], int) and isinstance(g, int) and w[0] % g:
            raise ShapeError(f"{w[0]} output channels do not split into groups={g}")
        if len(shapes) == 3 and shapes[2] != (w[0],):
            raise ShapeError(f"bias must be [{w[0]}], got {fmt(shapes[2])}")
        return a

    def shape(shapes: tuple[Shape, ...], a: Attrs) -> Shape:
        x, w = shapes[0], shapes[1]
        spatial = tuple(
            _window(x[2 + i], w[2 + i], a["stride"][i], a["padding"][i], a["dilation"][i]) for i in range(n)
        )
        return (x[0], w[0], *spatial)

    register(OpDef(
        name, OpKind.LIBRARY, (2, 3), shape=shape, dtype=promoted, reference=_torch_ref(name),
        attrs=(Attr("stride", "ints", (1,)), Attr("padding", "ints", (0,)), Attr("dilation", "ints", (1,)),
               Attr("groups", "int", 1)),
        canon=canon, accumulates=True, inputs=("x", "weight", "bias"),
        doc=f"{n}-d convolution (cross-correlation) as torch.nn.functional.{name}",
        meta={"spatial": n, "shape_family": "conv"},
    ))


def _conv_transpose(n: int) -> None:
    name = f"conv_transpose{n}d"
    BIAS_AFTER.add(name)

    def canon(shapes: tuple[Shape, ...], a: Attrs) -> Attrs:
        a = _per_axis(a, n, ("stride", "padding", "output_padding", "dilation"), {})
        x, w = shapes[0], shapes[1]
        if len(x) != n + 2 or len(w) != n + 2:
            raise ShapeError(f"input must be [N, Cin, {n} spatial], weight [Cin, Cout/groups, {n} kernel]; "
                             f"got {fmt(x)} and {fmt(w)}")
        if x[1] != w[0]:
            raise ShapeError(f"input has {x[1]} channels, weight expects {w[0]}")
        if len(shapes) == 3 and shapes[2] != (D.mul(w[1], a["groups"]),):
            raise ShapeError(f"bias must be [{D.mul(w[1], a['groups'])}], got {fmt(shapes[2])}")
        return a

    def shape(shapes: tuple[Shape, ...], a: Attrs) -> Shape:
        x, w = shapes[0], shapes[1]
        spatial = []
        for i in range(n):
            s, p, op, d = a["stride"][i], a["padding"][i], a["output_padding"][i], a["dilation"][i]
            size = D.add(D.mul(D.add(x[2 + i], -1), s), -2 * p + op + 1)
            spatial.append(D.add(size, D.mul(d, D.add(w[2 + i], -1))))
        return (x[0], D.mul(w[1], a["groups"]), *spatial)

    register(OpDef(
        name, OpKind.LIBRARY, (2, 3), shape=shape, dtype=promoted, reference=_torch_ref(name),
        attrs=(Attr("stride", "ints", (1,)), Attr("padding", "ints", (0,)), Attr("output_padding", "ints", (0,)),
               Attr("groups", "int", 1), Attr("dilation", "ints", (1,))),
        canon=canon, accumulates=True, inputs=("x", "weight", "bias"),
        doc=f"{n}-d transposed convolution as torch.nn.functional.{name}",
        meta={"spatial": n, "shape_family": "conv_transpose"},
    ))


# -- pooling ------------------------------------------------------------------------------------
def _pool(kind: str, n: int) -> None:
    name = f"{kind}_pool{n}d"
    per_axis = ("kernel_size", "stride", "padding") + (("dilation",) if kind == "max" else ())

    def canon(shapes: tuple[Shape, ...], a: Attrs) -> Attrs:
        a = _per_axis(a, n, per_axis, {"stride": a["kernel_size"]})
        x = shapes[0]
        if len(x) != n + 2:
            raise ShapeError(f"input must be [N, C, {n} spatial], got {fmt(x)}")
        for k, p in zip(a["kernel_size"], a["padding"]):
            if p > k // 2:
                raise ShapeError(f"padding {p} must be at most half the kernel size {k}")
        if kind == "avg" and n == 3:  # torch's avg_pool3d (unlike 1d/2d) wants a kernel to fit unpadded
            for size, k in zip(x[2:], a["kernel_size"]):
                if isinstance(size, int) and size < k:
                    raise ShapeError(f"spatial size {size} of {fmt(x)} is smaller than the kernel size {k}")
        return a

    def shape(shapes: tuple[Shape, ...], a: Attrs) -> Shape:
        x = shapes[0]
        dil = a["dilation"] if kind == "max" else (1,) * n
        spatial = tuple(
            _window(x[2 + i], a["kernel_size"][i], a["stride"][i], a["padding"][i], dil[i], a["ceil_mode"])
            for i in range(n)
        )
        return (*x[:2], *spatial)

    attrs = (Attr("kernel_size", "ints"), Attr("stride", "ints", ()), Attr("padding", "ints", (0,)),
             Attr("ceil_mode", "bool", False))
    attrs += (Attr("dilation", "ints", (1,)),) if kind == "max" else (Attr("count_include_pad", "bool", True),)
    register(OpDef(
        name, OpKind.LIBRARY, (1, 1), shape=shape, dtype=same_dtype, reference=_torch_ref(name),
        attrs=attrs, canon=canon, inputs=("x",),
        doc=f"{n}-d {kind} pooling as torch.nn.functional.{name}",
        meta={"spatial": n, "shape_family": "pool"},
    ))


for _n in (1, 2, 3):
    _conv(_n)
    _pool("max", _n)
    _pool("avg", _n)
for _n in (1, 2, 3):
    _conv_transpose(_n)


# -- sorting ------------------------------------------------------------------------------------
# torch.sort / argsort / topk: library ops (torch's own kernels run them; our kernels fuse around them).
# The reference sorts stably, as the lowering asks torch to, so equal values keep their order and the
# indices compare exactly; torch.topk breaks ties its own way (its indices of equal values may differ).
def _order(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """The stable sorting permutation along ``axis`` (descending: larger first, equal ones in order;
    NaN sorts last ascending and first descending, as in torch)."""
    key = np.where(np.isnan(x), -np.inf, -x) if descending else x  # NaN first; -0.0 and 0.0 stay equal
    return np.argsort(key, axis=axis, kind="stable")


def _sort_canon(shapes: tuple[Shape, ...], a: Attrs) -> Attrs:
    return a.replace(axis=normalize_axis(a["axis"], len(shapes[0])))


def _topk_canon(shapes: tuple[Shape, ...], a: Attrs) -> Attrs:
    if not shapes[0]:
        raise ShapeError("topk of a 0-d tensor: unsqueeze it to 1-d first")
    a = _sort_canon(shapes, a)
    size = shapes[0][a["axis"]]
    if a["k"] < 1 or (isinstance(size, int) and a["k"] > size):  # k = 0 is an empty result: axon_eg has none
        raise ShapeError(f"k={a['k']} is outside [1, {size}] (the size of axis {a['axis']} of {fmt(shapes[0])})")
    return a


def _topk_shape(shapes: tuple[Shape, ...], a: Attrs) -> Shape:
    out = list(shapes[0])
    out[a["axis"]] = a["k"]
    return tuple(out)


def _sorting(name: str, indices: bool, topk: bool) -> None:
    def ref(xs: tuple[np.ndarray, ...], a: Attrs) -> np.ndarray:
        x = np.asarray(xs[0], dtype=np.float64)
        if x.ndim == 0:
            return np.zeros(()) if indices else x.copy()
        order = _order(x, a["axis"], a["largest"] if topk else a["descending"])
        if topk:
            order = np.take(order, np.arange(a["k"]), axis=a["axis"])
        return order.astype(np.float64) if indices else np.take_along_axis(x, order, a["axis"])

    what = "the top k" if topk else "the sorted"
    attrs = ((Attr("k", "int"), Attr("axis", "int", -1), Attr("largest", "bool", True)) if topk
             else (Attr("axis", "int", -1), Attr("descending", "bool", False)))
    register(OpDef(
        name, OpKind.LIBRARY, (1, 1), shape=_topk_shape if topk else (lambda s, a: s[0]),
        dtype=index_result if indices else same_dtype, reference=ref, attrs=attrs,
        canon=_topk_canon if topk else _sort_canon, inputs=("x",),
        doc=f"{'the indices (int64) of ' if indices else ''}{what} elements along axis "
            f"(torch.{'topk' if topk else 'argsort' if indices else 'sort'}; a stable order)",
        meta={"shape_family": "topk" if topk else "same", **({"indices": True, "steps": True} if indices else {})},
    ))


_sorting("sort", indices=False, topk=False)
_sorting("argsort", indices=True, topk=False)
_sorting("topk", indices=False, topk=True)
_sorting("topk_indices", indices=True, topk=True)
