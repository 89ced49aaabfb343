"""NKI (Trainium) instructions as normal-form terms over symbolic tiles: types, sequences, the machine.

A tile is ``[partition, free...]`` and lives in one memory (``hbm``, ``sbuf`` or ``psum``). Input
tiles are uninterpreted functions of their indices (the same ``("in", name, idx)`` atoms the registry
ops use), sizes are symbolic, and each instruction adds, besides its value, the facts it needs to
run: its hardware limits as ``(size expression, hardware-description key)`` side conditions (the
partition dim of every on-chip tile <= ``limits.partition_max``, the matmul contraction dim <=
``limits.matmul.contraction_max``, ...), the target features it needs (``dma_transpose``) and dtype
conditions. ``nc_matmul`` is a sum over the partition (contraction) index; the activation functions
are the registry's element-wise functions (``ops.UNARY``), so ``activation(op="exp")`` means exactly
the registry's ``exp``. A sequence that cannot run (a tile read before it is written, shapes that
disagree, an operand in a memory its engine cannot read, an attribute outside its domain) raises
:class:`IllFormed`; shape disagreements carry sizes at which they show. What an instruction takes
(arguments, engines, memories, attribute values, limit keys, features) is its declaration
(:mod:`.declarations`); its meaning is its handler in :mod:`.vocabulary`, registered into ``MEANINGS``.

Operands: a tile is named by a string; an immediate (a compile-time number) is a tuple
``("imm", 1.0)``, ``("scalar", "c")`` (a scalar of the tile op), ``("dim", "F")`` (a size used as a
number), ``("neg", e)``, ``("recip", e)`` or ``("mul", e1, e2)``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from axon_eg.errors import AxonError

from .. import nf
from ..nf import Ix, Poly
from ..op_semantics import BINARY, UNARY
from .declarations import (
    ACTIVATION_REDUCE_OPS,
    ANY_FUNCTION,
    DECLARATIONS,
    ENGINE_READS,
    ENGINE_WRITES,
    FREE_MAX,
    ON_CHIP,
    PARTITION_MAX,
    SPACES,
    Declaration,
)

__all__ = ["ACTIVATIONS", "ACTIVATION_REDUCE_OPS", "ALU", "ANY_FUNCTION", "MEANINGS", "ON_CHIP", "REDUCE_OPS", "SPACES",
           "IllFormed", "Instr", "Machine", "TileType", "meaning"]

Index = tuple[Ix, ...]
Value = Callable[[Index], Poly]

# The declared ALU ops of tensor_tensor / tensor_scalar -> the registry's binary op of the same meaning
ALU: dict[str, str] = {"add": "add", "subtract": "sub", "multiply": "mul", "divide": "div",
                       "maximum": "maximum", "minimum": "minimum"}
REDUCE_OPS: dict[str, str] = {"add": "sum", "maximum": "max", "minimum": "min"}  # -> registry reduction

ACTIVATIONS: dict[str, Callable[[Poly], Poly]] = {  # the declared activation functions -> registry functions
    "copy": lambda x: x,
    "exp": UNARY["exp"], "log": UNARY["log"], "sqrt": UNARY["sqrt"], "rsqrt": UNARY["rsqrt"],
    "reciprocal": UNARY["reciprocal"], "tanh": UNARY["tanh"], "sigmoid": UNARY["sigmoid"], "silu": UNARY["silu"],
    "gelu": lambda x: UNARY["gelu"](x, "none"), "gelu_apprx_tanh": lambda x: UNARY["gelu"](x, "tanh"),
    "relu": UNARY["relu"], "square": UNARY["square"], "abs": UNARY["abs"], "erf": UNARY["erf"],
    "softplus": UNARY["softplus"],
}
IMMEDIATE_TAGS = ("imm", "scalar", "dim", "neg", "recip", "mul")


class IllFormed(AxonError):
    """An instruction sequence that cannot run. ``dims`` (for shapes that disagree) are sizes at which
    the disagreement shows; ``illegal`` marks a placement or attribute the hardware does not allow."""

    def __init__(self, message: str, dims: Mapping[str, int] | None = None, *, illegal: bool = False):
        super().__init__(message)
        self.dims = dict(dims) if dims is not None else None
        self.illegal = illegal


@dataclass(frozen=True)
class TileType:
    shape: tuple[Ix, ...]
    space: str

    @property
    def partition(self) -> Ix:
        return self.shape[0]


def _freeze(v: Any) -> Any:
    return tuple(_freeze(x) for x in v) if isinstance(v, (list, tuple)) else v


def _thaw(v: Any) -> Any:
    return [_thaw(x) for x in v] if isinstance(v, tuple) else v


@dataclass(frozen=True)
class Instr:
    """One instruction of a sequence: ``dst = op(**args)``; ``space`` is dst's memory when it is not
    the instruction's default."""

    op: str
    dst: str
    args: tuple[tuple[str, Any], ...] = ()
    space: str | None = None

    @staticmethod
    def of(name: str, dst: str, /, *, space: str | None = None, **args: Any) -> Instr:
        return Instr(name, dst, tuple(sorted((k, _freeze(v)) for k, v in args.items() if v is not None)), space)

    def arg(self, key: str, default: Any = None) -> Any:
        for k, v in self.args:
            if k == key:
                return v
        return default

    def replace(self, **changes: Any) -> Instr:
        args = dict(self.args)
        dst = changes.pop("dst", self.dst)
        args.update(changes)
        return Instr.of(self.op, dst, space=self.space, **args)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"op": self.op, "dst": self.dst, "args": {k: _thaw(v) for k, v in self.args}}
        if self.space is not None:
            out["space"] = self.space
        return out

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Instr:
        return Instr.of(d["op"], d["dst"], space=d.get("space"), **{k: _freeze(v) for k, v in d["args"].items()})

    def __str__(self) -> str:
        args = ", ".join(f"{k}={format_operand(v)}" for k, v in self.args)
        return f"{self.dst}{'@' + self.space if self.space else ''} = {self.op}({args})"


def format_operand(v: Any) -> str:
    if isinstance(v, tuple) and v and v[0] in IMMEDIATE_TAGS:
        if v[0] in ("imm", "scalar", "dim"):
            return str(v[1]) if v[0] != "dim" else f"#{v[1]}"
        return f"{v[0]}({', '.join(format_operand(x) for x in v[1:])})"
    if isinstance(v, tuple):
        return "(" + ", ".join(map(format_operand, v)) + ")"
    return str(v)


def is_immediate(v: Any) -> bool:
    return isinstance(v, tuple) and bool(v) and v[0] in IMMEDIATE_TAGS


def parse_dim(text: str | int) -> Ix:
    if isinstance(text, int) or str(text).lstrip("-").isdigit():
        return Ix(int(text))
    return Ix.of(str(text))


def immediate(e: Any, scalars: frozenset[str]) -> Poly:
    """The value of a compile-time operand expression."""
    tag = e[0]
    if tag == "imm":
        return Poly.const(Fraction(e[1]))
    if tag == "scalar":
        if e[1] not in scalars:
            raise IllFormed(f"unknown scalar {e[1]!r}", illegal=True)
        return Poly.atom(("sym", e[1]))
    if tag == "dim":
        d = parse_dim(e[1])
        return Poly.const(d.const) if d.is_const else Poly.atom(("dim", d))
    if tag == "neg":
        return -immediate(e[1], scalars)
    if tag == "recip":
        return nf.recip(immediate(e[1], scalars))
    if tag == "mul":
        return immediate(e[1], scalars) * immediate(e[2], scalars)
    raise IllFormed(f"unknown immediate {e!r}", illegal=True)


def distinguishing_dims(a: Ix, b: Ix) -> dict[str, int] | None:
    """Sizes (each >= 1) at which two size expressions differ, if small ones exist."""
    names = sorted(a.symbols() | b.symbols())
    for values in itertools.product(range(1, 6), repeat=len(names)):
        env = {n: Ix(v) for n, v in zip(names, values)}
        x, y = a.subst(env), b.subst(env)
        if x.is_const and y.is_const and x.const != y.const:
            return dict(zip(names, values))
    return None


Handler = Callable[["Machine", Instr], None]
MEANINGS: dict[str, Handler] = {}  # instruction name -> its meaning; filled by .vocabulary, one per declaration


def meaning(*names: str) -> Callable[[Handler], Handler]:
    """Register ``handler`` as the meaning of the declared instructions ``names``."""
    def register(handler: Handler) -> Handler:
        for name in names:
            if name not in DECLARATIONS or name in MEANINGS:
                raise ValueError(f"{name}: {'not a declared instruction' if name not in DECLARATIONS else 'two meanings'}")
            MEANINGS[name] = handler
        return handler

    return register


class Machine:
    """Runs a sequence symbolically: tile types, values (normal forms at any index) and conditions."""

    def __init__(self, inputs: Mapping[str, TileType], scalars: Iterable[str] = ()):
        self.inputs = dict(inputs)
        self.types: dict[str, TileType] = dict(inputs)
        self.scalars = frozenset(scalars)
        self._fns: dict[str, Value] = {name: _input(name) for name in inputs}
        self.limits: set[tuple[Ix, str]] = set()
        self.features: set[str] = set()
        self.dtype_bytes: set[tuple[str, int]] = set()
        self.engines: list[str] = []
        self.engine = ""  # of the instruction being run

    def run(self, sequence: Sequence[Instr]) -> Machine:
        for ins in sequence:
            self.step(ins)
        return self

    def step(self, ins: Instr) -> None:
        d = DECLARATIONS.get(ins.op)
        if d is None or ins.op not in MEANINGS:
            raise IllFormed(f"unknown instruction {ins.op!r}", illegal=True)
        required, optional = d.proof_arguments()
        given = {k for k, _ in ins.args}
        unknown = sorted(given - set(required) - set(optional))
        if unknown:
            raise IllFormed(f"{ins.op}: unknown argument {unknown[0]!r}", illegal=True)
        missing = [k for k in required if k not in given]
        if missing:
            raise IllFormed(f"{ins.op}: missing argument {missing[0]!r}", illegal=True)
        self.engine = str(ins.arg("engine", d.engines[0]))
        if self.engine not in d.engines:
            raise IllFormed(f"{ins.op} runs on {' or '.join(d.engines)}, not {self.engine}", illegal=True)
        MEANINGS[ins.op](self, ins)
        self.features.update(d.features)
        self.dtype_bytes.update((str(ins.arg(key)), n) for key, n in d.dtype_bytes.items())
        self.engines.append(self.engine)

    def value(self, name: str, idx: Index) -> Poly:
        return self.function(name)(idx)

    def function(self, name: str) -> Value:
        """The value of tile ``name`` as last written (a function of the index)."""
        if name not in self._fns:
            raise IllFormed(f"tile {name!r} is never written")
        return self._fns[name]

    # -- helpers the handlers share ------------------------------------------------------------------
    def read(self, ins: Instr, key: str) -> tuple[TileType, Value]:
        """The tile operand ``key``: its type and value; it must be in a memory the declaration and the
        engine allow."""
        name = ins.arg(key)
        if not isinstance(name, str):
            raise IllFormed(f"{ins.op}: {key} must be a tile, got {format_operand(name)}", illegal=True)
        if name not in self.types:
            raise IllFormed(f"{ins.op}: reads tile {name!r} before it is written", illegal=True)
        t = self.types[name]
        spaces = [s for s in self._decl(ins).tiles[key].spaces if s in ENGINE_READS[self.engine]]
        if t.space not in spaces:
            raise IllFormed(f"{ins.op} on {self.engine}: {key} {name!r} is in {t.space}; it reads only "
                            f"{'/'.join(spaces) or 'nothing there'}", illegal=True)
        return t, self._fns[name]

    def write(self, ins: Instr, name: str, shape: tuple[Ix, ...], fn: Value, key: str = "dst") -> TileType:
        """Write tile ``name`` (the written operand ``key``): in ``ins.space`` for ``dst`` when given, else
        in the first memory the declaration and the engine allow."""
        spaces = [s for s in self._decl(ins).tiles[key].spaces if s in ENGINE_WRITES[self.engine]]
        space = (ins.space if key == "dst" else None) or (spaces[0] if spaces else "sbuf")
        if space not in spaces:
            raise IllFormed(f"{ins.op}: cannot write {name!r} to {space} (only {'/'.join(spaces)})", illegal=True)
        t = TileType(tuple(shape), space)
        if space in ON_CHIP:
            self.limit(t.partition, PARTITION_MAX)
        self.types[name] = t
        self._fns[name] = _memo(fn)
        return t

    def attr(self, ins: Instr, key: str) -> Any:
        """Attribute ``key`` (its declared default when not given), refused unless a declared value."""
        a = self._decl(ins).attrs[key]
        v = ins.arg(key, None if a.required else a.default)
        allowed = a.allowed(proof=True)
        if allowed is not None and v != a.default and v not in allowed:
            raise IllFormed(f"{ins.op}: {key} {a.why}, got {v!r}" if a.why else
                            f"{ins.op}: {key}={v!r} is not one of {sorted(allowed)}", illegal=True)
        return v

    def bound(self, ins: Instr, expr: Ix, what: str) -> None:
        """``expr`` <= the instruction's declared limit ``what`` (a hardware-file key)."""
        self.limit(expr, self._decl(ins).limit(what))

    def _decl(self, ins: Instr) -> Declaration:
        return DECLARATIONS[ins.op]

    def limit(self, expr: Ix, key: str) -> None:
        if not expr.is_const:
            self.limits.add((expr, key))

    def free_limit(self, t: TileType) -> None:
        if t.space in FREE_MAX:
            self.limit(_product(t.shape[1:]), FREE_MAX[t.space])

    def same(self, a: Ix, b: Ix, what: str) -> None:
        if a != b:
            raise IllFormed(f"{what}: {a!r} vs {b!r}", distinguishing_dims(a, b) or {})

    def per_partition(self, ins: Instr, key: str, partition: Ix) -> Value | None:
        """A scalar operand: an immediate, or a [P, 1] tile broadcast along the free axes."""
        v = ins.arg(key)
        if v is None:
            return None
        if is_immediate(v):
            c = immediate(v, self.scalars)
            return lambda idx: c
        t, fn = self.read(ins, key)
        self.same(t.partition, partition, f"{ins.op}: {key} partitions")
        if len(t.shape) != 2 or t.shape[1] != Ix(1):
            raise IllFormed(f"{ins.op}: {key} must be a [P, 1] tile", {})
        return lambda idx: fn((idx[0], Ix(0)))

    def alu(self, ins: Instr, key: str) -> Callable[[Poly, Poly], Poly]:
        return BINARY[ALU[self.attr(ins, key)]]


def _input(name: str) -> Value:
    return lambda idx: Poly.atom(("in", name, tuple(idx)))


def _memo(fn: Value) -> Value:
    cache: dict[Index, Poly] = {}

    def at(idx: Index) -> Poly:
        if idx not in cache:
            cache[idx] = fn(idx)
        return cache[idx]

    return at


def _product(dims: Sequence[Ix]) -> Ix:
    out = Ix(1)
    for d in dims:
        out = out * d
    return out
