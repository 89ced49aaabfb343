"""Row-wise NKI groups: element-wise ops, row reductions, last-axis slices and concats, and prefix sums.

A group's iteration space is its full shape flattened to [M rows, N columns] (N the last axis): rows map to
partitions in tiles of ``TILE_P <= 128``, columns to the free axis in tiles of ``TILE_F``. Reductions,
slices and concats keep whole rows on chip (one free tile of N). A value used by the group maps onto the
tiles as a ``tile`` [rows, cols], a ``row`` [rows, 1], a ``col`` (a per-column vector broadcast over rows), a
``one`` (a single value), a ``scalar`` (a constant, emitted as a literal), a ``part`` (whole rows of another
width: a slice, a concat operand) or an ``inner`` value (a trailing block such as RoPE's cos [S, D] broadcast
over the leading axes: the rows are then tiled within blocks of S, ``s0`` the offset inside the block).

A prefix sum along the last axis (``cumsum``) runs on the Vector engine: a Hillis-Steele scan inside each
free tile (log2(TILE_F) steps of ``y[:, d:] = y[:, d:] + y[:, :-d]``, each the proven lowering of a tile
add, ping-ponging between two tiles), then the running carry of the earlier free tiles (a [rows, 1] column,
the proven lowering of a tile-plus-row add) is added and the carry becomes the tile's last column.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from axon_eg.extract.fusion import ELEMENTWISE, REDUCTION, Group, node_kind
from axon_eg.extract.templates import Tile, Tiling
from axon_eg.hw import HardwareSpec
from axon_eg.ir import dims as D
from axon_eg.ir import ops as O
from axon_eg.ir import traced
from axon_eg.ir.program import Program
from axon_eg.semantics.isa.declarations import FREE_MAX, PARTITION_MAX, SBUF

from .emit_writer import NotLowerable, Writer, nl_dtype, pick, portable, render_lowering, typed_tile
from .synthesis import TileOp
from .templates import TrnRowsTile

ROW_REDUCTIONS = set(O.simple_reductions())  # sum, mean, max, min: one combine each
WHOLE_ROW_OPS = {"slice", "concat"}  # layout ops the row emitter handles on whole rows (last axis only)


class Space:
    """A group's iteration space: its full shape flattened to [M rows, N columns], and how each value maps
    onto the tiles of that space."""

    def __init__(self, program: Program, group: Group, full: tuple[int, ...]):
        self.program, self.group, self.full = program, group, full
        self.m, self.n = math.prod(full[:-1]), (full[-1] if full else 1)
        self.period = 0  # rows per block when an inner value is broadcast over the leading axes

    def kind(self, node: int) -> str:
        shape = tuple(self.program.concrete_shape(node))
        nd = self.program.nodes[node]
        op, full = nd.op, self.full
        if nd.is_constant and math.prod(shape) == 1:
            return "scalar"
        if traced.same(shape, full):
            return "tile"
        if full and (traced.same(shape, full[:-1] + (1,)) or (traced.same(shape, full[:-1]) and not nd.is_input)):
            return "row"
        if math.prod(shape) == 1:
            return "one"
        if len(shape) <= len(full) and tuple(d for d in shape if d != 1) == (self.n,) and shape[-1] == self.n:
            return "col"
        if len(shape) == len(full) and traced.same(shape[:-1], full[:-1]):
            return "part"
        core = shape[next((i for i, d in enumerate(shape) if d != 1), len(shape)):]
        if 2 <= len(core) < len(full) and traced.same(core, full[len(full) - len(core):]):
            period = math.prod(core[:-1])
            if self.period not in (0, period):
                raise NotLowerable(f"{op} node {node} of shape {list(shape)} repeats every {period} rows, another value "
                                   f"of the group every {self.period}: the NKI emitter tiles rows within one block size")
            self.period = period
            return "inner"
        raise NotLowerable(f"{op} node {node} of shape {list(shape)} does not map onto the rows x columns "
                           f"{list(full)} of its group ({self.group.kind}): the NKI emitter broadcasts rows, "
                           f"columns, single values and trailing blocks only")

    def width(self, node: int) -> int:
        shape = self.program.concrete_shape(node)
        return int(shape[-1]) if shape else 1

    def view(self, hbm: str, node: int, kind: str, dialect: str = "legacy") -> str:
        """The HBM slice of the current tile (rows r0.., columns c0..) of a value of this kind. A value
        broadcast down the partitions (one value, one row of columns) is an index expression with a zero
        partition step: ``nl.arange`` grids in the legacy dialect, an access pattern (``.ap``) in the current
        one, whose documentation has no ``nl.arange``."""
        shape = tuple(self.program.concrete_shape(node))
        if kind == "row":
            flat = hbm if shape == (self.m, 1) else f"{hbm}.reshape(({self.m}, 1))"
            return f"{flat}[r0:r0 + rows, 0:1]"
        if kind == "one":
            if dialect == "current":
                return f"{hbm}.ap([[0, rows], [1, 1]], offset=0)"
            return f"{hbm}.reshape((1, 1))[nl.arange(rows)[:, None] * 0, nl.arange(1)[None, :]]"
        if kind == "col":
            if dialect == "current":
                return f"{hbm}.ap([[0, rows], [1, cols]], offset=c0)"
            flat = hbm if shape == (1, self.n) else f"{hbm}.reshape((1, {self.n}))"
            return f"{flat}[nl.arange(rows)[:, None] * 0, c0 + nl.arange(cols)[None, :]]"
        if kind == "part":
            w = shape[-1]
            flat = hbm if shape == (self.m, w) else f"{hbm}.reshape(({self.m}, {w}))"
            return f"{flat}[r0:r0 + rows, 0:{w}]"
        if kind == "inner":
            flat = f"{hbm}.reshape(({self.period}, {self.n}))"
            return f"{flat}[s0:s0 + rows, c0:c0 + cols]"
        flat = hbm if shape == (self.m, self.n) else f"{hbm}.reshape(({self.m}, {self.n}))"
        return f"{flat}[r0:r0 + rows, c0:c0 + cols]"


def _shape(kind: str, width: int) -> str:
    return {"row": "(rows, 1)", "one": "(rows, 1)", "part": f"(rows, {width})"}.get(kind, "(rows, cols)")


def tile_body(w: Writer, space: Space, nodes: list[int], values: dict[int, Any], hbm: Mapping[int, str],
              outputs: Mapping[int, str], target: str, free: int, tile_p: int) -> None:
    """Load the group's inputs for the tile, run its nodes through their lowerings, store its outputs."""
    program = space.program

    def value(node: int) -> Any:
        if node not in values:
            kind = space.kind(node)
            if kind == "scalar":
                values[node] = ("scalar", float(program.nodes[node].attrs["value"]))
            else:
                if node not in hbm:
                    raise NotLowerable(f"{program.nodes[node].op} node {node} feeds the group but is not in HBM")
                var = w.fresh("in")
                w.load(var, space.view(hbm[node], node, kind, w.dialect), _shape(kind, space.width(node)),
                       nl_dtype(program.nodes[node].dtype.name))
                values[node] = var
        return values[node]

    for node in nodes:
        nd = program.nodes[node]
        if node_kind(nd.op) is None:  # a view riding along: same values, same tile
            before, after = (tuple(d for d in program.concrete_shape(i) if d != 1) for i in (nd.inputs[0], node))
            if before != after or space.kind(node) != space.kind(nd.inputs[0]):
                raise NotLowerable(f"{nd.op} (node {node}) from {list(program.concrete_shape(nd.inputs[0]))} to "
                                   f"{list(program.concrete_shape(node))} moves data between rows and columns; the NKI "
                                   f"emitter lets only unit-axis views ride along")
            values[node] = value(nd.inputs[0])
            continue
        if nd.op in WHOLE_ROW_OPS:
            values[node] = _slice_concat(w, space, node, [value(i) for i in nd.inputs])
            continue
        kind = space.kind(node)
        ins = [value(i) for i in nd.inputs]
        kinds = [{"one": "row", "part": "tile"}.get(space.kind(i), space.kind(i)) for i in nd.inputs]
        if kind == "part" and space.n == 1 and space.width(node) != 1:
            # the group's rows are one column wide (a row reduction over a size-1 axis) and this value is wider:
            # a whole-row tile of the group is then a [rows, 1] column, broadcast along the free axis like a row
            kinds = ["row" if space.kind(i) == "tile" else k for i, k in zip(nd.inputs, kinds)]
        if nd.op in ROW_REDUCTIONS and not nd.attrs["axes"]:  # reducing over no axes: the values themselves
            values[node] = value(nd.inputs[0])
            continue
        if nd.op in ROW_REDUCTIONS:
            axes = tuple(a % len(program.concrete_shape(nd.inputs[0])) for a in nd.attrs["axes"])
            if kinds != ["tile"] or axes != (len(program.concrete_shape(nd.inputs[0])) - 1,):
                raise NotLowerable(f"{nd.op} over axes {list(nd.attrs['axes'])}: only row reductions over the last axis")
            operands: tuple[str, ...] = ("tile",)
        elif node_kind(nd.op) == ELEMENTWISE:
            tile_like = kind not in ("row", "one")
            operands = tuple("scalar" if k == "scalar" else "row" if k == "row" and tile_like else "tile" for k in kinds)
            if kind == "part" or "tile" not in operands:  # a part's width, or a row computed from rows
                pass
            elif any(k in ("col", "inner") for k in kinds) and kind == "part":
                raise NotLowerable(f"{nd.op} (node {node}) mixes a part of a row with broadcast columns")
        else:
            raise NotLowerable(f"{nd.op} (node {node}) in a {space.group.kind} group: the NKI emitter lowers element-wise "
                               f"ops, row reductions, last-axis slices and concats here")
        attrs = tuple(sorted((k, v) for k, v in nd.attrs.items())) if node_kind(nd.op) == ELEMENTWISE else ()
        tile_op = TileOp(nd.op, operands, attrs)
        lw = pick(tile_op, target, {"P": tile_p, "F": free}, f"{nd.op} (node {node})", portable)
        var = w.fresh("v")
        render_lowering(w, lw, dict(zip(tile_op.names, ins)), var, {"F": space.n, "P": tile_p})
        values[node] = var
    for node, out in outputs.items():
        kind = space.kind(node)
        w.store(space.view(out, node, kind, w.dialect), values[node])


def _slice_concat(w: Writer, space: Space, node: int, ins: list[Any]) -> str:
    """A slice of the last axis is a free-axis view of the tile; a concat of the last axis copies each part
    into its columns of a new tile (the fusion pass lets the producers write there directly)."""
    program = space.program
    nd = program.nodes[node]
    rank = len(program.concrete_shape(node))
    axis = nd.attrs["axis"] % rank
    step = D.evaluate(nd.attrs.get("step", 1), program.bindings)
    if axis != rank - 1 or any(not isinstance(v, str) for v in ins) or step != 1:
        raise NotLowerable(f"{nd.op} (node {node}) on axis {nd.attrs['axis']} of {list(program.concrete_shape(node))}"
                           f"{' with step ' + str(step) if step != 1 else ''}: the NKI "
                           f"emitter slices and concatenates tiles along the last (free) axis only, step 1")
    if any(space.kind(i) not in ("tile", "part") for i in nd.inputs):
        raise NotLowerable(f"{nd.op} (node {node}) of a broadcast value: the NKI emitter slices whole rows only")
    if nd.op == "slice":
        start, stop = (D.evaluate(nd.attrs[k], program.bindings) for k in ("start", "stop"))
        return w.view(f"{ins[0]}[:, {start}:{stop}]", f"(rows, {stop - start})", w.dtype[ins[0]])
    var = w.fresh("cat")
    w.alloc(var, f"(rows, {space.width(node)})", "nl.float32")
    lo = 0
    for i, part in zip(nd.inputs, ins):
        hi = lo + space.width(i)
        w.emit("tensor_copy", w.view(f"{var}[:, {lo}:{hi}]", f"(rows, {hi - lo})", "nl.float32"), {"src": part},
               f"(rows, {hi - lo})")
        lo = hi
    return var


def full_shape(program: Program, group: Group) -> tuple[int, ...]:
    """The shape the group iterates over: the reduced operand of its (first) row reduction, else its anchor's."""
    anchor = group.anchor(program)
    node = program.nodes[anchor]
    return tuple(program.concrete_shape(node.inputs[0] if node.op in ROW_REDUCTIONS else anchor))


def _loops(w: Writer, space: Space, tile_p: int, tile_f: int, columns: str = "affine_range",
           per_row_tile: Callable[[], None] | None = None) -> None:
    """The row-tile and column-tile loops (rows within blocks of ``space.period`` when it is set);
    ``per_row_tile`` writes what comes before the column loop."""
    m, n = space.m, space.n
    if space.period:
        w.line(f"for blk in nl.affine_range({m // space.period}):  # blocks of {space.period} rows share inner values")
        w.depth += 1
        w.tiles("i", space.period, tile_p, "TILE_P", "s0", "rows")
        w.line(f"r0 = blk * {space.period} + s0")
    else:
        w.tiles("i", m, tile_p, "TILE_P", "r0", "rows")
    if per_row_tile is not None:
        per_row_tile()
    w.tiles("j", n, tile_f, "TILE_F", "c0", "cols", columns)


def _sizes(space: Space, tiling: Tiling | Tile | Mapping[str, int] | None, spec: HardwareSpec,
           whole_rows: bool) -> tuple[int, int]:
    """(TILE_P, TILE_F) of the group's ``TrnRowsTile`` (or its values): all partitions and the whole row where
    it leaves them open (None), clipped to the partitions, the row and the Vector engine's free size."""
    tile = typed_tile(TrnRowsTile, tiling)
    pmax = int(spec.value(PARTITION_MAX))
    tile_p = max(1, min(pmax if tile.TILE_P is None else tile.TILE_P, pmax))
    free_max = int(spec.value(FREE_MAX[SBUF]))
    n = space.n
    tile_f = n if whole_rows else max(1, min(n if tile.TILE_F is None else tile.TILE_F, n, free_max))
    if tile_f > free_max:
        raise NotLowerable(f"a row of {n} columns kept whole (reduction, slice or concat) does not fit one tile "
                           f"(free size <= {free_max})")
    return tile_p, tile_f


def row_group(w: Writer, program: Program, group: Group, tiling: Tiling | Tile | Mapping[str, int] | None,
              hbm: Mapping[int, str], outputs: Mapping[int, str], target: str, spec: HardwareSpec) -> str:
    space = Space(program, group, full_shape(program, group))
    nodes = [i for i in group.nodes if not program.nodes[i].is_constant]
    for i in nodes:
        for j in program.nodes[i].inputs:
            if j in hbm and j not in group.nodes:
                space.kind(j)
    whole_rows = group.kind == REDUCTION or any(program.nodes[i].op in WHOLE_ROW_OPS for i in nodes)
    tile_p, tile_f = _sizes(space, tiling, spec, whole_rows)
    w.line(f"TILE_P, TILE_F = {tile_p}, {tile_f}  # rows on partitions; {'whole rows' if whole_rows else 'columns'}")
    _loops(w, space, tile_p, tile_f)
    tile_body(w, space, nodes, {}, hbm, outputs, target, tile_f, tile_p)
    w.depth -= 3 if space.period else 2
    return f"TILE_P={tile_p} TILE_F={tile_f}" + (f" row blocks of {space.period}" if space.period else "")


# ----------------------------------------------------------------------------------------------- scans
def scan_group(w: Writer, program: Program, group: Group, tiling: Tiling | Tile | Mapping[str, int] | None,
               hbm: Mapping[int, str], outputs: Mapping[int, str], target: str, spec: HardwareSpec) -> str:
    """Prefix sums along the last axis with element-wise prologue and epilogue (see the module docstring)."""
    anchor = group.anchor(program)
    nd = program.nodes[anchor]
    rank = len(program.concrete_shape(anchor))
    if nd.op != "cumsum" or nd.attrs["axis"] % rank != rank - 1 or [program.nodes[i].op for i in group.nodes].count(
            "cumsum") != 1:
        raise NotLowerable(f"{nd.op} (node {anchor}) along axis {nd.attrs.get('axis')} of {list(program.concrete_shape(anchor))}:"
                           f" the NKI emitter scans one cumsum along the last (free) axis per group")
    space = Space(program, group, tuple(program.concrete_shape(anchor)))
    nodes = [i for i in group.nodes if not program.nodes[i].is_constant]
    tile_p, tile_f = _sizes(space, tiling, spec, False)
    add = pick(TileOp("add", ("tile", "tile")), target, {"P": tile_p, "F": tile_f}, f"cumsum (node {anchor})", portable)
    carry_add = pick(TileOp("add", ("tile", "row")), target, {"P": tile_p, "F": tile_f}, f"cumsum (node {anchor})", portable)
    w.line(f"TILE_P, TILE_F = {tile_p}, {tile_f}  # rows on partitions; columns scanned in order, a carry between tiles")
    _loops(w, space, tile_p, tile_f, "sequential_range",
           lambda: (w.line("# the running sum of the column tiles before this one"), w.memset("carry", "(rows, 1)", 0.0)))
    outer = w.depth - 1
    values: dict[int, Any] = {}
    tile_body(w, space, [i for i in nodes if i < anchor], values, hbm, {}, target, tile_f, tile_p)
    y = values[nd.inputs[0]] if nd.inputs[0] in values else _input(w, space, nd.inputs[0], hbm)
    w.line("# Hillis-Steele scan inside the tile: after the step of distance d, y[:, c] sums x[:, c-2d+1..c]")
    d, tail = 1, space.n % tile_f != 0  # without a tail tile every tile has TILE_F columns: no test needed
    while d < tile_f:
        z = w.fresh("scan")
        if tail:
            w.line(f"if {d} < cols:  # cols is a trace-time int: the tail tile loops with static_range")
            w.depth += 1
        w.alloc(z, "(rows, cols)", "nl.float32")
        w.emit("tensor_copy", w.view(f"{z}[:, 0:{d}]", f"(rows, {d})", "nl.float32"), {"src": f"{y}[:, 0:{d}]"},
               f"(rows, {d})")
        for view in (f"{y}[:, {d}:cols]", f"{y}[:, 0:cols - {d}]", f"{z}[:, {d}:cols]"):
            w.view(view, f"(rows, cols - {d})", "nl.float32")
        render_lowering(w, add, {"x": f"{y}[:, {d}:cols]", "y": f"{y}[:, 0:cols - {d}]"}, f"{z}[:, {d}:cols]", {})
        w.line(f"{y} = {z}")
        w.depth -= 1 if tail else 0
        d *= 2
    total = w.fresh("v")
    w.line("# add the carry of the earlier column tiles; the carry becomes this tile's last column")
    render_lowering(w, carry_add, {"x": y, "y": "carry"}, total, {})
    w.line(f"carry = {total}[:, cols - 1:cols]")
    values[anchor] = total
    tile_body(w, space, [i for i in nodes if i > anchor], values, hbm, outputs, target, tile_f, tile_p)
    w.depth = outer - (2 if space.period else 1)
    return f"TILE_P={tile_p} TILE_F={tile_f} scan: {math.ceil(math.log2(max(tile_f, 2)))} steps per tile + carry"


def _input(w: Writer, space: Space, node: int, hbm: Mapping[int, str]) -> str:
    if node not in hbm:
        raise NotLowerable(f"cumsum input (node {node}) is neither computed in the group nor in HBM")
    var = w.fresh("in")
    w.load(var, space.view(hbm[node], node, space.kind(node), w.dialect), "(rows, cols)",
           nl_dtype(space.program.nodes[node].dtype.name))
    return var
