"""Attention groups of the NKI emitter: softmax(f(Q @ K^T)) @ V, flash style.

For each KV head (the batch axes where K or V are not broadcast) the K^T tiles [d, keys] and V tiles
[keys, d_v] are loaded once into SBUF and kept for every query head that shares them (grouped-query
attention: the broadcast axes loop inside). For each query tile of <= 128 rows, Q^T [d, rows] is the
stationary operand; for each key tile of <= 128 keys, in order:

1. ``nc_matmul`` (Q^T stationary, K^T moving) writes the scores into PSUM;
2. the group's element-wise ops before the softmax (the 1/sqrt(d) scale, masks) run on the tile;
3. the running row max ``m`` is updated (Vector engine), ``p = exp(s - m)`` and its row sum come from one
   Scalar-engine activation (the proven fusion activation + tensor_reduce), ``alpha = exp(m_old - m)``;
4. ``l = l * alpha + rowsum`` (one chained tensor_scalar after fusion);
5. P is transposed on the Tensor engine and ``nc_matmul`` (P^T stationary, V moving) gives P @ V in PSUM;
   ``acc = acc * alpha + P @ V``.

At the end ``out = acc / l``. Q^T and K^T come from a DMA load and a Tensor-engine transpose, which the
fusion pass turns into one ``dma_transpose`` on chips that have it (trn2). Every step is a proven lowering.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from axon_eg.extract.fusion import Group, node_kind
from axon_eg.extract.recognisers import recognise
from axon_eg.extract.templates import Tile, Tiling
from axon_eg.hw import HardwareSpec
from axon_eg.ir import ops as O
from axon_eg.ir.program import Program
from axon_eg.semantics.isa.declarations import TENSOR, declaration

from .emit_matmul import transpose_lowering
from .emit_rows import Space, tile_body
from .emit_writer import NotLowerable, Writer, nl_dtype, pick, portable, render_lowering, typed_tile
from .synthesis import TileOp
from .templates import TrnMatmulTile


def _operand(program: Program, group: Group, node: int) -> tuple[int, bool]:
    """The HBM tensor a matmul operand views (through reshapes, unit axes and one last-two-axes transpose
    applied last) and whether it is transposed."""
    transposed, peeled = False, False
    while node in group.nodes:
        nd = program.nodes[node]
        rank = len(program.concrete_shape(node))
        if nd.op == "transpose" and not peeled and not transposed \
                and tuple(nd.attrs["perm"]) == (*range(rank - 2), rank - 1, rank - 2):
            transposed = True
        elif node_kind(nd.op) is not None:
            raise NotLowerable(f"{nd.op} (node {node}) computes an attention matmul operand; the NKI emitter reads Q, K "
                               f"and V from HBM through views and one last-two-axes transpose")
        else:
            peeled = True
        node = nd.inputs[0]
    return node, transposed


def _softmax(program: Program, group: Group, m1: int, m2: int) -> tuple[int, list[int]]:
    """(the node the softmax reads, the element-wise nodes between the first matmul and it); NotLowerable
    unless the second matmul reads exactly f(S) -> max, sub, exp, sum, div (``extract/recognisers.py``)."""
    nodes = [i for i in group.nodes if m1 < i < m2 and not program.nodes[i].is_constant]
    inside = set(group.nodes)
    core = recognise("softmax_pv", program, m2, inside=inside)
    found = recognise("softmax_exp", program, core.nodes["e"], inside=inside, given=core) if core else core
    ok = bool(found) and "max_axes" in found.attrs  # shifted by its row max
    last = len(program.concrete_shape(m1)) - 1
    if ok:
        ok = all(tuple(a % (last + 1) for a in found.attrs[k]) == (last,) for k in ("max_axes", "sum_axes"))
    if not ok:
        ops = ", ".join(program.nodes[i].op for i in nodes)
        raise NotLowerable(f"attention group ({ops} between the matmuls): the NKI emitter lowers softmax(f(Q @ K^T)) @ V "
                           f"with the softmax over the last axis (max, sub, exp, sum, div)")
    s = found.nodes["s"]
    pre = [i for i in nodes if i <= s and i not in found.matched]
    return s, pre


def _matmul(w: Writer, dst: str, stationary: str, moving: str, shape: str) -> None:
    if w.dialect == "current":
        w.alloc(dst, shape, "nl.float32", "psum")
        w.line(f"nisa.nc_matmul(dst={dst}, stationary={stationary}, moving={moving})")
    else:
        w.line(f"{dst} = nl.zeros({shape}, nl.float32, buffer=nl.psum)")
        w.line(f"{dst}[...] += nisa.nc_matmul({stationary}, {moving})")
        w.shape[dst], w.dtype[dst] = shape, "nl.float32"


def attention_group(w: Writer, program: Program, group: Group, tiling: Tiling | Tile | Mapping[str, int] | None,
                    hbm: Mapping[int, str], outputs: Mapping[int, str], target: str, spec: HardwareSpec) -> str:
    """``tiling``: the group's ``TrnMatmulTile`` (or its values): ``TILE_M`` query rows and ``TILE_N`` keys per
    tile, each at most the Tensor-engine transpose limit (the partitions) and the sequence."""
    tile = typed_tile(TrnMatmulTile, tiling)
    matmuls = [i for i in group.nodes if program.nodes[i].kind is O.OpKind.CONTRACTION]
    if len(matmuls) != 2:
        raise NotLowerable(f"attention group with {len(matmuls)} matmuls: the NKI emitter lowers two (scores, P @ V)")
    m1, m2 = matmuls
    q, q_t = _operand(program, group, program.nodes[m1].inputs[0])
    k, k_t = _operand(program, group, program.nodes[m1].inputs[1])
    v, v_t = _operand(program, group, program.nodes[m2].inputs[1])
    s_node, pre = _softmax(program, group, m1, m2)
    later = [i for i in group.nodes if i > m2 and not program.nodes[i].is_constant]
    if any(node_kind(program.nodes[i].op) is not None for i in later) or any(o not in [m2, *later] for o in outputs):
        raise NotLowerable("attention group: the NKI emitter writes P @ V (through views) only; element-wise ops after "
                           "it or intermediate outputs go to a group of their own")
    if q_t or v_t or any(i not in hbm for i in (q, k, v)):
        raise NotLowerable("attention operands: Q [.., S, d] and V [.., S, d_v] as stored, K as stored or transposed, "
                           "all in HBM")
    shape1, shape2 = tuple(program.concrete_shape(m1)), tuple(program.concrete_shape(m2))
    batch, (sq, sk), dv = shape1[:-2], shape1[-2:], shape2[-1]
    d = int(program.concrete_shape(program.nodes[m1].inputs[0])[-1])
    qshape = batch + (sq, d)
    kshape = tuple(program.concrete_shape(program.nodes[m1].inputs[1]))
    kshape = kshape[:-2] + kshape[-2:][::-1]  # K as [.., keys, d] (the program's K^T operand transposed back)
    vshape = tuple(program.concrete_shape(program.nodes[m2].inputs[1]))
    mm = declaration("nc_matmul")
    pmax, moving_max = int(spec.value(declaration("nc_transpose").limit(TENSOR))), spec.value(mm.limit("moving_free"))
    if d > int(spec.value(mm.limit("contraction"))) or d > pmax or dv > int(moving_max):
        raise NotLowerable(f"attention head dims d={d}, d_v={dv}: the NKI emitter needs d <= {pmax} (contraction, "
                           f"transpose) and d_v <= {moving_max} (one PSUM bank)")
    tq = max(1, min(tile.TILE_M, pmax, sq))
    tk = max(1, min(tile.TILE_N, pmax, sk))
    kv_axes = [i for i, n in enumerate(batch) if n > 1 and (kshape[i] > 1 or vshape[i] > 1)]
    q_axes = [i for i, n in enumerate(batch) if n > 1 and i not in kv_axes]

    def index(shape: tuple[int, ...]) -> str:
        return "".join(f"b{i}, " if shape[i] > 1 else "0, " for i in range(len(batch)))

    views = {}
    for name, node, shp in (("q", q, qshape), ("k", k, kshape if k_t else kshape[:-2] + kshape[-2:][::-1]),
                            ("v", v, vshape)):
        views[name] = w.fresh(f"{name}_hbm")
        w.line(f"{views[name]} = {hbm[node]}.reshape({shp})")
    in_dtype = {n: nl_dtype(program.nodes[i].dtype.name) for n, i in (("q", q), ("k", k), ("v", v))}
    out_dtype = nl_dtype(program.nodes[m2].dtype.name)
    sizes = {"P": tq, "F": tk}
    lw_t = transpose_lowering(target, spec, False, "attention Q^T / K^T / P^T")
    w.line(f"TILE_Q, TILE_K = {tq}, {tk}  # query rows (stationary free), keys (transposed P: contraction)")
    for i in kv_axes:
        w.line(f"for b{i} in nl.affine_range({batch[i]}):")
        w.depth += 1
    w.line("# the K^T tiles [d, keys] and V tiles [keys, d_v] of this KV head, loaded once for its query heads")
    w.line("kT_tiles, v_tiles = [], []")
    w.tiles("kj", sk, tk, "TILE_K", "c0", "cols", "static_range")
    if not k_t:  # K^T is stored: load it as it is
        w.load("kT", f"{views['k']}[{index(kshape)}0:{d}, c0:c0 + cols]", f"({d}, cols)", in_dtype["k"])
    else:
        w.load("k_tile", f"{views['k']}[{index(kshape)}c0:c0 + cols, 0:{d}]", f"(cols, {d})", in_dtype["k"])
        w.shape["k_tile"] = f"({d}, cols)"  # what each instruction of the transpose writes
        render_lowering(w, lw_t, {"x": "k_tile"}, "kT", {}, out_dtype=in_dtype["k"])
    w.load("v_tile", f"{views['v']}[{index(vshape)}c0:c0 + cols, 0:{dv}]", f"(cols, {dv})", in_dtype["v"])
    w.line("kT_tiles.append(kT)\nv_tiles.append(v_tile)")
    w.depth -= 1
    for i in q_axes:
        w.line(f"for b{i} in nl.affine_range({batch[i]}):  # query heads sharing the KV head" if i > min(kv_axes, default=-1)
               else f"for b{i} in nl.affine_range({batch[i]}):")
        w.depth += 1
    w.tiles("qi", sq, tq, "TILE_Q", "s0", "rows")
    flat = " + ".join(f"b{i} * {math.prod(batch[i + 1:])}" for i in range(len(batch)) if batch[i] > 1) or "0"
    w.line(f"r0 = ({flat}) * {sq} + s0  # the row in the flattened batch")
    w.load("q_tile", f"{views['q']}[{index(qshape)}s0:s0 + rows, 0:{d}]", f"(rows, {d})", in_dtype["q"])
    w.shape["q_tile"] = f"({d}, rows)"
    render_lowering(w, lw_t, {"x": "q_tile"}, "qT", {}, out_dtype=in_dtype["q"])
    w.line("# running row max, row sum of exp, and the unnormalized output")
    w.memset("m_run", "(rows, 1)", -math.inf)
    w.memset("l_run", "(rows, 1)", 0.0)
    w.memset("acc", f"(rows, {dv})", 0.0)
    w.tiles("kj", sk, tk, "TILE_K", "c0", "cols", "sequential_range")
    _matmul(w, "scores", "qT", "kT_tiles[kj]", "(rows, cols)")
    values: dict[int, Any] = {m1: "scores"}
    space = Space(program, group, shape1)
    tile_body(w, space, pre, values, hbm, {}, target, tk, tq)
    s = values[s_node]

    def step(op: str, kinds: tuple[str, ...], args: tuple[str, ...], out: str, out_dtype: str | None = None,
             form: str | None = None) -> str:
        accept = (lambda lw: portable(lw) and lw.sequence[0].op == form) if form else portable
        lw = pick(TileOp(op, kinds), target, sizes, f"attention {op}", accept)
        render_lowering(w, lw, dict(zip(("x", "y"), args)), out, {"F": sk, "P": tq}, out_dtype=out_dtype)
        return out

    step("max", ("tile",), (s,), "mx")
    step("maximum", ("tile", "tile"), ("m_run", "mx"), "m_new")
    step("sub", ("tile", "row"), (s, "m_new"), "shifted")
    step("exp", ("tile",), ("shifted",), "p", in_dtype["v"])
    step("sum", ("tile",), ("p",), "rowsum")
    step("sub", ("tile", "tile"), ("m_run", "m_new"), "m_diff")
    step("exp", ("tile",), ("m_diff",), "alpha")
    step("mul", ("tile", "row"), ("l_run", "alpha"), "l_scaled", form="tensor_scalar")
    step("add", ("tile", "row"), ("l_scaled", "rowsum"), "l_new", form="tensor_scalar")
    w.shape["p"] = "(cols, rows)"  # what each instruction of the transpose writes
    render_lowering(w, lw_t, {"x": "p"}, "pT", {}, out_dtype=in_dtype["v"])
    _matmul(w, "pv", "pT", "v_tiles[kj]", f"(rows, {dv})")
    step("mul", ("tile", "row"), ("acc", "alpha"), "acc_scaled", form="tensor_scalar")
    step("add", ("tile", "tile"), ("acc_scaled", "pv"), "acc_new")
    w.line("m_run, l_run, acc = m_new, l_new, acc_new")
    w.depth -= 1
    step("div", ("tile", "row"), ("acc", "l_run"), "o", out_dtype)
    for node in outputs:
        w.store(f"{hbm[node]}.reshape({shape2})[{index(shape2)}s0:s0 + rows, 0:{dv}]", "o")
    w.depth -= 1 + len(q_axes) + len(kv_axes)
    return f"TILE_Q={tq} TILE_K={tk} flash (running max/sum), K^T and V hoisted per KV head"
