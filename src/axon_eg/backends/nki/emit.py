"""Candidate -> one readable NKI kernel file, in the dialect the hardware file names (``features.nki_dialect``).

The file mirrors the Triton emitter's: a header that states the variant (rules, fusion groups with their
tiling and lowering, predicted cost), then one ``@nki.jit`` kernel that runs the groups in order, each as a
loop nest over tiles. Rows map to the partition dim in tiles of ``TILE_P <= 128``; element-wise groups tile
the free dim by ``TILE_F``; row-reduction groups keep whole rows on chip (one free tile of N <= the
engines' free-size limit). Every instruction sequence for a tile op is taken from the proven lowerings
(:func:`.synthesis.lower`, the first whose limits fit), and a comment names the lowering entry it came from.

Handled: element-wise groups (unary/binary registry ops with a proven lowering, per-row ``[P, 1]``,
per-column and single-value broadcasts, scalar constants; leading axes flatten into rows), row reductions
over the last axis (sum/mean/max/min, hence softmax / rmsnorm / layernorm after expansion), matmul (blocked
like the NKI tutorial: BLOCK_M row tiles of A^T and BLOCK_N column tiles of B hoisted into SBUF, PSUM
accumulation over K tiles <= 128, moving free <= 512; A^T loaded transposed from HBM, or transposed on chip by
``nc_transpose`` / ``dma_transpose`` when the candidate's isa says so; ``x.T`` / ``w.T`` operands loaded as
stored / transposed) with element-wise epilogues (and a row reduction when N fits one PSUM tile), and 2-D
transposes (``nc_transpose`` on the Tensor engine, or ``dma_transpose`` where the candidate's isa and the
chip say so). Groups pass values through HBM buffers. Anything else raises :class:`NotLowerable` (a
NotImplementedError) naming the op: scans, attention, library ops, matmul prologues, reductions over other
axes, views that move data between rows and columns.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from axon_eg.backends.kernel import Kernel, identifier
from axon_eg.errors import AxonError
from axon_eg.extract.candidates import Candidate
from axon_eg.extract.fusion import ELEMENTWISE, LAYOUT, MATMUL, REDUCTION, FusionPlan, Group, node_kind
from axon_eg.hw import HardwareSpec
from axon_eg.ir.program import Program

from . import isa as nki_isa
from .synthesis import Lowering, TileOp, lower

ROW_REDUCTIONS = {"sum", "mean", "max", "min"}
_NP_DTYPES = {"bf16": "nl.bfloat16", "f32": "nl.float32", "fp32": "nl.float32", "float32": "nl.float32",
              "bfloat16": "nl.bfloat16", "f16": "nl.float16", "fp16": "nl.float16", "float16": "nl.float16"}
_TOKENS = {"op": "nl", "op0": "nl", "op1": "nl", "reduce_op": "nl", "engine": "nisa.engine", "reduce_cmd": "nisa.reduce_cmd"}
_HEADERS = {"current": "import nki\nimport nki.isa as nisa\nimport nki.language as nl\n",
            "legacy": "import neuronxcc.nki as nki\nimport neuronxcc.nki.isa as nisa\nimport neuronxcc.nki.language as nl\n"}


class NotLowerable(AxonError, NotImplementedError):
    """A group uses an op (or a shape) the NKI emitter has no lowering for; the message names it."""


# ------------------------------------------------------------------------------------------ the writer
class _Writer:
    """Lines of the kernel body, fresh names, and the dialect-specific rendering of one instruction."""

    def __init__(self, dialect: str, target: str):
        self.dialect, self.target = dialect, target
        self.lines: list[str] = []
        self.depth = 1
        self.count = 0
        self.shape: dict[str, str] = {}  # on-chip var -> shape expression
        self.dtype: dict[str, str] = {}  # on-chip var -> dtype expression

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def fresh(self, stem: str = "t") -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def alloc(self, var: str, shape: str, dtype: str, buffer: str = "sbuf") -> None:
        self.shape[var], self.dtype[var] = shape, dtype
        self.line(f"{var} = nl.ndarray({shape}, dtype={dtype}, buffer=nl.{buffer})")

    def load(self, var: str, src: str, shape: str, dtype: str) -> None:
        if self.dialect == "current":
            self.alloc(var, shape, dtype)
            self.line(f"nisa.dma_copy(dst={var}, src={src})")
        else:
            self.shape[var], self.dtype[var] = shape, dtype
            self.line(f"{var} = nl.load({src})")

    def store(self, dst: str, var: str) -> None:
        self.line(f"nisa.dma_copy(dst={dst}, src={var})" if self.dialect == "current" else f"nl.store({dst}, value={var})")

    def instruction(self, op: str, dst: str, args: Mapping[str, str], shape: str, dtype: str = "nl.float32",
                    buffer: str = "sbuf", extra: Mapping[str, str] | None = None) -> None:
        """``dst = op(**args)`` (args already rendered); ``extra``: other written operands -> their shapes."""
        for name in (extra or {}).values():
            self.alloc(name, "(rows, 1)", "nl.float32")
        call = ", ".join(f"{k}={v}" for k, v in args.items())
        if self.dialect == "current":
            self.alloc(dst, shape, dtype, buffer)
            self.line(f"nisa.{op}(dst={dst}, {call})")
            return
        self.shape[dst], self.dtype[dst] = shape, dtype
        if op == "activation" and "reduce_cmd" in args:
            args = {k: v for k, v in args.items() if k != "reduce_cmd"}
            op, call = "activation_reduce", ", ".join(f"{k}={v}" for k, v in args.items())
        self.line(f"{dst} = nisa.{op}({call}, dtype={dtype})")


def _nl_dtype(name: str) -> str:
    if name not in _NP_DTYPES:
        raise NotLowerable(f"dtype {name}: NKI tiles hold bf16/fp16/fp32 (no {name} on Trainium engines)")
    return _NP_DTYPES[name]


def _literal(value: float) -> str:
    return repr(float(value))


# ------------------------------------------------------------------------------- instantiating lowerings
def _pick(tile_op: TileOp, target: str, sizes: Mapping[str, int], where: str, accept: Any = None) -> Lowering:
    for lw in lower(tile_op, target, sizes=dict(sizes)):
        if accept is None or accept(lw):
            return lw
    raise NotLowerable(f"{where}: no proven NKI lowering of {tile_op} fits {target} with tile sizes {dict(sizes)} "
                       f"(add one with axon_eg.backends.nki.synthesis.discover)")


def _portable(lw: Lowering) -> bool:
    """Sequences the emitter renders in both dialects: no scalar activation bias (a [P, 1] tile is portable)."""
    return not any(i.op == "activation" and isinstance(i.arg("bias"), tuple) for i in lw.sequence)


def _scalar(expr: Any, env: Mapping[str, Any], dims: Mapping[str, int]) -> float:
    head = expr[0]
    if head == "scalar":
        return env[expr[1]][1]
    if head == "neg":
        return -_scalar(expr[1], env, dims)
    if head == "recip":
        return 1.0 / _scalar(expr[1], env, dims)
    if head == "dim":
        return float(dims[expr[1]])
    raise NotLowerable(f"lowering argument {expr!r} is not a scalar expression the emitter knows")


def _render(w: _Writer, lw: Lowering, env: dict[str, Any], out: str, dims: Mapping[str, int],
            skip: tuple[str, ...] = (), comment: bool = True, out_dtype: str | None = None) -> None:
    """Emit ``lw``'s sequence with its formal operands bound by ``env`` (name -> var, or ("scalar", value));
    its ``out`` tile becomes ``out``; instructions named in ``skip`` are left to the caller."""
    if comment:
        w.line(f"# lowering: {lw.name}")
    names = dict(env)
    for ins in lw.sequence:
        if ins.op in skip:  # the caller emits it, writing a var of the same name
            names[ins.dst] = ins.dst
            continue
        spec = nki_isa.get(ins.op)
        args: dict[str, str] = {}
        extra: dict[str, str] = {}
        data = None
        for key, value in ins.args:
            if key in spec.writes:  # a second written operand (reduce_res)
                var = out if value == "out" else w.fresh()
                names[value] = var
                extra[key] = var
                args[key] = var
            elif isinstance(value, tuple):
                args[key] = _literal(_scalar(value, names, dims))
            elif key in spec.reads and isinstance(value, str):
                bound = names[value]
                args[key] = _literal(bound[1]) if isinstance(bound, tuple) else bound
                if key in ("data", "data1", "src") and not isinstance(bound, tuple):  # the operand dst is shaped like
                    data = bound
            elif key in _TOKENS:
                args[key] = f"{_TOKENS[key]}.{value}"
            else:
                args[key] = repr(value)
        if ins.op == "tensor_reduce":
            args["axis"] = "(1,)"
        dst = out if ins.dst == "out" else w.fresh()
        names[ins.dst] = dst
        shape = "(rows, 1)" if ins.op == "tensor_reduce" else w.shape[data]
        buffer = "psum" if ins.op == "nc_matmul" or (ins.op == "nc_transpose" and ins.arg("engine") == "tensor") else "sbuf"
        dtype = w.dtype[data] if ins.op in ("nc_transpose", "dma_transpose") else "nl.float32"
        if ins.dst == "out" and out_dtype is not None:
            dtype = out_dtype
        w.instruction(ins.op, dst, args, shape, dtype, buffer, {k: v for k, v in extra.items()})


# ----------------------------------------------------------------------------------------- row groups
class _Space:
    """A group's iteration space: its full shape flattened to [M rows, N columns] (N the last axis), and how each
    value maps onto the tiles of that space."""

    def __init__(self, program: Program, group: Group, full: tuple[int, ...]):
        self.program, self.group, self.full = program, group, full
        self.m, self.n = math.prod(full[:-1]), (full[-1] if full else 1)

    def kind(self, node: int) -> str:
        """tile [M, N], row [M, 1], col (a per-column vector broadcast over rows), one (a single value broadcast
        everywhere), or scalar (a constant, emitted as a literal)."""
        shape = tuple(self.program.concrete_shape(node))
        op = self.program.nodes[node].op
        if op == "constant" and math.prod(shape) == 1:
            return "scalar"
        if shape == self.full:
            return "tile"
        if self.full and (shape == self.full[:-1] + (1,) or (shape == self.full[:-1] and op != "input")):
            return "row"
        if math.prod(shape) == 1:
            return "one"
        if len(shape) <= len(self.full) and tuple(d for d in shape if d != 1) == (self.n,) and shape[-1] == self.n:
            return "col"
        raise NotLowerable(f"{op} node {node} of shape {list(shape)} does not map onto the rows x columns "
                           f"{list(self.full)} of its group ({self.group.kind}): the NKI emitter broadcasts rows, "
                           f"columns and single values only")

    def view(self, hbm: str, node: int, kind: str) -> str:
        """The HBM slice of the current tile (rows r0.., columns c0..) of a value of this kind."""
        shape = tuple(self.program.concrete_shape(node))
        if kind == "row":
            flat = hbm if shape == (self.m, 1) else f"{hbm}.reshape(({self.m}, 1))"
            return f"{flat}[r0:r0 + rows, 0:1]"
        if kind == "one":
            return f"{hbm}.reshape((1, 1))[nl.arange(rows)[:, None] * 0, nl.arange(1)[None, :]]"
        if kind == "col":
            flat = hbm if shape == (1, self.n) else f"{hbm}.reshape((1, {self.n}))"
            return f"{flat}[nl.arange(rows)[:, None] * 0, c0 + nl.arange(cols)[None, :]]"
        flat = hbm if shape == (self.m, self.n) else f"{hbm}.reshape(({self.m}, {self.n}))"
        return f"{flat}[r0:r0 + rows, c0:c0 + cols]"


def _tile_body(w: _Writer, space: _Space, nodes: list[int], values: dict[int, Any], hbm: Mapping[int, str],
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
                shape = "(rows, 1)" if kind in ("row", "one") else "(rows, cols)"
                w.load(var, space.view(hbm[node], node, kind), shape,
                       _nl_dtype(program.nodes[node].dtype.name))
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
        kind = space.kind(node)
        ins = [value(i) for i in nd.inputs]
        kinds = [{"one": "row"}.get(space.kind(i), space.kind(i)) for i in nd.inputs]
        if nd.op in ROW_REDUCTIONS and not nd.attrs["axes"]:  # reducing over no axes: the values themselves
            values[node] = value(nd.inputs[0])
            continue
        if nd.op in ROW_REDUCTIONS:
            axes = tuple(a % len(program.concrete_shape(nd.inputs[0])) for a in nd.attrs["axes"])
            if kinds != ["tile"] or axes != (len(program.concrete_shape(nd.inputs[0])) - 1,):
                raise NotLowerable(f"{nd.op} over axes {list(nd.attrs['axes'])}: only row reductions over the last axis")
            operands = ("tile",)
        elif node_kind(nd.op) == ELEMENTWISE:
            operands = tuple("scalar" if k == "scalar" else "row" if k == "row" and kind != "row" else "tile" for k in kinds)
        else:
            raise NotLowerable(f"{nd.op} (node {node}) in a {space.group.kind} group: the NKI emitter lowers element-wise "
                               f"ops and row reductions here")
        attrs = tuple(sorted((k, v) for k, v in nd.attrs.items())) if node_kind(nd.op) == ELEMENTWISE else ()
        tile_op = TileOp(nd.op, operands, attrs)
        lw = _pick(tile_op, target, {"P": tile_p, "F": free}, f"{nd.op} (node {node})", _portable)
        var = w.fresh("v")
        _render(w, lw, dict(zip(tile_op.names, ins)), var, {"F": space.n, "P": tile_p})
        values[node] = var
    for node, out in outputs.items():
        kind = space.kind(node)
        w.store(space.view(out, node, kind), values[node])


def _full_shape(program: Program, group: Group) -> tuple[int, ...]:
    """The shape the group iterates over: the reduced operand of its (first) row reduction, else its anchor's."""
    anchor = group.anchor(program)
    node = program.nodes[anchor]
    return tuple(program.concrete_shape(node.inputs[0] if node.op in ROW_REDUCTIONS else anchor))


def _row_group(w: _Writer, program: Program, group: Group, tiling: Mapping[str, int], hbm: Mapping[int, str],
               outputs: Mapping[int, str], target: str, spec: HardwareSpec) -> str:
    space = _Space(program, group, _full_shape(program, group))
    m, n = space.m, space.n
    pmax = int(spec.value("limits.partition_max"))
    tile_p = max(1, min(int(tiling.get("TILE_P", pmax)), pmax))
    whole_rows = group.kind == REDUCTION
    free_max = int(spec.value("limits.vector.free_max_sbuf"))
    tile_f = n if whole_rows else max(1, min(int(tiling.get("TILE_F", n)), n, free_max))
    if tile_f > free_max:
        raise NotLowerable(f"row reduction over {n} columns: a row does not fit one tile (free size <= {free_max})")
    w.line(f"TILE_P, TILE_F = {tile_p}, {tile_f}  # rows on partitions; {'whole rows' if whole_rows else 'columns'}")
    w.line(f"for i in nl.affine_range({math.ceil(m / tile_p)}):")
    w.depth += 1
    w.line(f"r0 = i * TILE_P\nrows = min(TILE_P, {m} - r0)".replace("\n", "\n" + "    " * w.depth))
    w.line(f"for j in nl.affine_range({math.ceil(n / tile_f)}):")
    w.depth += 1
    w.line(f"c0 = j * TILE_F\ncols = min(TILE_F, {n} - c0)".replace("\n", "\n" + "    " * w.depth))
    nodes = [i for i in group.nodes if program.nodes[i].op != "constant"]
    _tile_body(w, space, nodes, {}, hbm, outputs, target, tile_f, tile_p)
    w.depth -= 2
    return f"TILE_P={tile_p} TILE_F={tile_f}"


# --------------------------------------------------------------------------------------------- matmul
def _matmul_group(w: _Writer, program: Program, group: Group, tiling: Mapping[str, int], hbm: Mapping[int, str],
                  outputs: Mapping[int, str], target: str, spec: HardwareSpec, choice: str | None = None) -> str:
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
    prologue = [i for i in group.nodes if i < anchor and i not in layouts and program.nodes[i].op != "constant"]
    if prologue and a not in prologue:
        raise NotLowerable(f"{program.nodes[prologue[0]].op} (node {prologue[0]}) before the matmul does not compute "
                           f"its A operand; the NKI emitter fuses row-wise prologues of A only")
    if b in group.nodes or (a in group.nodes and not prologue) or len(program.concrete_shape(anchor)) != 2:
        raise NotLowerable(f"matmul (node {anchor}) of shape {list(program.concrete_shape(anchor))}: only 2-D A @ B "
                           f"with operands in HBM")
    m, n = program.concrete_shape(anchor)
    k = program.concrete_shape(b)[0 if b_layout == "kn" else 1]
    tk = min(int(tiling.get("TILE_K", 128)), int(spec.value("limits.matmul.contraction_max")), k)
    tm = min(int(tiling.get("TILE_M", 128)), int(spec.value("limits.matmul.stationary_free_max")), m)
    tn = min(int(tiling.get("TILE_N", 512)), int(spec.value("limits.matmul.moving_free_max")), n)
    reductions = [program.nodes[i].op for i in group.nodes if i > anchor and program.nodes[i].op in ROW_REDUCTIONS]
    if reductions and n > tn:
        raise NotLowerable(f"{reductions[0]} across the matmul's {n} columns spans {math.ceil(n / tn)} column tiles "
                           f"(TILE_N={tn}); the NKI emitter reduces an epilogue row within one PSUM tile only")
    lw = _pick(TileOp("matmul", ("tile", "tile"), (("a_layout", "km"),)), target, {"K": tk, "M": tm, "N": tn},
               f"matmul (node {anchor})", lambda lw: [i.op for i in lw.sequence][0] == "nc_matmul"
               and lw.sequence[0].arg("stationary") == "A")
    nk = math.ceil(k / tk)
    ka, kb = hbm.get(a, ""), hbm[b]  # a prologue computes A on chip: no HBM source
    nm, nn = math.ceil(m / tm), math.ceil(n / tn)
    block_m = max(1, min(int(tiling.get("BLOCK_M", 1)), nm))
    block_n = max(1, min(int(tiling.get("BLOCK_N", 1)), nn))
    a_dtype, b_dtype = _nl_dtype(program.nodes[a].dtype.name), _nl_dtype(program.nodes[b].dtype.name)
    free_max = int(spec.value("limits.vector.free_max_sbuf"))
    if prologue and k > free_max:
        raise NotLowerable(f"matmul (node {anchor}) prologue: a row of A holds {k} values, more than one tile "
                           f"(free size <= {free_max})")
    if prologue:
        choice = "nc_transpose"  # A's rows are computed on chip: the Tensor engine transposes them
    w.line(f"TILE_K, TILE_M, TILE_N = {tk}, {tm}, {tn}  # contraction, stationary free, moving free (one PSUM bank)")
    w.line(f"BLOCK_M, BLOCK_N = {block_m}, {block_n}  # row / column tiles whose operand tiles stay in SBUF together")
    w.line(f"for mb in nl.affine_range({math.ceil(nm / block_m)}):")
    w.depth += 1
    how = {"km": "loaded as stored (A = x.T)", "nc_transpose": "transposed on the Tensor engine",
           "dma_transpose": "transposed in the DMA"}.get(a_layout if a_layout == "km" else choice, "loaded transposed")
    if prologue:
        how = "computed on chip by the prologue and transposed on the Tensor engine"
    else:
        how += " from HBM"
    w.line(f"# stationary: A^T tiles [k, rows] of BLOCK_M row tiles, {how}, kept for every column tile")
    w.line("a_tiles = []")
    w.line(f"for bm in nl.static_range(min(BLOCK_M, {nm} - mb * BLOCK_M)):")
    w.line("    r0 = (mb * BLOCK_M + bm) * TILE_M")
    w.line(f"    rows = min(TILE_M, {m} - r0)")
    w.line("    a_row = []")
    w.depth += 1
    if prologue:  # whole rows of A, computed once per row tile, cast to B's dtype, then transposed per K tile
        w.line(f"c0, cols = 0, {k}  # whole rows of A: the prologue reduces over K")
        values: dict[int, Any] = {}
        _tile_body(w, _Space(program, group, (m, k)), prologue, values, hbm, {}, target, k, tm)
        w.line(f"# the Tensor engine multiplies like dtypes: A's rows in {b_dtype} (a copy that casts)")
        if w.dialect == "current":
            w.alloc("a_rows", "(rows, cols)", b_dtype)
            w.line(f"nisa.tensor_copy(dst=a_rows, src={values[a]})")
        else:
            w.line(f"a_rows = nisa.tensor_copy({values[a]}, dtype={b_dtype})")
    w.line(f"for kk in nl.static_range({nk}):")
    w.depth += 1
    w.line(f"k0 = kk * TILE_K\nks = min(TILE_K, {k} - k0)".replace("\n", "\n" + "    " * w.depth))
    if prologue:
        lw_t = _transpose_lowering(target, spec, False, f"matmul (node {anchor}) stationary")
        w.line("a_slice = a_rows[:, k0:k0 + ks]")
        w.shape["a_slice"], w.dtype["a_slice"] = "(ks, rows)", b_dtype  # what each instruction of the transpose writes
        _render(w, lw_t, {"x": "a_slice"}, "aT", {}, out_dtype=b_dtype)
    elif a_layout == "mk" and choice in ("nc_transpose", "dma_transpose"):  # A tile [rows, k] transposed on chip
        dma = choice == "dma_transpose"
        lw_t = _transpose_lowering(target, spec, dma, f"matmul (node {anchor}) stationary")
        src = f"{ka}[r0:r0 + rows, k0:k0 + ks]"
        if not dma:
            w.load("a_tile", src, "(rows, ks)", a_dtype)
            src = "a_tile"
        w.shape[src], w.dtype[src] = "(ks, rows)", a_dtype  # what each instruction of the transpose writes
        _render(w, lw_t, {"x": src}, "aT", {}, out_dtype=a_dtype)
    else:
        src = (f"{ka}[k0:k0 + ks, r0:r0 + rows]" if a_layout == "km"
               else f"{ka}[r0 + nl.arange(rows)[None, :], k0 + nl.arange(ks)[:, None]]")
        w.load("aT", src, "(ks, rows)", a_dtype)
    w.line("a_row.append(aT)")
    w.depth -= 1
    w.line("a_tiles.append(a_row)")
    w.depth -= 1
    w.line(f"for nb in nl.affine_range({math.ceil(nn / block_n)}):")
    w.depth += 1
    w.line(f"# moving: B tiles [k, cols] of BLOCK_N column tiles{' (w.T: loaded transposed)' if b_layout == 'nk' else ''}"
           f", loaded once per row block")
    w.line("b_tiles = []")
    w.line(f"for bn in nl.static_range(min(BLOCK_N, {nn} - nb * BLOCK_N)):")
    w.line("    c0 = (nb * BLOCK_N + bn) * TILE_N")
    w.line(f"    cols = min(TILE_N, {n} - c0)")
    w.line("    b_col = []")
    w.line(f"    for kk in nl.static_range({nk}):")
    w.depth += 2
    w.line(f"k0 = kk * TILE_K\nks = min(TILE_K, {k} - k0)".replace("\n", "\n" + "    " * w.depth))
    src = (f"{kb}[k0:k0 + ks, c0:c0 + cols]" if b_layout == "kn"
           else f"{kb}[c0 + nl.arange(cols)[None, :], k0 + nl.arange(ks)[:, None]]")
    w.load("b_tile", src, "(ks, cols)", b_dtype)
    w.line("b_col.append(b_tile)")
    w.depth -= 1
    w.line("b_tiles.append(b_col)")
    w.depth -= 1
    w.line("for bm in nl.affine_range(len(a_tiles)):")
    w.line("    r0 = (mb * BLOCK_M + bm) * TILE_M")
    w.line(f"    rows = min(TILE_M, {m} - r0)")
    w.line("    for bn in nl.affine_range(len(b_tiles)):")
    w.depth += 2
    w.line("c0 = (nb * BLOCK_N + bn) * TILE_N")
    w.line(f"cols = min(TILE_N, {n} - c0)")
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
    _render(w, lw, {"A": "a_tiles[bm][kk]", "B": "b_tiles[bn][kk]"}, out, {"K": tk}, skip=("nc_matmul",), comment=False)
    epilogue = [i for i in group.nodes if i > anchor]
    space = _Space(program, group, (m, n))
    _tile_body(w, space, [i for i in epilogue if program.nodes[i].op != "constant"], {anchor: out}, hbm, outputs,
               target, tn, tm)
    w.depth -= 4
    return f"TILE_K={tk} TILE_M={tm} TILE_N={tn} BLOCK_M={block_m} BLOCK_N={block_n}"


# ------------------------------------------------------------------------------------------ transposes
def _transpose_lowering(target: str, spec: HardwareSpec, dma: bool, where: str) -> Lowering:
    """The proven lowering of a <= 128x128 tile transpose: in the DMA (``dma_transpose``, from HBM) or on the
    Tensor engine (``nc_transpose`` into PSUM, then a copy to SBUF)."""
    if dma and not spec.get("features.dma_transpose", False):
        raise NotLowerable(f"{where}: the candidate asks for dma_transpose, which {target} lacks "
                           f"(features.dma_transpose is false); use nc_transpose")
    t = int(spec.value("limits.transpose.tensor_engine_max"))
    engine = "dma_transpose" if dma else "nc_transpose"
    return _pick(TileOp("transpose", ("tile",), (), "hbm" if dma else "sbuf"), target, {"P": t, "F": t}, where,
                 lambda lw: any(i.op == engine and (dma or i.arg("engine") == "tensor") for i in lw.sequence))

def _transpose_group(w: _Writer, program: Program, group: Group, choice: str | None, hbm: Mapping[int, str],
                     outputs: Mapping[int, str], target: str, spec: HardwareSpec) -> str:
    nodes = [i for i in group.nodes if node_kind(program.nodes[i].op) is not None]
    node = program.nodes[nodes[0]]
    if len(nodes) != 1 or node.op != "transpose" or len(program.concrete_shape(nodes[0])) != 2:
        raise NotLowerable(f"{', '.join(program.nodes[i].op for i in nodes)}: the NKI emitter lowers 2-D transposes "
                           f"as layout groups")
    r, c = program.concrete_shape(node.inputs[0])
    t = int(spec.value("limits.transpose.tensor_engine_max"))
    # DMA transposes move 2-byte elements only: other dtypes fall back to the Tensor engine
    dma = choice == "dma_transpose" and (program.nodes[node.inputs[0]].dtype.name in ("bf16", "fp16")
                                         or not spec.get("features.dma_transpose", False))
    lw = _transpose_lowering(target, spec, dma, f"transpose (node {nodes[0]})")
    w.line(f"T = {t}  # tile edge: the Tensor engine transposes <= {t}x{t}")
    w.line(f"for i in nl.affine_range({math.ceil(r / t)}):")
    w.line(f"    for j in nl.affine_range({math.ceil(c / t)}):")
    w.depth += 2
    w.line(f"r0, c0 = i * T, j * T\nrows, cols = min(T, {r} - r0), min(T, {c} - c0)".replace("\n", "\n" + "    " * w.depth))
    src = f"{hbm[node.inputs[0]]}[r0:r0 + rows, c0:c0 + cols]"
    dtype = _nl_dtype(program.nodes[node.inputs[0]].dtype.name)
    if dma:
        w.shape[src], w.dtype[src] = "(cols, rows)", dtype
        _render(w, lw, {"x": src}, "v", {})
    else:
        w.load("x_tile", src, "(rows, cols)", dtype)
        w.shape["x_tile"] = "(cols, rows)"  # the shape every instruction of the sequence writes
        _render(w, lw, {"x": "x_tile"}, "v", {})
    w.store(f"{outputs[nodes[0]]}[c0:c0 + cols, r0:r0 + rows]", "v")
    w.depth -= 2
    return "dma_transpose" if dma else f"T={t}"


# ----------------------------------------------------------------------------------------------- emit
def emit(candidate: Candidate, hw: HardwareSpec, name: str) -> Kernel:
    """One NKI kernel file for ``candidate`` on ``hw`` (a Trainium hardware description)."""
    dialect = str(hw.value("features.nki_dialect"))
    target = hw.name
    plan: FusionPlan = candidate.plan
    program = plan.program
    taken: set[str] = set()
    params = [identifier(s.name, taken) for s in program.inputs]
    hbm: dict[int, str] = dict(zip(program.input_ids, params))
    w = _Writer(dialect, target)
    entry = identifier(name, taken)
    # every group's outputs live in HBM: the program's outputs, and values a later group reads
    produced: dict[int, int] = {n: gi for gi, g in enumerate(plan.groups) for n in g.nodes}
    needed = set(program.outputs) | {i for g in plan.groups for n in g.nodes for i in program.nodes[n].inputs
                                     if produced.get(i, -1) not in (-1, produced[n])}
    for n in sorted(needed):
        if n in hbm:
            continue
        hbm[n] = f"out{list(program.outputs).index(n)}" if n in program.outputs else f"hbm{n}"
        shape = tuple(program.concrete_shape(n))
        w.line(f"{hbm[n]} = nl.ndarray({shape}, dtype={_nl_dtype(program.nodes[n].dtype.name)}, buffer=nl.shared_hbm)")
    isa_choice = dict(candidate.isa)
    described: list[str] = []
    for gi, g in enumerate(plan.groups):
        tiling = dict(candidate.tilings[gi].values) if gi < len(candidate.tilings) else {}
        outputs = {n: hbm[n] for n in g.nodes if n in needed}
        ops = ", ".join(program.nodes[n].op for n in g.nodes if node_kind(program.nodes[n].op))
        w.line(f"# group {gi} ({g.kind}): {ops}")
        if g.kind in (ELEMENTWISE, REDUCTION):
            how = _row_group(w, program, g, tiling, hbm, outputs, target, hw)
        elif g.kind == MATMUL:
            how = _matmul_group(w, program, g, tiling, hbm, outputs, target, hw, isa_choice.get(gi))
        elif g.kind == LAYOUT:
            how = _transpose_group(w, program, g, isa_choice.get(gi), hbm, outputs, target, hw)
        else:
            raise NotLowerable(f"{g.kind} group ({ops}): no NKI lowering for {g.kind} groups (library ops such as conv "
                               f"and pool are out of scope)")
        described.append(f"#   {gi}: {g.kind} [{ops}] {how}")
    fused = _fuse_activation_reduce(w.lines, target) if dialect == "current" else 0
    results = ", ".join(hbm[o] for o in program.outputs)
    header = [f'"""NKI kernel {entry} for {target} ({dialect} dialect), emitted by axon_eg.backends.nki.emit.', "",
              f"plan: {plan.name}; rules: {', '.join(candidate.variant.rules) or 'none'}; "
              f"predicted {candidate.predicted_seconds * 1e6:.3f} us", '"""', ""]
    lines = [*header, _HEADERS[dialect].rstrip(), "", "# fusion groups (tiling):", *described, "", "", "@nki.jit",
             f"def {entry}({', '.join(params)}):", *w.lines, f"    return {results}", ""]
    meta = {"lowering": f"nki:{len(plan.groups)}", "dialect": dialect, "plan": plan.name, "groups": len(plan.groups),
            "fused_instructions": fused,
            "rules": list(candidate.variant.rules), "predicted_us": candidate.predicted_seconds * 1e6}
    return Kernel(name, "\n".join(lines), entry, "return", "candidate", {}, meta)


_REDUCE = re.compile(r"^(\s*)nisa\.tensor_reduce\(dst=(\w+), axis=\(1,\), data=(\w+), keepdims=True, op=nl\.add\)$")


def _fuse_activation_reduce(lines: list[str], target: str) -> int:
    """Apply the proven instruction-fusion rule "activation + tensor_reduce -> activation with reduce_res"
    (add only) to the kernel body in place: a row sum of an activation's output becomes the activation's
    own reduce register, one Scalar-engine pass instead of a second Vector-engine pass. Returns how
    many pairs were fused."""
    from .synthesis import fusion_rules

    rule = next((r for r in fusion_rules(target) if r["name"].startswith("activation+tensor_reduce ->")), None)
    if rule is None:
        return 0
    count = 0
    i = 0
    while i < len(lines):
        m = _REDUCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, res, data = m.groups()
        call = re.compile(rf"^{indent}nisa\.activation\(dst={data}, (.*)\)$")
        a = next((j for j in range(i - 1, -1, -1) if call.match(lines[j])), None)
        if a is None or "reduce_res" in lines[a] or any(data in ln for ln in lines[a + 1:i - 2]):
            i += 1
            continue
        alloc, comment = i - 1, i - 2
        if not lines[alloc].strip().startswith(f"{res} = nl.ndarray(") or not lines[comment].strip().startswith("# lowering:"):
            i += 1
            continue
        allocation = lines[alloc]
        fused = lines[a][:-1] + f", reduce_op=nl.add, reduce_res={res}, reduce_cmd=nisa.reduce_cmd.reset_reduce)"
        del lines[comment:i + 1]
        lines[a:a + 1] = [allocation, f"{indent}# fused ({rule['name'].split(' ->')[0]} -> activation with "
                                      "reduce_res, a proven instruction-fusion rule)", fused]
        count += 1
        i = a + 3
    return count
