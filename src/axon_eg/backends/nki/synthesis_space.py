"""The search space of NKI lowerings: tile-level ops and the instruction sketches that may compute them.

A :class:`TileOp` is a registry op (or a small fused pattern) on tiles ``[P, F]`` (partition first),
per-row vectors ``[P, 1]`` and compile-time scalars, with symbolic sizes; :func:`tile_spec` gives its
meaning as a registry Program plus the input tiles it reads. :func:`sketches` enumerates candidate
instruction sequences for it: each family is a fixed skeleton whose holes (instruction choice,
activation function, operand order and reverse flags, which operand is stationary, how an operand is
transposed and on which engine) are filled in every way. Holes that never change shapes or values
are filled only for proven sketches: :func:`refinements` (how the PSUM accumulator starts, how a PSUM
result reaches SBUF) and :func:`engine_choices` (which engine runs an instruction that several can).
Nothing here decides what is correct: the prover does (``semantics.isa.prove_lowering``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from axon_eg.ir import ops as O
from axon_eg.ir.program import Builder, Program, Value
from axon_eg.semantics.isa import ACTIVATIONS, ALU, DECLARATIONS, REDUCE_OPS, Instr, TileType, default_space
from axon_eg.semantics.isa.instructions import format_operand
from axon_eg.semantics.nf import Ix
from axon_eg.semantics.prover import ScalarSymbol

UNARY_OPS: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = (
    ("exp", ()), ("log", ()), ("sqrt", ()), ("rsqrt", ()), ("reciprocal", ()), ("tanh", ()), ("sigmoid", ()),
    ("silu", ()), ("gelu", (("approximate", "none"),)), ("gelu", (("approximate", "tanh"),)), ("relu", ()),
    ("square", ()), ("abs", ()), ("erf", ()), ("softplus", ()), ("neg", ()),
)
BINARY_OPS = ("add", "sub", "mul", "div", "maximum", "minimum")
BINARY_FORMS = (("tile", "tile"), ("tile", "row"), ("row", "tile"), ("tile", "scalar"), ("scalar", "tile"))
AFFINE_FORMS = (("scalar", "scalar"), ("row", "row"), ("scalar", "row"), ("row", "scalar"))
REDUCTIONS = ("sum", "max", "min", "mean")
ARITH = ("add", "subtract", "multiply", "divide")  # the ops of two-op and chained sketches
CONSTANTS = (("imm", 0.0), ("imm", 1.0), ("imm", -1.0))
TRANSPOSE_ROUTES = ("nc_transpose:tensor", "nc_transpose:vector", "dma_transpose", "tensor_copy", "dma_copy")
MATMUL_PREP = ("as_is", "nc_transpose:tensor", "nc_transpose:vector", "dma_transpose")
ACCUMULATE = ("overwrite", "zeroed", "uninitialized")
EVACUATE = ("tensor_copy", "activation")  # how a PSUM result reaches SBUF (the copy's engine: engine_choices)


@dataclass(frozen=True)
class TileOp:
    """A tile-level op the NKI emitter lowers. ``op`` is a registry op name or a fused pattern
    (``affine`` = x*a + b, ``exp_affine`` = exp(x*a + b)); ``operands`` are kinds: ``tile`` [P, F],
    ``row`` [P, 1], ``scalar`` (compile-time); ``space`` is where the tile operands are ("hbm" lets the
    lowering load, and transpose, them on the way in)."""

    op: str
    operands: tuple[str, ...]
    attrs: tuple[tuple[str, Any], ...] = ()
    space: str = "sbuf"

    @property
    def key(self) -> str:
        attrs = "[" + ",".join(f"{k}={v}" for k, v in self.attrs) + "]" if self.attrs else ""
        return f"{self.op}{attrs}({','.join(self.operands)})@{self.space}"

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "operands": list(self.operands), "attrs": {k: v for k, v in self.attrs}, "space": self.space}

    @staticmethod
    def from_json(d: dict[str, Any]) -> TileOp:
        return TileOp(d["op"], tuple(d["operands"]), tuple(sorted(d["attrs"].items())), d["space"])

    @property
    def op_kind(self) -> O.OpKind | None:
        """The registry kind of ``op``; None for a fused pattern (``affine``, ``exp_affine``)."""
        known = O.REGISTRY.get(self.op)
        return known.kind if known is not None else None

    @property
    def names(self) -> tuple[str, ...]:
        if self.op_kind is O.OpKind.CONTRACTION:
            return ("A", "B")
        if self.op in ("affine", "exp_affine"):
            return ("x", "a", "b")
        return ("x", "y")[: len(self.operands)]


def tile_ops() -> tuple[TileOp, ...]:
    """Every tile-level op the NKI backend lowers, in a fixed order."""
    out = [TileOp(op, ("tile",), attrs) for op, attrs in UNARY_OPS]
    out += [TileOp(op, form) for op in BINARY_OPS for form in BINARY_FORMS]
    out += [TileOp("affine", ("tile", *form)) for form in AFFINE_FORMS]
    out.append(TileOp("exp_affine", ("tile", "scalar", "row")))
    out += [TileOp(op, ("tile",)) for op in REDUCTIONS]
    out += [TileOp("transpose", ("tile",), (), space) for space in ("sbuf", "hbm")]
    out += [TileOp("matmul", ("tile", "tile"), (("a_layout", layout),), space)
            for layout in ("mk", "km") for space in ("sbuf", "hbm")]
    return tuple(out)


@dataclass(frozen=True)
class TileSpec:
    """A tile op's meaning: the registry Program over symbolic dims, the tiles it reads (name ->
    shape and memory) and its scalars (symbolic: any value)."""

    program: Program
    inputs: dict[str, TileType]
    symbols: tuple[ScalarSymbol, ...]


def _dims(shape: Sequence[str | int]) -> tuple[Ix, ...]:
    return tuple(Ix(d) if isinstance(d, int) else Ix.of(d) for d in shape)


@cache
def tile_spec(op: TileOp) -> TileSpec:
    b = Builder(op.key)
    inputs: dict[str, TileType] = {}
    symbols: list[ScalarSymbol] = []

    def operand(name: str, kind: str, shape: tuple[str | int, ...] | None = None) -> Value:
        if kind == "scalar":
            symbols.append(ScalarSymbol(name))
            return b.input(name, (), "fp32")
        shape = shape or (("P", "F") if kind == "tile" else ("P", 1))
        inputs[name] = TileType(_dims(shape), op.space)
        return b.input(name, shape, "fp32")

    if op.op_kind is O.OpKind.CONTRACTION:
        transposed = dict(op.attrs)["a_layout"] == "km"
        a = operand("A", "tile", ("K", "M") if transposed else ("M", "K"))
        bb = operand("B", "tile", ("K", "N"))
        out = b.emit("matmul", b.emit("transpose", a, perm=(1, 0)) if transposed else a, bb)
        return TileSpec(b.build(out), inputs, tuple(symbols))
    values = [operand(n, k) for n, k in zip(op.names, op.operands)]
    if op.op in ("affine", "exp_affine"):
        out = b.emit("add", b.emit("mul", values[0], values[1]), values[2])
        out = b.emit("exp", out) if op.op == "exp_affine" else out
    elif op.op in REDUCTIONS:
        out = b.emit(op.op, values[0], axes=(1,), keepdims=True)
    elif op.op == "transpose":
        out = b.emit("transpose", values[0], perm=(1, 0))
    else:
        out = b.emit(op.op, *values, **dict(op.attrs))
    return TileSpec(b.build(out), inputs, tuple(symbols))


@dataclass(frozen=True)
class Sketch:
    family: str
    holes: tuple[tuple[str, Any], ...]
    sequence: tuple[Instr, ...]

    @property
    def text(self) -> str:
        return "; ".join(str(i) for i in self.sequence)


class _Builder:
    """Builds one sequence, tracking each tile's memory and shape so that loads and PSUM -> SBUF copies
    an engine needs are inserted where it reads (they are forced, not holes)."""

    def __init__(self, inputs: dict[str, TileType]):
        self.spaces = {n: t.space for n, t in inputs.items()}
        self.shapes = {n: t.shape for n, t in inputs.items()}
        self.instrs: list[Instr] = []

    def emit(self, name: str, shape: tuple[Ix, ...], /, dst: str | None = None, **args: Any) -> str:
        dst = dst or f"t{len(self.instrs)}"
        space = args.pop("space", None)
        ins = Instr.of(name, dst, space=space, **args)
        self.instrs.append(ins)
        self.spaces[dst], self.shapes[dst] = default_space(ins), shape
        return dst

    def sbuf(self, name: str) -> str:
        """``name`` in SBUF: loaded from HBM, copied out of PSUM, or as it is."""
        if self.spaces[name] == "hbm":
            return self.emit("load", self.shapes[name], src=name)
        if self.spaces[name] == "psum":
            return self.emit("tensor_copy", self.shapes[name], src=name)
        return name

    def transpose(self, name: str, how: str) -> str:
        shape = tuple(reversed(self.shapes[name]))
        if how == "dma_transpose":
            return self.emit("dma_transpose", shape, src=name)
        engine = how.split(":")[1]
        src = self.sbuf(name) if engine == "tensor" or self.spaces[name] == "hbm" else name
        return self.emit("nc_transpose", shape, data=src, engine=engine)

    def finish(self, result: str, evacuate: str | None) -> tuple[Instr, ...]:
        """The sequence with its result in tile ``out``: copied out of PSUM (``evacuate``) or renamed."""
        if self.spaces[result] == "psum" or evacuate is not None:
            if evacuate == "activation":
                self.emit("activation", self.shapes[result], dst="out", op="copy", data=result)
            else:
                self.emit("tensor_copy", self.shapes[result], dst="out", src=result)
            return tuple(self.instrs)
        return tuple(_rename(ins, result, "out") for ins in self.instrs)


def _rename(ins: Instr, old: str, new: str) -> Instr:
    args = {k: (new if v == old else v) for k, v in ins.args}
    return Instr.of(ins.op, new if ins.dst == old else ins.dst, space=ins.space, **args)


def _names(v: Any) -> set[str]:
    """Tiles and scalars an argument value mentions."""
    if isinstance(v, str):
        return {v}
    if isinstance(v, tuple) and v and v[0] == "scalar":
        return {v[1]}
    if isinstance(v, tuple) and v and v[0] in ("neg", "recip", "mul"):
        return set().union(*(_names(x) for x in v[1:]))
    return set()


def _reads(seq: Sequence[Instr]) -> set[str]:
    return set().union(*(_names(v) for ins in seq for k, v in ins.args if k not in ("op", "op0", "op1", "engine")))


def uses_every_operand(op: TileOp, seq: Sequence[Instr]) -> bool:
    """Every tile op here depends on each of its operands, so a sequence that ignores one is pruned
    without a proof."""
    return set(op.names) <= _reads(seq)


def sketches(op: TileOp) -> Iterator[Sketch]:
    """Every candidate sequence for ``op``, in a fixed order."""
    if op.op_kind is O.OpKind.CONTRACTION:
        yield from _matmul(op)
    elif op.op == "transpose":
        yield from _transpose(op)
    elif op.op in REDUCTIONS:
        yield from _reduction(op)
    else:
        yield from _elementwise(op)


def _elementwise(op: TileOp) -> Iterator[Sketch]:
    kinds = dict(zip(op.names, op.operands))
    tiles = [n for n, k in kinds.items() if k == "tile"]
    rows = [n for n, k in kinds.items() if k == "row"]
    scalars = [("scalar", n) for n, k in kinds.items() if k == "scalar"]
    derived = [e for s in scalars for e in (s, ("neg", s), ("recip", s))]
    pool = rows + derived + list(CONSTANTS)
    if op.operands == ("tile",):
        functions = list(ACTIVATIONS)  # unary: the function hole ranges over every activation function
    else:
        functions = ["copy"] + (["exp"] if op.op == "exp_affine" else [])

    def one(name: str, **args: Any) -> tuple[Instr, ...]:
        return (Instr.of(name, "out", **args),)

    for f, data, scale, bias in itertools.product(functions, tiles, [None, *rows, *derived], [None, *rows]):
        yield Sketch("activation", (("op", f), ("scale", scale), ("bias", bias)),
                     one("activation", op=f, data=data, scale=scale, bias=bias))
    for alu, (d1, d2) in itertools.product(ALU, itertools.product(tiles, repeat=2)):
        yield Sketch("tensor_tensor", (("op", alu), ("order", (d1, d2))), one("tensor_tensor", data1=d1, data2=d2, op=alu))
    for data, alu, operand, rev in itertools.product(tiles, ALU, pool, (False, True)):
        yield Sketch("tensor_scalar", (("op0", alu), ("operand0", operand), ("reverse0", rev)),
                     one("tensor_scalar", data=data, op0=alu, operand0=operand, reverse0=rev))
    plain = rows + scalars
    if len(plain) < 2:
        return
    slots = list(itertools.product(ARITH, plain, (False, True)))
    for (o0, u0, r0), (o1, u1, r1) in itertools.product(slots, repeat=2):
        yield Sketch("tensor_scalar2", (("op0", o0), ("operand0", u0), ("reverse0", r0), ("op1", o1), ("operand1", u1),
                                        ("reverse1", r1)),
                     one("tensor_scalar", data=tiles[0], op0=o0, operand0=u0, reverse0=r0, op1=o1, operand1=u1,
                         reverse1=r1))
    steps: list[tuple[str, dict[str, Any]]] = [("tensor_scalar", {"op0": o, "operand0": u, "reverse0": r})
                                               for o, u, r in slots]
    steps += [("activation", {"op": f, "scale": s, "bias": b})
              for f, s, b in itertools.product(functions, [None, *plain], [None, *rows])]
    for (n0, a0), (n1, a1) in itertools.product(steps, repeat=2):
        first = Instr.of(n0, "t0", data=tiles[0], **a0)
        second = Instr.of(n1, "out", data="t0", **a1)
        yield Sketch("chain", (("first", str(first)), ("second", str(second))), (first, second))


def _reduction(op: TileOp) -> Iterator[Sketch]:
    mean_scales = (("recip", ("dim", "F")), ("dim", "F"))
    for red, keep in itertools.product(REDUCE_OPS, (True, False)):
        yield Sketch("tensor_reduce", (("op", red), ("keepdims", keep)),
                     (Instr.of("tensor_reduce", "out", op=red, data="x", axis=1, keepdims=keep),))
    for scale, red in itertools.product((None, *mean_scales), REDUCE_OPS):
        yield Sketch("activation_reduce", (("scale", scale), ("reduce_op", red)),
                     (Instr.of("activation", "t0", op="copy", data="x", scale=scale, reduce_op=red, reduce_res="out",
                               reduce_cmd="reset_reduce"),))
    posts: list[tuple[str, dict[str, Any]]] = [("tensor_scalar", {"op0": o, "operand0": s})
                                               for o, s in itertools.product(("multiply", "divide"), mean_scales)]
    posts += [("activation", {"op": "copy", "scale": s}) for s in mean_scales]
    for red, (name, args) in itertools.product(REDUCE_OPS, posts):
        seq = (Instr.of("tensor_reduce", "t0", op=red, data="x", axis=1, keepdims=True), Instr.of(name, "out", data="t0", **args))
        yield Sketch("reduce_then_scale", (("op", red), ("post", str(seq[1]))), seq)


def _transpose(op: TileOp) -> Iterator[Sketch]:
    for load, route in itertools.product((False, True), TRANSPOSE_ROUTES):
        yield _transpose_sketch(op, load, route, EVACUATE[0])


def _transpose_sketch(op: TileOp, load: bool, route: str, evacuate: str) -> Sketch:
    b = _Builder(tile_spec(op).inputs)
    src = b.emit("load", b.shapes["x"], src="x") if load else "x"
    if route in ("tensor_copy", "dma_copy"):
        result = b.emit(route, b.shapes[src], src=src)
    elif route == "dma_transpose":
        result = b.emit("dma_transpose", tuple(reversed(b.shapes[src])), src=src)
    else:
        result = b.emit("nc_transpose", tuple(reversed(b.shapes[src])), data=src, engine=route.split(":")[1])
    evacuate_hole = evacuate if b.spaces[result] == "psum" else None
    holes = (("load", load), ("route", route), ("evacuate", evacuate_hole))
    return Sketch("transpose", holes, b.finish(result, evacuate_hole))


def _matmul(op: TileOp) -> Iterator[Sketch]:
    outs = ("as_is", "nc_transpose:tensor", "nc_transpose:vector")
    for stationary, prep_a, prep_b, out in itertools.product(("A", "B"), MATMUL_PREP, MATMUL_PREP, outs):
        yield _matmul_sketch(op, stationary, prep_a, prep_b, out, ACCUMULATE[0], EVACUATE[0])


def _matmul_sketch(op: TileOp, stationary: str, prep_a: str, prep_b: str, out: str, acc: str, evacuate: str) -> Sketch:
    b = _Builder(tile_spec(op).inputs)
    a = b.sbuf("A" if prep_a == "as_is" else b.transpose("A", prep_a))  # TensorE reads SBUF only
    bb = b.sbuf("B" if prep_b == "as_is" else b.transpose("B", prep_b))
    stat, mov = (a, bb) if stationary == "A" else (bb, a)
    shape = (b.shapes[stat][-1], b.shapes[mov][-1])
    if acc == "zeroed":
        b.emit("memset", shape, dst="acc", space="psum", shape=tuple(_text(d) for d in shape), value=("imm", 0.0))
    product = b.emit("nc_matmul", shape, dst="acc", stationary=stat, moving=mov, accumulate=acc != "overwrite")
    result = product if out == "as_is" else b.transpose(product, out)
    evacuate_hole = evacuate if b.spaces[result] == "psum" else None
    holes = (("stationary", stationary), ("prep_A", prep_a), ("prep_B", prep_b), ("out", out), ("accumulate", acc),
             ("evacuate", evacuate_hole))
    return Sketch("matmul", holes, b.finish(result, evacuate_hole))


def refinements(op: TileOp, sketch: Sketch) -> Iterator[Sketch]:
    """The secondary holes of a proven sketch, filled every other way: how the PSUM accumulator starts
    (overwrite, zeroed by memset then accumulate, or accumulate into nothing) and how a PSUM result
    reaches SBUF. They never change the shapes, so they are filled only for sketches that are proven."""
    holes = dict(sketch.holes)
    if sketch.family == "transpose" and holes["evacuate"] is not None:
        for evacuate in EVACUATE[1:]:
            yield _transpose_sketch(op, holes["load"], holes["route"], evacuate)
    if sketch.family == "matmul":
        core = (holes["stationary"], holes["prep_A"], holes["prep_B"], holes["out"])
        for acc, evacuate in itertools.product(ACCUMULATE, EVACUATE if holes["evacuate"] is not None else EVACUATE[:1]):
            if (acc, evacuate) != (ACCUMULATE[0], EVACUATE[0]):
                yield _matmul_sketch(op, *core, acc, evacuate)


def engine_choices(sequence: Sequence[Instr]) -> Iterator[tuple[str | None, ...]]:
    """Every other engine assignment for the instructions that may run on several (None: as given).
    An engine changes where an instruction runs and which memories it may touch, never what it
    computes, so this hole is filled only for sequences whose value is proven."""
    choices = []
    for ins in sequence:
        d = DECLARATIONS[ins.op]
        engines = () if d.engine_required else d.engines  # nc_transpose: a sketch hole
        choices.append([None, *engines[1:]] if len(engines) > 1 and ins.arg("engine") is None else [None])
    for picks in itertools.product(*choices):
        if any(p is not None for p in picks):
            yield picks


def with_engines(sequence: Sequence[Instr], picks: Sequence[str | None]) -> tuple[Instr, ...]:
    return tuple(ins if p is None else ins.replace(engine=p) for p, ins in zip(picks, sequence))


def describe(sketch: Sketch) -> str:
    """A sketch by its family and hole values (what the generator filled in)."""
    holes = ",".join(f"{k}={format_operand(to_tuple(v))}" for k, v in sketch.holes)
    return f"{sketch.family}[{holes}]"


def to_tuple(v: Any) -> Any:
    return tuple(to_tuple(x) for x in v) if isinstance(v, (list, tuple)) else v


def _text(d: Ix) -> str | int:
    return d.const if d.is_const else repr(d)
