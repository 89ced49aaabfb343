"""The NKI instructions as the simulator runs them: each declared instruction with its NumPy implementation.

Every instruction is declared once, in ``axon_eg.semantics.isa.declarations`` (engines, operands and the
memory spaces each may live in, attributes and their allowed values, limit keys into the hardware file,
features, latency model), and that declaration is what the simulator (:mod:`.simulator`), the proofs
(``semantics.isa.Machine``) and the cost model read; no other module keeps a list of instructions. An
:class:`Instruction` here is a declaration seen from a kernel -- its reads, writes and attributes with
defaults -- plus its NumPy semantics and own checks (:mod:`.isa_numpy`) and its latency
(:mod:`.latency`). :func:`check` applies what every declared instruction shares (engine, memories,
partition and free-size limits, features, element sizes, attribute values) and then the instruction's
own rule. Every limit is read from the hardware file (``hw.load("trn2").value("limits.matmul.moving_free_max")``),
and a violation raises :class:`NkiLimitError` naming the instruction, the operand, the limit and the
value, e.g. ``nc_matmul: moving free size 1024 > 512 (limits.matmul.moving_free_max on trn2)``.

Tiles are ``[partition, free...]``: axis 0 is the partition axis (<= ``limits.partition_max``), the free
size is the product of the other axes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from axon_eg.errors import UnknownOperation
from axon_eg.hw import HardwareSpec
from axon_eg.semantics.isa import declarations as D
from axon_eg.semantics.isa.declarations import (  # noqa: F401 - the engine and memory names, re-exported
    DECLARATIONS,
    DMA,
    ELEMENTWISE_ENGINES,
    ENGINE_RULE,
    ENGINES,
    FREE_MAX,
    GPSIMD,
    HBM,
    KERNEL,
    ON_CHIP,
    PARTITION_MAX,
    PSUM,
    REDUCE_CMDS,
    REQUIRED,
    SBUF,
    SCALAR,
    TENSOR,
    VECTOR,
    Attr,
    Declaration,
)

from . import latency as _latency
from .isa_numpy import ACTIVATIONS, ALU_OPS, IMPLEMENTATIONS, REDUCE_OPS, Semantics, reduce_axes  # noqa: F401
from .nki_checks import (  # noqa: F401 - re-exported: what kernels, the simulator and the emitter use
    BFLOAT16,
    DTYPES,
    FLOAT_DTYPES,
    NkiLimitError,
    NkiSimulationError,
    NkiUninitializedError,
    Operand,
    Rules,
    as_dtype,
    dtype_name,
)

ENGINE_READS = {e: frozenset(v) for e, v in D.ENGINE_READS.items()}
ENGINE_WRITES = {e: frozenset(v) for e, v in D.ENGINE_WRITES.items()}
SCALAR_OPERANDS = frozenset(n for d in DECLARATIONS.values() for n, t in d.tiles.items() if t.scalar)

_ALIASES = {"sum": "add", "max": "maximum", "amax": "maximum", "min": "minimum", "amin": "minimum",
            "sub": "subtract", "mul": "multiply", "mult": "multiply", "div": "divide", "true_divide": "divide",
            "identity": "copy", "absolute": "abs"}


def op_name(op: Any, vocabulary: Mapping[str, Any], instruction: str, what: str = "op") -> str:
    """The vocabulary name of an op given as an NKI token (``nl.add``), a NumPy function or a string."""
    name = getattr(op, "nki_op", None) or (op if isinstance(op, str) else getattr(op, "__name__", None))
    name = _ALIASES.get(name, name)
    if name not in vocabulary:
        raise NotImplementedError(f"{instruction}: {what} {op!r} is not supported by the simulator; "
                                  f"supported: {', '.join(sorted(vocabulary))}")
    return name


# -------------------------------------------------------------------------------------- instructions
@dataclass(frozen=True)
class Instruction:
    """One declared NKI instruction as a kernel calls it. ``reads``/``writes``: tensor operand -> memory
    spaces it may live in (the engine's own rules narrow them further); an operand that may also be a
    scalar (``bias``, ``scale``, ``operand0``) is passed in ``attrs`` when scalar. ``engines``: the first is
    the default. ``attributes``: name -> default (``REQUIRED`` when the call must give it)."""

    name: str
    engines: tuple[str, ...]
    reads: Mapping[str, frozenset[str]]
    writes: Mapping[str, frozenset[str]]
    attributes: Mapping[str, Any]
    semantics: Semantics
    rule: Callable[[Rules], None]
    cycles: Callable[[Rules], float]  # engine cycles (DMA: seconds, see latency())
    doc: str
    api: str  # the NKI call it corresponds to
    declaration: Declaration

    @staticmethod
    def of(d: Declaration) -> Instruction:
        impl = IMPLEMENTATIONS[d.name]
        return Instruction(
            d.name, d.engines, {n: frozenset(t.spaces) for n, t in d.reads(KERNEL).items()},
            {n: frozenset(t.spaces) for n, t in d.writes(KERNEL).items()},
            {p.name: p.default for p in d.arguments(KERNEL) if isinstance(p, Attr) or p.scalar},
            impl.semantics, impl.rule, lambda r: _latency.cycles(d.latency[r.engine], r.ops, r.spec), d.doc, d.api, d)


INSTRUCTIONS: dict[str, Instruction] = {name: Instruction.of(d) for name, d in DECLARATIONS.items()}


def get(name: str) -> Instruction:
    if name not in INSTRUCTIONS:
        raise UnknownOperation(f"unknown NKI instruction {name!r}; known: {', '.join(INSTRUCTIONS)}")
    return INSTRUCTIONS[name]


def default_engine(name: str, ops: Mapping[str, Operand]) -> str:
    """The engine a call that names none runs on: the first declared one, or, where the proofs must name it
    (``nc_transpose``), the first whose memories the operands are in (else the last)."""
    instr = get(name)
    if not instr.declaration.engine_required:
        return instr.engines[0]
    for engine in instr.engines:
        if all(op.space in (ENGINE_READS if k in instr.reads else ENGINE_WRITES)[engine] for k, op in ops.items()):
            return engine
    return instr.engines[-1]


def check(name: str, ops: Mapping[str, Operand], attrs: Mapping[str, Any], spec: HardwareSpec, engine: str) -> Rules:
    """Raise NkiLimitError (or ShapeError) unless ``name`` may run on ``engine`` with these operands."""
    instr = get(name)
    d = instr.declaration
    r = Rules(name, ops, attrs, spec, engine)
    r.rule(engine in instr.engines, "", "engine", engine, "{" + ", ".join(instr.engines) + "}", f"{name} runs on "
           f"{' or '.join(instr.engines)}", relation="not in")
    unknown = sorted(set(attrs) - set(instr.attributes))
    if unknown:
        raise NkiSimulationError(f"{name}: unknown attribute {unknown[0]!r}; declared: {', '.join(instr.attributes)}")
    for operand, op in ops.items():
        if operand in instr.reads:
            allowed, verb = instr.reads[operand] & ENGINE_READS[engine], "reads"
        elif operand in instr.writes:
            allowed, verb = instr.writes[operand] & ENGINE_WRITES[engine], "writes"
        else:
            raise NkiSimulationError(f"{name}: unknown operand {operand!r}")
        why = ENGINE_RULE.get(engine) or f"{name} {verb} {operand} in {'/'.join(sorted(allowed))}"
        r.rule(op.space in allowed, operand, "memory", op.space, "{" + ", ".join(sorted(allowed)) + "}", why, "not in")
        if op.space in ON_CHIP:
            r.at_most(operand, "partition size", op.partitions, PARTITION_MAX)
            if engine in ELEMENTWISE_ENGINES:
                r.at_most(operand, f"free size in {op.space.upper()}", op.free_size, FREE_MAX[op.space])
    for feature, where in d.features.items():
        if not spec.get(f"features.{feature}", False):
            raise NkiLimitError(name, "", True, False, key=f"features.{feature}", target=spec.name,
                                message=f"{name}: not available on {spec.name} (features.{feature} is false in "
                                        f"{spec.name}.yaml; {where})")
    for operand, nbytes in d.dtype_bytes.items():
        dt = ops[operand].dtype
        r.rule(dt.itemsize == nbytes, operand, "dtype", dtype_name(dt), f"a {nbytes}-byte dtype",
               f"{name} moves {nbytes}-byte elements only", relation="is not")
    instr.rule(r)
    for key, a in d.attrs.items():  # what the instruction's own rule left: a value outside the declared ones
        v = attrs.get(key, a.default)
        if a.side != D.PROOF and a.values is not None and v != a.default and v not in a.values:
            raise NkiSimulationError(f"{name}: {key}={v!r} is not one of {', '.join(map(repr, a.values))}")
    return r


def table() -> list[dict[str, Any]]:
    """The vocabulary as rows (name, NKI call, engines, operand memories, attributes, meaning)."""
    def spaces(m: Mapping[str, frozenset[str]]) -> str:
        return ", ".join(f"{k}:{'/'.join(sorted(v))}" for k, v in m.items())
    return [{"instruction": i.name, "api": i.api, "engines": "/".join(i.engines), "reads": spaces(i.reads),
             "writes": spaces(i.writes), "attributes": ", ".join(k if v is REQUIRED else f"{k}={v!r}"
                                                                  for k, v in i.attributes.items()), "doc": i.doc}
            for i in INSTRUCTIONS.values()]


def latency(rules: Rules) -> float:
    """Seconds one instruction keeps its engine busy: its declared latency model (:mod:`.latency`)."""
    return _latency.seconds(get(rules.instruction).declaration.latency[rules.engine], rules.engine, rules.ops,
                            rules.spec)
