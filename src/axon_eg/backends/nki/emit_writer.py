"""The NKI emitter's writer: kernel-body lines, fresh names, and instructions kept as records until the end.

An instruction is written as an :class:`Emitted` record (its op, destination, raw arguments, and the shape,
dtype and memory of the destination) rather than text, so that the fusion pass (:mod:`.emit_fusion`) can
match admitted fusion rules against the kernel body before :func:`render` turns every record into the
dialect's call: ``nisa.op(dst=..., ...)`` after an ``nl.ndarray`` allocation (current ``nki``), or
``dst = nisa.op(..., dtype=...)`` (legacy ``neuronxcc.nki``). Also here: the instantiation of a proven
lowering's instruction sequence (:func:`render_lowering`), the dtype and literal helpers, and a group's typed
tile (:func:`typed_tile`: the emitters read the Trainium templates' fields, never raw tiling keys).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from axon_eg.backends.kernel import NotLowerable  # noqa: F401  (the emitters import it from here)
from axon_eg.extract.templates import Tile, Tiling
from axon_eg.ir import traced
from axon_eg.semantics.isa import engine
from axon_eg.semantics.isa.declarations import CMD, DECLARATIONS, OP

from . import isa as nki_isa
from .synthesis import Lowering, TileOp, lower

_NL_DTYPES = {"bf16": "nl.bfloat16", "f32": "nl.float32", "fp32": "nl.float32", "float32": "nl.float32",
              "bfloat16": "nl.bfloat16", "f16": "nl.float16", "fp16": "nl.float16", "float16": "nl.float16"}
# attribute -> the module of its NKI token: declared ops are nl.* tokens, enums nisa.<attribute>.*, engines nisa.engine.*
TOKENS = {**{a.name: "nl" if a.kind == OP else f"nisa.{a.name}" for d in DECLARATIONS.values() for a in d.attrs.values()
             if a.kind in (OP, CMD)}, "engine": "nisa.engine"}
ROW = "(rows, 1)"
T = TypeVar("T", bound=Tile)


@dataclass
class Emitted:
    """One instruction of the kernel body, not yet text. ``args``: tile operands are variable names or HBM
    views (str), compile-time numbers ``("imm", v)``, op/engine/reduce tokens their bare names; ``extra``:
    side outputs (``reduce_res``) -> variable; ``load``: a DMA from HBM (``nl.load`` in the legacy dialect)."""

    depth: int
    op: str
    dst: str
    args: dict[str, Any]
    shape: str
    dtype: str
    buffer: str = "sbuf"
    extra: dict[str, str] = field(default_factory=dict)
    note: str = ""  # a comment line written before the instruction (what fused into it)
    pinned: bool = False  # the candidate chose this instruction: the fusion pass leaves it alone

    def reads(self) -> set[str]:
        spec = nki_isa.get(self.op) if self.op in nki_isa.INSTRUCTIONS else None
        keys = set(spec.reads) if spec else {"src", "data"}
        return {base(v) for k, v in self.args.items() if k in keys and isinstance(v, str)}


def base(expr: str) -> str:
    """The variable an expression views (``acc[:, 0:3]`` -> ``acc``)."""
    return expr.split("[", 1)[0].split(".", 1)[0].strip()


class Writer:
    """Lines of the kernel body (str or Emitted), fresh names, shapes and dtypes of on-chip variables."""

    def __init__(self, dialect: str, target: str):
        self.dialect, self.target = dialect, target
        self.lines: list[str | Emitted] = []
        self.depth = 1
        self.count = 0
        self.shape: dict[str, str] = {}  # on-chip var (or view expression) -> shape expression
        self.dtype: dict[str, str] = {}  # on-chip var -> dtype expression
        self.pin = False  # instructions written while set are the candidate's explicit choice (see Emitted)

    def line(self, text: str) -> None:
        for part in text.split("\n"):
            self.lines.append("    " * self.depth + part)

    def tiles(self, var: str, extent: int, tile: int, const: str, offset: str, size: str,
              kind: str = "affine_range", note: str = "") -> None:
        """``for var in ...:`` over the tiles of ``extent`` (``tile`` each, named ``const``), then ``offset`` and
        ``size`` (depth + 1). affine/sequential_range indices are symbolic on a NeuronCore, so tiles that divide
        ``extent`` evenly loop with ``nl.{kind}`` and a constant size; a tail tile loops with ``nl.static_range``
        (Python ints at trace time) so that ``min()`` can size it."""
        tail = traced.partial(extent, tile)
        loop = f"nl.static_range({traced.cdiv(extent, tile)})" if tail else f"nl.{kind}({extent // tile})"
        note = note or ("  # a tail tile: static_range gives trace-time ints for min()" if tail else "")
        self.line(f"for {var} in {loop}:{note}")
        self.depth += 1
        self.line(f"{offset} = {var} * {const}\n{size} = " + (f"min({const}, {extent} - {offset})" if tail else const))

    def fresh(self, stem: str = "t") -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def alloc(self, var: str, shape: str, dtype: str, buffer: str = "sbuf") -> None:
        self.shape[var], self.dtype[var] = shape, dtype
        self.line(f"{var} = nl.ndarray({shape}, dtype={dtype}, buffer=nl.{buffer})")

    def view(self, expr: str, shape: str, dtype: str) -> str:
        """Name a view of an on-chip tile (a free-axis slice) so instructions can read and write it."""
        self.shape[expr], self.dtype[expr] = shape, dtype
        return expr

    def load(self, var: str, src: str, shape: str, dtype: str) -> None:
        self.emit("dma_copy", var, {"src": src}, shape, dtype)

    def store(self, dst: str, var: str) -> None:
        self.line(f"nisa.dma_copy(dst={dst}, src={var})" if self.dialect == "current" else f"nl.store({dst}, value={var})")

    def memset(self, var: str, shape: str, value: float, dtype: str = "nl.float32") -> None:
        self.emit("memset", var, {"value": ("imm", value)}, shape, dtype)

    def emit(self, op: str, dst: str, args: Mapping[str, Any], shape: str, dtype: str = "nl.float32",
             buffer: str = "sbuf", extra: Mapping[str, str] | None = None) -> Emitted:
        """``dst = op(**args)``; ``extra``: other written operands (reduce_res) -> their variables."""
        self.shape[dst], self.dtype[dst] = shape, dtype
        for var in (extra or {}).values():
            self.shape[var], self.dtype[var] = ROW, "nl.float32"
        e = Emitted(self.depth, op, dst, dict(args), shape, dtype, buffer, dict(extra or {}), pinned=self.pin)
        self.lines.append(e)
        return e


# ----------------------------------------------------------------------------------------------- render
def _value(key: str, v: Any) -> str:
    if key in TOKENS:
        return f"{TOKENS[key]}.{v}"
    if isinstance(v, tuple) and v[:1] == ("imm",):
        return literal(v[1])
    if isinstance(v, str):
        return v
    return repr(v)


def _call(e: Emitted, skip: tuple[str, ...] = ()) -> str:
    return ", ".join(f"{k}={_value(k, v)}" for k, v in e.args.items() if k not in skip)


def render(lines: list[str | Emitted], dialect: str) -> list[str]:
    """The kernel body as text in ``dialect``."""
    out: list[str] = []
    for e in lines:
        if isinstance(e, str):
            out.append(e)
            continue
        pad = "    " * e.depth
        if e.note:
            out.append(f"{pad}# {e.note}")
        for var in e.extra.values():
            out.append(f"{pad}{var} = nl.ndarray({ROW}, dtype=nl.float32, buffer=nl.sbuf)")
        if dialect == "current":
            if "[" not in e.dst:  # a new tile (a view of one is written in place)
                out.append(f"{pad}{e.dst} = nl.ndarray({e.shape}, dtype={e.dtype}, buffer=nl.{e.buffer})")
            out.append(f"{pad}nisa.{e.op}(dst={e.dst}, {_call(e)})")
            continue
        if e.op == "dma_copy" and "[" not in e.dst:  # HBM -> SBUF
            out.append(f"{pad}{e.dst} = nl.load({e.args['src']})")
            continue
        op, skip = e.op, ()
        if op == "activation" and "reduce_cmd" in e.args:
            op, skip = "activation_reduce", ("reduce_cmd",)
        if op == "memset":
            call = f"nisa.memset({e.shape}, {_value('value', e.args['value'])}, dtype={e.dtype})"
        else:
            call = f"nisa.{op}({_call(e, skip)}, dtype={e.dtype})"
        out.append(f"{pad}{e.dst} = {call}")  # into a view of a tile: t[:, a:b] = ... writes in place
    return out


def typed_tile(template: type[T], tiling: Tiling | Tile | Mapping[str, Any] | None) -> T:
    """A group's tiling as ``template`` (``TrnMatmulTile``, ``TrnRowsTile``): its typed tile when it has one,
    else its values (a ``Tiling``'s, or a plain mapping's) with the template's defaults for what they lack."""
    if tiling is None or isinstance(tiling, (Tile, Tiling)):
        return template.read(tiling)
    return template.of(tiling)


def nl_dtype(name: str) -> str:
    if name not in _NL_DTYPES:
        raise NotLowerable(f"dtype {name}: NKI tiles hold bf16/fp16/fp32 (no {name} on Trainium engines)")
    return _NL_DTYPES[name]


def literal(value: float) -> str:
    value = float(value)
    return repr(value) if math.isfinite(value) else f'float("{value}")'


# ------------------------------------------------------------------------------- instantiating lowerings
def pick(tile_op: TileOp, target: str, sizes: Mapping[str, int], where: str, accept: Any = None) -> Lowering:
    for lw in lower(tile_op, target, sizes=dict(sizes)):
        if accept is None or accept(lw):
            return lw
    raise NotLowerable(f"{where}: no proven NKI lowering of {tile_op} fits {target} with tile sizes {dict(sizes)} "
                       f"(add one with axon_eg.backends.nki.synthesis.discover)")


def portable(lw: Lowering) -> bool:
    """Sequences the emitter renders in both dialects: no scalar activation bias (a [P, 1] tile is portable)."""
    return not any(i.op == "activation" and isinstance(i.arg("bias"), tuple) for i in lw.sequence)


def _scalar(expr: Any, env: Mapping[str, Any], dims: Mapping[str, int]) -> float:
    head = expr[0]
    if head == "scalar":
        return env[expr[1]][1]
    if head == "imm":
        return float(expr[1])
    if head == "neg":
        return -_scalar(expr[1], env, dims)
    if head == "recip":
        return 1.0 / _scalar(expr[1], env, dims)
    if head == "dim":
        return float(dims[expr[1]])
    raise NotLowerable(f"lowering argument {expr!r} is not a scalar expression the emitter knows")


def render_lowering(w: Writer, lw: Lowering, env: dict[str, Any], out: str, dims: Mapping[str, int],
                    skip: tuple[str, ...] = (), comment: bool = True, out_dtype: str | None = None) -> None:
    """Write ``lw``'s sequence with its formal operands bound by ``env`` (name -> var, or ("scalar", value));
    its ``out`` tile becomes ``out``; instructions named in ``skip`` are left to the caller."""
    if comment:
        w.line(f"# lowering: {lw.name}")
    names = dict(env)
    for ins in lw.sequence:
        if ins.op in skip:  # the caller emits it, writing a var of the same name
            names[ins.dst] = ins.dst
            continue
        spec = nki_isa.get(ins.op)
        args: dict[str, Any] = {}
        extra: dict[str, str] = {}
        data = None
        for key, value in ins.args:
            if key in spec.writes:  # a second written operand (reduce_res)
                var = out if value == "out" else w.fresh()
                names[value] = var
                extra[key] = args[key] = var
            elif isinstance(value, tuple):
                args[key] = ("imm", _scalar(value, names, dims))
            elif key in spec.reads and isinstance(value, str):
                bound = names[value]
                args[key] = ("imm", bound[1]) if isinstance(bound, tuple) else bound
                if key in ("data", "data1", "src") and not isinstance(bound, tuple):  # the operand dst is shaped like
                    data = bound
            else:
                args[key] = value
        dst = out if ins.dst == "out" else w.fresh()
        names[ins.dst] = dst
        shape = ROW if ins.op == "tensor_reduce" else w.shape[data]
        buffer = spec.declaration.default_space(engine(ins))  # psum for nc_matmul and a Tensor-engine transpose
        dtype = w.dtype[data] if ins.op in ("nc_transpose", "dma_transpose") else "nl.float32"
        if ins.dst == "out" and out_dtype is not None:
            dtype = out_dtype
        w.emit(ins.op, dst, args, shape, dtype, buffer, extra)
