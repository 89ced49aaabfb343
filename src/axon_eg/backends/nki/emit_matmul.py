"""Matmul and transpose groups of the NKI emitter.

Matmul is blocked like the NKI tutorial: BLOCK_M row tiles of A^T and BLOCK_N column tiles of B hoisted into
SBUF, PSUM accumulation over K tiles <= 128, moving free <= 512; A^T loaded transposed from HBM, or transposed
on chip by ``nc_transpose`` / ``dma_transpose`` when the candidate's isa says so; ``x.T`` / ``w.T`` operands
loaded as stored / transposed; a row-wise prologue computing A (rmsnorm, layernorm) and element-wise epilogues
(and a row reduction when N fits one PSUM tile). 2-D transposes run on the Tensor engine (``nc_transpose``)
or in the DMA (``dma_transpose``) where the candidate's isa and the chip say so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from axon_eg.extract.fusion import Group, node_kind
from axon_eg.extract.templates import Tile, Tiling
from axon_eg.hw import HardwareSpec
from axon_eg.ir import traced
from axon_eg.ir.program import Program
from axon_eg.semantics.isa.declarations import FREE_MAX, SBUF, TENSOR, declaration

from .emit_rows import ROW_REDUCTIONS, Space, tile_body
from .emit_writer import NotLowerable, Writer, nl_dtype, pick, render_lowering, typed_tile
from .synthesis import Lowering, TileOp
from .templates import TrnMatmulTile

# --------------------------------------------------------------------------------------------- matmul

def _transposed(hbm: str, start: str, count: str, dialect: str) -> str:
    """The [ks, count] tile ``hbm[start:start + count, k0:k0 + ks]`` read transposed from HBM by the DMA: an
    index grid in the legacy dialect, an access pattern (``.ap``: k steps by 1 down the partitions, the rows
    by the row length along the free axis) in the current one, whose documentation has no ``nl.arange``."""
    if dialect == "current":
        return f"{hbm}.ap([[1, ks], [{hbm}.shape[1], {count}]], offset={start} * {hbm}.shape[1] + k0)"
    return f"{hbm}[{start} + nl.arange({count})[None, :], k0 + nl.arange(ks)[:, None]]"

def matmul_group(w: Writer, program: Program, group: Group, tiling: Tiling | Tile | Mapping[str, int] | None,
                 hbm: Mapping[int, str], outputs: Mapping[int, str], target: str, spec: HardwareSpec,
                 choice: str | None = None) -> str:
    """``tiling``: the group's ``TrnMatmulTile`` (or its values; the template's defaults for what they lack),
    its tile sizes clipped to the declared ``nc_matmul`` limits and to the matmul's shape."""
    tile = typed_tile(TrnMatmulTile, tiling)
    anchor = group.anchor(program)
    mm = program.nodes[anchor]
    a, b = mm.inputs
    a_layout, b_layout = "mk", "kn"
    if program.nodes[a].op == "transpose" and a in group.nodes:  # A = x.T: x is already A^T, load it as is
        a, a_layout = program.nodes[a].inputs[0], "km"
    if program.nodes[b].op == "transpose" and b in group.nodes:  # B = w.T (a linear layer): load w transposed
        b, b_layout = program.nodes[b].inputs[0], "nk"
    # a prologue computes whole rows of A on chip (element-wise ops and row reductions over K, as in rmsnorm)
    layouts = {mm.inputs[1]} | ({mm.inputs[0]} if a_layout == "km" else set())  # transposes read while loading
    prologue = [i for i in group.nodes if i < anchor and i not in layouts and not program.nodes[i].is_constant]
    stored = [i for i in prologue if i in outputs]
    if stored:
        raise NotLowerable(f"{program.nodes[stored[0]].op} (node {stored[0]}) of the matmul's prologue is also read "
                           f"outside the group; the NKI emitter computes a prologue in the K loop and stores none")
    if prologue and a not in prologue:
        raise NotLowerable(f"{program.nodes[prologue[0]].op} (node {prologue[0]}) before the matmul does not compute "
                           f"its A operand; the NKI emitter fuses row-wise prologues of A only")
    if b in group.nodes or (a in group.nodes and not prologue) or len(program.concrete_shape(anchor)) != 2:
        raise NotLowerable(f"matmul (node {anchor}) of shape {list(program.concrete_shape(anchor))}: only 2-D A @ B "
                           f"with operands in HBM")
    m, n = program.concrete_shape(anchor)
    k = program.concrete_shape(b)[0 if b_layout == "kn" else 1]
    mm = declaration("nc_matmul")  # the tile sizes its declared limits allow
    tk = min(tile.TILE_K, int(spec.value(mm.limit("contraction"))), k)
    tm = min(tile.TILE_M, int(spec.value(mm.limit("stationary_free"))), m)
    tn = min(tile.TILE_N, int(spec.value(mm.limit("moving_free"))), n)
    reductions = [program.nodes[i].op for i in group.nodes if i > anchor and program.nodes[i].op in ROW_REDUCTIONS]
    if reductions and n > tn:
        raise NotLowerable(f"{reductions[0]} across the matmul's {n} columns spans {math.ceil(n / tn)} column tiles "
                           f"(TILE_N={tn}); the NKI emitter reduces an epilogue row within one PSUM tile only")
    lw = pick(TileOp("matmul", ("tile", "tile"), (("a_layout", "km"),)), target, {"K": tk, "M": tm, "N": tn},
               f"matmul (node {anchor})", lambda lw: [i.op for i in lw.sequence][0] == "nc_matmul"
               and lw.sequence[0].arg("stationary") == "A")
    nk = traced.cdiv(k, tk)
    ka, kb = hbm.get(a, ""), hbm[b]  # a prologue computes A on chip: no HBM source
    nm, nn = traced.cdiv(m, tm), traced.cdiv(n, tn)
    block_m = max(1, min(tile.BLOCK_M, nm))
    block_n = max(1, min(tile.BLOCK_N, nn))
    a_dtype, b_dtype = nl_dtype(program.nodes[a].dtype.name), nl_dtype(program.nodes[b].dtype.name)
    if not prologue and (a_dtype == "nl.float32") != (b_dtype == "nl.float32"):
        raise NotLowerable(f"matmul (node {anchor}) of {a_dtype.split('.')[1]} @ {b_dtype.split('.')[1]}: the Tensor engine "
                           f"multiplies fp32 by fp32 only (cast the other operand first)")
    if prologue and a_dtype == "nl.float32" and b_dtype != a_dtype:  # the copy that casts A would round it
        raise NotLowerable(f"matmul (node {anchor}) prologue: A is fp32 and B {b_dtype.split('.')[1]}; the Tensor engine "
                           f"multiplies like dtypes, and casting A's fp32 rows to {b_dtype.split('.')[1]} would round "
                           f"what the program computes in fp32")
    free_max = int(spec.value(FREE_MAX[SBUF]))
    if prologue and k > free_max:
        raise NotLowerable(f"matmul (node {anchor}) prologue: a row of A holds {k} values, more than one tile "
                           f"(free size <= {free_max})")
    if prologue:
        choice = "nc_transpose"  # A's rows are computed on chip: the Tensor engine transposes them
    w.line(f"TILE_K, TILE_M, TILE_N = {tk}, {tm}, {tn}  # contraction, stationary free, moving free (one PSUM bank)")
    w.line(f"BLOCK_M, BLOCK_N = {block_m}, {block_n}  # row / column tiles whose operand tiles stay in SBUF together")
    # affine_range indices are symbolic on a NeuronCore: blocks and tiles that do not divide their extent
    # evenly loop with static_range (trace-time ints) so that min() can size the last one
    m_tail, n_tail = traced.partial(m, tm), traced.partial(n, tn)
    w.line(f"for mb in nl.{_range(m_tail or traced.partial(nm, block_m))}({traced.cdiv(nm, block_m)}):")
    w.depth += 1
    how = {"km": "loaded as stored (A = x.T)", "nc_transpose": "transposed on the Tensor engine",
           "dma_transpose": "transposed in the DMA"}.get(a_layout if a_layout == "km" else choice, "loaded transposed")
    if prologue:
        how = "computed on chip by the prologue and transposed on the Tensor engine"
    else:
        how += " from HBM"
    w.line(f"# stationary: A^T tiles [k, rows] of BLOCK_M row tiles, {how}, kept for every column tile")
    w.line("a_tiles = []")
    w.line(f"for bm in nl.static_range({_count('BLOCK_M', nm, block_m, 'mb')}):")
    w.line("    r0 = (mb * BLOCK_M + bm) * TILE_M")
    w.line(f"    rows = {_size('TILE_M', m, 'r0', m_tail)}")
    w.line("    a_row = []")
    w.depth += 1
    if prologue:  # whole rows of A, computed once per row tile, cast to B's dtype, then transposed per K tile
        w.line(f"c0, cols = 0, {k}  # whole rows of A: the prologue reduces over K")
        values: dict[int, Any] = {}
        tile_body(w, Space(program, group, (m, k)), prologue, values, hbm, {}, target, k, tm)
        w.line(f"# the Tensor engine multiplies like dtypes: A's rows in {b_dtype} (a copy that casts)")
        w.emit("tensor_copy", "a_rows", {"src": values[a]}, "(rows, cols)", b_dtype)
    w.line(f"for kk in nl.static_range({nk}):")
    w.depth += 1
    w.line(f"k0 = kk * TILE_K\nks = min(TILE_K, {k} - k0)")
    if prologue:
        lw_t = transpose_lowering(target, spec, False, f"matmul (node {anchor}) stationary")
        w.line("a_slice = a_rows[:, k0:k0 + ks]")
        w.shape["a_slice"], w.dtype["a_slice"] = "(ks, rows)", b_dtype  # what each instruction of the transpose writes
        render_lowering(w, lw_t, {"x": "a_slice"}, "aT", {}, out_dtype=b_dtype)
    elif a_layout == "mk" and choice in ("nc_transpose", "dma_transpose"):  # A tile [rows, k] transposed on chip
        dma = choice == "dma_transpose"
        lw_t = transpose_lowering(target, spec, dma, f"matmul (node {anchor}) stationary")
        src = f"{ka}[r0:r0 + rows, k0:k0 + ks]"
        if not dma:
            w.load("a_tile", src, "(rows, ks)", a_dtype)
            src = "a_tile"
        w.shape[src], w.dtype[src] = "(ks, rows)", a_dtype  # what each instruction of the transpose writes
        w.pin = True  # the candidate's choice of transpose: no fusion turns it into another
        render_lowering(w, lw_t, {"x": src}, "aT", {}, out_dtype=a_dtype)
        w.pin = False
    else:
        src = (f"{ka}[k0:k0 + ks, r0:r0 + rows]" if a_layout == "km" else _transposed(ka, "r0", "rows", w.dialect))
        w.load("aT", src, "(ks, rows)", a_dtype)
    w.line("a_row.append(aT)")
    w.depth -= 1
    w.line("a_tiles.append(a_row)")
    w.depth -= 1
    w.line(f"for nb in nl.{_range(n_tail or traced.partial(nn, block_n))}({traced.cdiv(nn, block_n)}):")
    w.depth += 1
    w.line(f"# moving: B tiles [k, cols] of BLOCK_N column tiles{' (w.T: loaded transposed)' if b_layout == 'nk' else ''}"
           f", loaded once per row block")
    w.line("b_tiles = []")
    w.line(f"for bn in nl.static_range({_count('BLOCK_N', nn, block_n, 'nb')}):")
    w.line("    c0 = (nb * BLOCK_N + bn) * TILE_N")
    w.line(f"    cols = {_size('TILE_N', n, 'c0', n_tail)}")
    w.line("    b_col = []")
    w.line(f"    for kk in nl.static_range({nk}):")
    w.depth += 2
    w.line(f"k0 = kk * TILE_K\nks = min(TILE_K, {k} - k0)")
    src = f"{kb}[k0:k0 + ks, c0:c0 + cols]" if b_layout == "kn" else _transposed(kb, "c0", "cols", w.dialect)
    w.load("b_tile", src, "(ks, cols)", b_dtype)
    w.line("b_col.append(b_tile)")
    w.depth -= 1
    w.line("b_tiles.append(b_col)")
    w.depth -= 1
    w.line(f"for bm in nl.{_range(m_tail)}(len(a_tiles)):")
    w.line("    r0 = (mb * BLOCK_M + bm) * TILE_M")
    w.line(f"    rows = {_size('TILE_M', m, 'r0', m_tail)}")
    w.line(f"    for bn in nl.{_range(n_tail)}(len(b_tiles)):")
    w.depth += 2
    w.line("c0 = (nb * BLOCK_N + bn) * TILE_N")
    w.line(f"cols = {_size('TILE_N', n, 'c0', n_tail)}")
    if w.dialect == "current":
        w.alloc("acc", "(rows, cols)", "nl.float32", "psum")
    else:
        w.line("acc = nl.zeros((rows, cols), nl.float32, buffer=nl.psum)")
        w.shape["acc"], w.dtype["acc"] = "(rows, cols)", "nl.float32"
    w.line(f"# lowering: {lw.name}; nc_matmul accumulates over the K tiles in PSUM")
    w.line(f"for kk in nl.sequential_range({nk}):")
    if w.dialect == "current":
        w.line("    nisa.nc_matmul(dst=acc, stationary=a_tiles[bm][kk], moving=b_tiles[bn][kk])")
    else:
        w.line("    acc[...] += nisa.nc_matmul(a_tiles[bm][kk], b_tiles[bn][kk])")
    out = w.fresh("v")
    render_lowering(w, lw, {"A": "a_tiles[bm][kk]", "B": "b_tiles[bn][kk]"}, out, {"K": tk}, skip=("nc_matmul",), comment=False)
    epilogue = [i for i in group.nodes if i > anchor]
    space = Space(program, group, (m, n))
    tile_body(w, space, [i for i in epilogue if not program.nodes[i].is_constant], {anchor: out}, hbm, outputs,
               target, tn, tm)
    w.depth -= 4
    return f"TILE_K={tk} TILE_M={tm} TILE_N={tn} BLOCK_M={block_m} BLOCK_N={block_n}"


def _range(tail: bool) -> str:
    """The loop over blocks or tiles: static_range (trace-time ints) where a tail tile needs min()."""
    return "static_range" if tail else "affine_range"


def _count(block: str, tiles: int, per_block: int, index: str) -> str:
    """How many tiles a block holds: ``block`` when they divide evenly, else fewer in the last block."""
    return block if tiles % per_block == 0 else f"min({block}, {tiles} - {index} * {block})"


def _size(tile: str, extent: int, offset: str, tail: bool) -> str:
    """A tile's size: the constant ``tile``, or ``min()`` where the last tile is a tail."""
    return f"min({tile}, {extent} - {offset})" if tail else tile


# ------------------------------------------------------------------------------------------ transposes
def transpose_lowering(target: str, spec: HardwareSpec, dma: bool, where: str) -> Lowering:
    """The proven lowering of a <= 128x128 tile transpose: in the DMA (``dma_transpose``, from HBM) or on the
    Tensor engine (``nc_transpose`` into PSUM, then a copy to SBUF)."""
    if dma and not spec.get("features.dma_transpose", False):
        raise NotLowerable(f"{where}: the candidate asks for dma_transpose, which {target} lacks "
                           f"(features.dma_transpose is false); use nc_transpose")
    t = int(spec.value(declaration("nc_transpose").limit(TENSOR)))
    engine = "dma_transpose" if dma else "nc_transpose"
    return pick(TileOp("transpose", ("tile",), (), "hbm" if dma else "sbuf"), target, {"P": t, "F": t}, where,
                 lambda lw: any(i.op == engine and (dma or i.arg("engine") == "tensor") for i in lw.sequence))

def transpose_group(w: Writer, program: Program, group: Group, choice: str | None, hbm: Mapping[int, str],
                     outputs: Mapping[int, str], target: str, spec: HardwareSpec) -> str:
    nodes = [i for i in group.nodes if node_kind(program.nodes[i].op) is not None]
    node = program.nodes[nodes[0]]
    if len(nodes) != 1 or node.op != "transpose" or len(program.concrete_shape(nodes[0])) != 2:
        raise NotLowerable(f"{', '.join(program.nodes[i].op for i in nodes)}: the NKI emitter lowers 2-D transposes "
                           f"as layout groups")
    r, c = program.concrete_shape(node.inputs[0])
    t = int(spec.value(declaration("nc_transpose").limit(TENSOR)))
    # DMA transposes move 2-byte elements only: other dtypes fall back to the Tensor engine
    dma = choice == "dma_transpose" and (program.nodes[node.inputs[0]].dtype.name in ("bf16", "fp16")
                                         or not spec.get("features.dma_transpose", False))
    lw = transpose_lowering(target, spec, dma, f"transpose (node {nodes[0]})")
    w.line(f"T = {t}  # tile edge: the Tensor engine transposes <= {t}x{t}")
    w.tiles("i", r, t, "T", "r0", "rows")
    w.tiles("j", c, t, "T", "c0", "cols")
    src = f"{hbm[node.inputs[0]]}[r0:r0 + rows, c0:c0 + cols]"
    dtype = nl_dtype(program.nodes[node.inputs[0]].dtype.name)
    if dma:
        w.shape[src], w.dtype[src] = "(cols, rows)", dtype
        render_lowering(w, lw, {"x": src}, "v", {})
    else:
        w.load("x_tile", src, "(rows, cols)", dtype)
        w.shape["x_tile"] = "(cols, rows)"  # the shape every instruction of the sequence writes
        w.pin = True  # the candidate's choice (nc_transpose): the fusion pass keeps it
        render_lowering(w, lw, {"x": "x_tile"}, "v", {})
        w.pin = False
    w.store(f"{outputs[nodes[0]]}[c0:c0 + cols, r0:r0 + rows]", "v")
    w.depth -= 2
    return "dma_transpose" if dma else f"T={t}"
