"""THE Trainium (NKI) instructions, each declared once: what the simulator, the proofs and the cost model share.

A :class:`Declaration` names an instruction and gives the engines that may run it (the first is the
default), its parameters in NKI call order -- tile operands (:class:`Tile`: the memories each may live
in, read or written, whether a compile-time number may stand in for it, whether it is a per-partition
``[P, 1]`` vector) and attributes (:class:`Attr`: kind, allowed values, default) -- the hardware-file keys
of its own limits, the target features and element sizes it needs, and its latency model
(:class:`Latency`). What every instruction shares is declared per engine: which memories it reads and
writes, the partition limit of on-chip tiles, the free-size limit of the element-wise engines.

Readers, each with one implementation per declared name and nothing else:

* the simulator (``axon_eg.backends.nki.isa``): checks operands, engines, memories, limits, features and
  attribute values against the declaration and runs the NumPy implementation (``isa_numpy``);
* the Z3 semantics (:class:`.instructions.Machine`): validates arguments, engines, memories and attribute
  values against the declaration and runs the instruction's meaning (:data:`.instructions.MEANINGS`,
  registered by :mod:`.vocabulary`; :attr:`Declaration.meaning` is the hook);
* the cost model: the simulator's trace latencies and the Trainium engine timeline (``backends/nki/cost.py``)
  both evaluate the declared latency models (``axon_eg.extract.latency``; the trace through
  ``axon_eg.backends.nki.latency``, which reads the sizes off the operands).

``tests/backends/test_nki_declarations.py`` ties them: every declared instruction has a NumPy
implementation, a meaning and an NKI call of both dialects, nothing else does, and both the simulator
and the Machine accept every declared attribute value and refuse one outside the declared values.

A parameter's ``side`` says who takes it: ``BOTH``; ``KERNEL`` (an NKI call argument proofs do not
state: ``dma_transpose``'s ``axes``, ``iota``'s ``pattern``, the legacy ``iota`` expression); ``PROOF``
(the destination ``shape`` of ``memset``/``iota``: an allocation, which the simulator reads off ``dst``).
``proof_values`` are the values proofs state when they differ from a kernel's (``nc_matmul``'s
``accumulate``: a proof states False or True, a kernel may also pass None, "the first write overwrites";
an activation function may be ``any``, an uninterpreted function). This module is in ``semantics/isa``,
so the hash NKI proofs record (``axon_eg.proofs.isa_semantics_hash``) covers it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

HBM, SBUF, PSUM = "hbm", "sbuf", "psum"
SPACES = (HBM, SBUF, PSUM)
ON_CHIP = (SBUF, PSUM)
TENSOR, VECTOR, SCALAR, GPSIMD, DMA = "tensor", "vector", "scalar", "gpsimd", "dma"
ENGINES = (TENSOR, VECTOR, SCALAR, GPSIMD, DMA)
ELEMENTWISE_ENGINES = (VECTOR, SCALAR, GPSIMD)

# What each engine can read and write (AWS Neuron documentation, NKI): TensorE reads only SBUF and writes
# only PSUM, GpSimd cannot touch PSUM, the DMA engines move data between HBM and SBUF.
ENGINE_READS = {TENSOR: (SBUF,), VECTOR: ON_CHIP, SCALAR: ON_CHIP, GPSIMD: (SBUF,), DMA: (HBM, SBUF)}
ENGINE_WRITES = {TENSOR: (PSUM,), VECTOR: ON_CHIP, SCALAR: ON_CHIP, GPSIMD: (SBUF,), DMA: (SBUF, HBM)}
ENGINE_RULE = {TENSOR: "the tensor engine reads only SBUF and writes only PSUM",
               GPSIMD: "the gpsimd engine cannot access PSUM", DMA: "DMA moves data between HBM and SBUF"}

# Hardware-file keys (data/hw_costs/<target>.yaml) every instruction is checked against.
PARTITION_MAX = "limits.partition_max"  # the partition dim of every on-chip tile
FREE_MAX = {SBUF: "limits.vector.free_max_sbuf", PSUM: "limits.vector.free_max_psum"}  # element-wise engines

# Attribute vocabularies (NKI names; each reader maps them to its implementation).
# A vocabulary's PROVEN_* part has a meaning in proofs (semantics/isa/instructions); the rest only in the
# simulator's NumPy semantics, so kernels may use them while proofs and lowerings never do.
PROVEN_ALU_OPS = ("add", "subtract", "multiply", "divide", "maximum", "minimum")
ALU_OPS = (*PROVEN_ALU_OPS, "power", "fmod", "mod", "equal", "not_equal", "greater", "greater_equal", "less",
           "less_equal", "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
           "left_shift", "right_shift")
BITVEC_OPS = ("bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift")
ARITHMETIC_OPS = tuple(o for o in ALU_OPS if o not in BITVEC_OPS)  # the docs' "arithmetic operators": no bitvec ops
PROVEN_REDUCE_OPS = ("add", "maximum", "minimum")
REDUCE_OPS = (*PROVEN_REDUCE_OPS, "multiply")
PROVEN_ACTIVATION_FUNCTIONS = ("copy", "exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh", "sigmoid", "silu", "gelu",
                               "gelu_apprx_tanh", "relu", "square", "abs", "erf", "softplus")
ACTIVATION_FUNCTIONS = (*PROVEN_ACTIVATION_FUNCTIONS, "sin", "cos", "tan", "arctan", "ceil", "floor", "trunc", "sign",
                        "mish", "gelu_dx", "gelu_apprx_sigmoid", "gelu_apprx_sigmoid_dx", "silu_dx", "erf_dx")
ACTIVATION_REDUCE_OPS = ("add",)  # nki.isa.activation: "reduce_op must be nl.add" (Scalar Engine registers sum)
REDUCE_CMDS = ("idle", "reset", "reduce", "reset_reduce")
ANY_FUNCTION = "any"  # an arbitrary function: proofs with it hold for every activation function
FLAGS = (False, True)

# Attribute kinds.
OP = "op"  # a name of a vocabulary above (an nl.* token in a kernel)
CMD = "cmd"  # a nisa.* enum token
FLAG = "flag"  # a bool
INT = "int"  # a compile-time integer
NUMBER = "number"  # a compile-time number (an immediate in proofs)
AXES = "axes"  # an axis or a tuple of axes
PATTERN = "pattern"  # an iota access pattern [[step, num], ...]
EXPR = "expr"  # an nl.arange index expression (legacy iota)
SHAPE = "shape"  # a destination shape (proofs only)
KINDS = (OP, CMD, FLAG, INT, NUMBER, AXES, PATTERN, EXPR, SHAPE)

BOTH, KERNEL, PROOF = "both", "kernel", "proof"
REQUIRED: Any = type("Required", (), {"__repr__": lambda self: "REQUIRED"})()

# Latency model kinds (formulas: axon_eg.extract.latency, constants: the hardware file).
DMA_TRANSFER = "dma"  # seconds: costs.dma_fixed + bytes / compute.dma.bandwidth_per_engine
STREAMS = "streams"  # cycles: max(1, input streams) * free elements * costs.vector_cycles_per_element
PE = "pe"  # cycles: max(moving columns, costs.matmul_moving_min_cycles), x4 with an fp32 operand
LATENCY_KEYS = {DMA_TRANSFER: ("costs.dma_fixed", "compute.dma.bandwidth_per_engine"),
                STREAMS: ("costs.vector_cycles_per_element",), PE: ("costs.matmul_moving_min_cycles",)}


@dataclass(frozen=True)
class Tile:
    """A tensor operand: the memories it may live in (a written one's first is where it goes by default)."""

    name: str
    spaces: tuple[str, ...]
    out: bool = False  # written (dst, reduce_res) rather than read
    scalar: bool = False  # a compile-time number may stand in for it (then it is passed as an attribute)
    vector: bool = False  # as a tile, a [P, 1] per-partition vector
    default: Any = REQUIRED  # when it may be left out: the value it then has (None: absent)
    side: str = BOTH

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


@dataclass(frozen=True)
class Attr:
    """A non-tile parameter. ``values``: the allowed values besides the default (None: any of the kind);
    ``proof_values``: those proofs state, when they differ; ``why``: how a value outside is refused."""

    name: str
    kind: str
    values: tuple[Any, ...] | None = None
    default: Any = REQUIRED
    side: str = BOTH
    proof_values: tuple[Any, ...] | None = None
    why: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def allowed(self, proof: bool = False) -> tuple[Any, ...] | None:
        return self.proof_values if proof and self.proof_values is not None else self.values


@dataclass(frozen=True)
class Latency:
    """How long an instruction keeps its engine: ``kind`` (DMA_TRANSFER, STREAMS, PE); ``operands``: the
    input streams (STREAMS) or the operand whose ``columns`` (its free size or its partitions) move
    through the PE array (PE)."""

    kind: str
    operands: tuple[str, ...] = ()
    columns: str = "free"


@dataclass(frozen=True)
class Declaration:
    name: str
    engines: tuple[str, ...]
    params: tuple[Tile | Attr, ...]
    doc: str
    api: str  # the NKI call it corresponds to
    latency: Mapping[str, Latency]  # engine -> its latency model
    limits: Mapping[str, str] = field(default_factory=dict)  # what -> hardware-file key
    features: Mapping[str, str] = field(default_factory=dict)  # features.<name> it needs -> where it exists
    dtype_bytes: Mapping[str, int] = field(default_factory=dict)  # tile operand -> the element size it needs
    engine_required: bool = False  # proofs name the engine; a kernel's call picks it by the operands' memories
    proven: bool = True  # False: kernels may use it (the simulator runs it), proofs and lowerings refuse it

    @cached_property
    def tiles(self) -> dict[str, Tile]:
        return {p.name: p for p in self.params if isinstance(p, Tile)}

    @cached_property
    def attrs(self) -> dict[str, Attr]:
        return {p.name: p for p in self.params if isinstance(p, Attr)}

    def reads(self, side: str = KERNEL) -> dict[str, Tile]:
        return {n: t for n, t in self.tiles.items() if not t.out and t.side in (BOTH, side)}

    def writes(self, side: str = KERNEL) -> dict[str, Tile]:
        return {n: t for n, t in self.tiles.items() if t.out and t.side in (BOTH, side)}

    def arguments(self, side: str) -> tuple[Tile | Attr, ...]:
        """The parameters ``side`` (KERNEL or PROOF) takes, in call order."""
        return tuple(p for p in self.params if p.side in (BOTH, side))

    def proof_arguments(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(required, optional) argument names of the instruction in a proof (``Instr``): every parameter
        but ``dst`` (the Instr's destination), plus ``engine`` where several engines may run it."""
        args = [p for p in self.arguments(PROOF) if p.name != "dst"]
        required = [p.name for p in args if p.required]
        optional = [p.name for p in args if not p.required]
        if len(self.engines) > 1:
            (required if self.engine_required else optional).append("engine")
        return tuple(required), tuple(optional)

    def default_space(self, engine: str) -> str:
        """Where ``dst`` goes when no memory is given: its first memory ``engine`` can write."""
        return next((s for s in self.tiles["dst"].spaces if s in ENGINE_WRITES[engine]), SBUF)

    def limit(self, what: str) -> str:
        return self.limits[what]

    @property
    def meaning(self) -> Any:
        """The instruction's meaning as normal-form terms: its handler of :data:`.instructions.MEANINGS`."""
        from .instructions import MEANINGS  # lazy: instructions imports the declarations

        return MEANINGS[self.name]


DECLARATIONS: dict[str, Declaration] = {}


def declaration(name: str) -> Declaration:
    return DECLARATIONS[name]


def _declare(name: str, engines: tuple[str, ...], params: tuple[Tile | Attr, ...], latency: Latency | Mapping[str, Latency],
             doc: str, api: str, **facts: Any) -> None:
    if not isinstance(latency, Mapping):
        latency = {e: latency for e in engines}
    DECLARATIONS[name] = Declaration(name, engines, params, doc, api, dict(latency), **facts)


def _tile(name: str, *spaces: str, **kw: Any) -> Tile:
    return Tile(name, spaces, **kw)


def _out(name: str, *spaces: str, **kw: Any) -> Tile:
    return Tile(name, spaces, out=True, **kw)


def _vector(name: str, default: Any) -> Tile:
    """A [P, 1] per-partition tile or a compile-time number (bias, scale, operand0/1)."""
    return Tile(name, ON_CHIP, scalar=True, vector=True, default=default)


DMA_LATENCY = Latency(DMA_TRANSFER)

# ----------------------------------------------------------------------------------------- data movement
_declare("load", (DMA,), (_out("dst", SBUF), _tile("src", HBM)), DMA_LATENCY,
         "HBM -> SBUF tile (one DMA).", "nl.load(src)")
_declare("store", (DMA,), (_out("dst", HBM), _tile("src", SBUF)), DMA_LATENCY,
         "SBUF tile -> HBM (one DMA).", "nl.store(dst, value)")
_declare("dma_copy", (DMA,), (_out("dst", SBUF, HBM), _tile("src", HBM, SBUF)), DMA_LATENCY,
         "Memory to memory (HBM/SBUF) in row-major element order, casting through fp32 when dtypes differ.",
         "nisa.dma_copy(dst, src)")
_declare("dma_transpose", (DMA,), (_out("dst", SBUF), _tile("src", HBM, SBUF),
                                    Attr("axes", AXES, ((1, 0),), default=None, side=KERNEL)), DMA_LATENCY,
         "2-D transpose during a DMA (2-byte dtypes; features.dma_transpose, trn2 and later).",
         "nisa.dma_transpose(dst, src)", features={"dma_transpose": "DMA transpose exists on trn2 and later"},
         dtype_bytes={"src": 2})

# ----------------------------------------------------------------------------------------- Tensor engine
_declare("nc_matmul", (TENSOR,),
         (_out("dst", PSUM), _tile("stationary", SBUF), _tile("moving", SBUF),
          Attr("accumulate", FLAG, FLAGS, default=None, proof_values=FLAGS)), Latency(PE, ("moving",), "free"),
         "dst[M, N] (fp32 PSUM) = or += stationary[K, M].T @ moving[K, N]; accumulate None: the first write to a PSUM "
         "element overwrites, later ones add (the simulator's write mode).",
         "nisa.nc_matmul(dst, stationary, moving, accumulate=None)",
         limits={"contraction": "limits.matmul.contraction_max", "stationary_free": "limits.matmul.stationary_free_max",
                 "moving_free": "limits.matmul.moving_free_max", "psum_bank": "memory.psum.bank"})
_declare("nc_transpose", (TENSOR, VECTOR), (_out("dst", *ON_CHIP), _tile("data", *ON_CHIP)),
         {TENSOR: Latency(PE, ("data",), "partitions"), VECTOR: Latency(STREAMS, ("data",))},
         "dst = data.T (free axes flattened): tensor engine <= 128x128 SBUF -> PSUM, vector engine <= 32x32.",
         "nisa.nc_transpose(dst, data, engine)", engine_required=True,
         limits={TENSOR: "limits.transpose.tensor_engine_max", VECTOR: "limits.transpose.vector_engine_max"})

# -------------------------------------------------------------------------------- element-wise engines
_declare("activation", (SCALAR,),
         (_out("dst", *ON_CHIP), Attr("op", OP, ACTIVATION_FUNCTIONS, proof_values=(*PROVEN_ACTIVATION_FUNCTIONS, ANY_FUNCTION)),
          _tile("data", *ON_CHIP), _vector("bias", None), _vector("scale", 1.0),
          Attr("reduce_op", OP, ACTIVATION_REDUCE_OPS, default=None,
               why="must be add (the Scalar Engine reduce registers sum)"),
          _out("reduce_res", *ON_CHIP, vector=True, default=None), Attr("reduce_cmd", CMD, REDUCE_CMDS, default="idle")),
         Latency(STREAMS, ("data",)),
         "dst = op(data * scale + bias); bias a [P, 1] tile, scale a scalar or [P, 1] tile. reduce_cmd drives the "
         "Scalar engine's per-partition reduce registers (reset: set to the identity, reduce: add the row reduction of "
         "dst over the free axes, reset_reduce: both); reduce_res[P, 1] reads the registers out.",
         "nisa.activation(dst, op, data, bias, scale, reduce_op, reduce_res, reduce_cmd)")
_declare("tensor_tensor", (VECTOR, GPSIMD),
         (_out("dst", *ON_CHIP), _tile("data1", *ON_CHIP), _tile("data2", *ON_CHIP),
          Attr("op", OP, ALU_OPS, proof_values=PROVEN_ALU_OPS)),
         Latency(STREAMS, ("data1", "data2")), "dst = data1 op data2, element-wise.",
         "nisa.tensor_tensor(dst, data1, data2, op)")
_declare("tensor_scalar", (VECTOR, SCALAR, GPSIMD),
         (_out("dst", *ON_CHIP), _tile("data", *ON_CHIP), Attr("op0", OP, ALU_OPS, proof_values=PROVEN_ALU_OPS),
          _vector("operand0", None), Attr("reverse0", FLAG, FLAGS, default=False),
          Attr("op1", OP, ALU_OPS, default=None, proof_values=PROVEN_ALU_OPS),
          _vector("operand1", None), Attr("reverse1", FLAG, FLAGS, default=False)),
         Latency(STREAMS, ("data",)),
         "dst = (data op0 operand0) op1 operand1; operands scalars or [P, 1] tiles; reverse swaps an op's operands.",
         "nisa.tensor_scalar(dst, data, op0, operand0, reverse0, op1, operand1, reverse1)")
_declare("tensor_reduce", (VECTOR,),
         (_out("dst", *ON_CHIP), Attr("op", OP, REDUCE_OPS, proof_values=PROVEN_REDUCE_OPS), _tile("data", *ON_CHIP),
          Attr("axis", AXES),
          Attr("negate", FLAG, FLAGS, default=False), Attr("keepdims", FLAG, FLAGS, default=False)),
         Latency(STREAMS, ("data",)), "dst = reduce(op, data, trailing free axes); negate multiplies the result by -1.",
         "nisa.tensor_reduce(dst, op, data, axis, negate, keepdims)")
_declare("tensor_copy", (VECTOR, SCALAR, GPSIMD), (_out("dst", *ON_CHIP), _tile("src", *ON_CHIP)),
         Latency(STREAMS, ("src",)), "dst = src on chip (casting to dst.dtype).", "nisa.tensor_copy(dst, src, engine)")
_declare("memset", (VECTOR, GPSIMD), (_out("dst", *ON_CHIP), Attr("shape", SHAPE, side=PROOF), Attr("value", NUMBER)),
         Latency(STREAMS), "dst = value everywhere.", "nisa.memset(dst, value)")
_declare("iota", (GPSIMD,),
         (_out("dst", SBUF), Attr("shape", SHAPE, side=PROOF), Attr("pattern", PATTERN, default=(), side=KERNEL),
          Attr("offset", INT, default=0), Attr("channel_multiplier", INT, default=0),
          Attr("expr", EXPR, default=None, side=KERNEL)),
         Latency(STREAMS),
         "dst[c, i...] = offset + c * channel_multiplier + sum(i_k * step_k) over pattern [[step, num], ...] (legacy: "
         "the values of an nl.arange expression).", "nisa.iota(dst, pattern, offset, channel_multiplier)")

_declare("reciprocal", (VECTOR,), (_out("dst", *ON_CHIP), _tile("data", *ON_CHIP)), Latency(STREAMS, ("data",)),
         "dst = 1 / data, element-wise, on the Vector engine (nl.reciprocal is the Scalar engine's activation).",
         "nisa.reciprocal(dst, data)")
_declare("scalar_tensor_tensor", (VECTOR,),
         (_out("dst", *ON_CHIP), _tile("data", *ON_CHIP), Attr("op0", OP, ARITHMETIC_OPS, proof_values=PROVEN_ALU_OPS),
          _vector("operand0", None), Attr("op1", OP, ARITHMETIC_OPS, proof_values=PROVEN_ALU_OPS),
          _tile("operand1", *ON_CHIP),
          Attr("reverse0", FLAG, FLAGS, default=False), Attr("reverse1", FLAG, FLAGS, default=False)),
         Latency(STREAMS, ("data", "operand1")),
         "dst = (data op0 operand0) op1 operand1: operand0 a scalar or [P, 1] tile, operand1 a tile of data's shape "
         "(not both it and data in PSUM); reverse swaps an op's operands.",
         "nisa.scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0, reverse1)")
_declare("tensor_scalar_reduce", (VECTOR,),
         (_out("dst", *ON_CHIP), _tile("data", *ON_CHIP), Attr("op0", OP, ARITHMETIC_OPS, proof_values=PROVEN_ALU_OPS),
          _vector("operand0", None), Attr("reduce_op", OP, REDUCE_OPS, proof_values=PROVEN_REDUCE_OPS),
          _out("reduce_res", *ON_CHIP, vector=True)),
         Latency(STREAMS, ("data",)),
         "dst = data op0 operand0, and reduce_res[P, 1] = reduce(reduce_op, dst over the free axes), in one pass.",
         "nisa.tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res)")
_declare("tensor_copy_predicated", (VECTOR,),
         (_out("dst", *ON_CHIP), _tile("src", *ON_CHIP), _tile("predicate", *ON_CHIP),
          Attr("reverse_pred", FLAG, FLAGS, default=False)),
         Latency(STREAMS, ("src", "predicate")),
         "dst = src where predicate is nonzero (zero with reverse_pred); elsewhere dst keeps what it holds. The "
         "predicate is an integer tile of dst's shape; src and predicate not both in PSUM.",
         "nisa.tensor_copy_predicated(dst, src, predicate, reverse_pred)")
_declare("tensor_partition_reduce", (GPSIMD,),
         (_out("dst", SBUF), Attr("op", OP, ("add", "maximum", "bitwise_or", "bitwise_and"),
                                  proof_values=("add", "maximum")), _tile("data", SBUF)),
         Latency(STREAMS, ("data",)),
         "dst[1, F...] = reduce(op, data[P, F...] over the partitions), on the GpSimd engine.",
         "nisa.tensor_partition_reduce(dst, op, data)")

# Kernel-only instructions: the simulator runs them (NumPy semantics, limits, trace); their meaning in proofs is
# not modelled, so no lowering uses them.
_declare("bn_stats", (VECTOR,), (_out("dst", *ON_CHIP), _tile("data", *ON_CHIP)), Latency(STREAMS, ("data",)),
         "dst[P, 6] = (count, mean, variance * count) of data's even and of its odd free elements per partition "
         "(float32); the free size is at most limits.vector.bn_stats_free_max.",
         "nisa.bn_stats(dst, data)", limits={"free": "limits.vector.bn_stats_free_max"}, proven=False)
_declare("bn_aggr", (VECTOR,), (_out("dst", *ON_CHIP), _tile("data", *ON_CHIP)), Latency(STREAMS, ("data",)),
         "dst[P, 2] = (mean, variance) per partition, aggregated from (count, mean, variance * count) triples "
         "(one or more bn_stats outputs side by side).", "nisa.bn_aggr(dst, data)", proven=False)
_declare("max8", (VECTOR,), (_out("dst", *ON_CHIP), _tile("src", *ON_CHIP)), Latency(STREAMS, ("src",)),
         "dst[P, 8] = the 8 largest values of each partition of src, in descending order (8 to "
         "limits.vector.max8_free_max elements per partition).", "nisa.max8(dst, src)",
         limits={"free": "limits.vector.max8_free_max"}, proven=False)
_declare("nc_find_index8", (VECTOR,), (_out("dst", *ON_CHIP), _tile("data", *ON_CHIP), _tile("vals", *ON_CHIP)),
         Latency(STREAMS, ("data",)),
         "dst[P, 8] (uint32) = the free index of the first occurrence in data of each of the 8 values of vals[P, 8] "
         "(as max8 returns them).", "nisa.nc_find_index8(dst, data, vals)",
         limits={"free": "limits.vector.max8_free_max"}, proven=False)
_declare("nc_match_replace8", (VECTOR,),
         (_out("dst", *ON_CHIP), _tile("data", *ON_CHIP), _tile("vals", *ON_CHIP), Attr("imm", NUMBER),
          _out("dst_idx", *ON_CHIP, default=None)),
         Latency(STREAMS, ("data",)),
         "dst = data with the first occurrence of each of the 8 values of vals[P, 8] replaced by imm (vals taken "
         "7 .. 0); dst_idx[P, 8], when given, gets their free indices.", "nisa.nc_match_replace8(dst, data, vals, imm, "
         "dst_idx)", limits={"free": "limits.vector.max8_free_max"}, proven=False)
COMPARE_OPS = ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal")
FP32_MIN = -3.4028234663852886e38  # the most negative finite float32 (range_select's fill)
_declare("select_reduce", (VECTOR,),
         (_out("dst", *ON_CHIP), _tile("predicate", *ON_CHIP), _tile("on_true", *ON_CHIP), _vector("on_false", None),
          _out("reduce_res", *ON_CHIP, vector=True, default=None),
          Attr("reduce_cmd", CMD, ("idle", "reset_reduce"), default="idle"),
          Attr("reduce_op", OP, ("maximum",), default="maximum", why="must be maximum (nki.isa.select_reduce)"),
          Attr("reverse_pred", FLAG, FLAGS, default=False)),
         Latency(STREAMS, ("on_true", "predicate")),
         "dst = on_true where predicate (an int8/16 tile; negated with reverse_pred) else on_false (a scalar or [P, "
         "1] tile); reduce_res[P, 1], when given, gets the row max of dst.",
         "nisa.select_reduce(dst, predicate, on_true, on_false, reduce_res, reduce_cmd, reduce_op, reverse_pred)",
         proven=False)
_declare("range_select", (VECTOR,),
         (_out("dst", *ON_CHIP), _tile("on_true_tile", *ON_CHIP), Attr("comp_op0", OP, COMPARE_OPS),
          Attr("comp_op1", OP, COMPARE_OPS), _tile("bound0", *ON_CHIP, vector=True), _tile("bound1", *ON_CHIP, vector=True),
          Attr("reduce_cmd", CMD, ("idle", "reset_reduce"), default="idle"),
          _out("reduce_res", *ON_CHIP, vector=True, default=None),
          Attr("reduce_op", OP, ("maximum",), default="maximum", why="must be maximum (nki.isa.range_select)"),
          Attr("range_start", NUMBER, default=0.0), Attr("on_false_value", NUMBER, default=FP32_MIN)),
         Latency(STREAMS, ("on_true_tile",)),
         "dst = on_true_tile where comp_op0(i + range_start, bound0) and comp_op1(i + range_start, bound1) for the "
         "free index i (bounds [P, 1] fp32), else on_false_value (FP32_MIN); reduce_res[P, 1], when given, gets the "
         "row max of dst. NeuronCore-v3 and newer.",
         "nisa.range_select(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd, reduce_res, reduce_op, "
         "range_start, on_false_value)", features={"neuroncore_v3": "NeuronCore-v3 and newer (trn2)"}, proven=False)
_declare("dropout", (VECTOR,), (_out("dst", *ON_CHIP), _tile("data", *ON_CHIP), _vector("prob", None)),
         Latency(STREAMS, ("data",)),
         "dst = data with each element replaced by 0 with probability prob (a scalar or [P, 1] tile), unscaled. The "
         "simulator draws from NumPy's generator seeded by nl.random_seed (0 by default): the same kernel and seed "
         "drop the same elements on every run, but not the elements a NeuronCore's generator would.",
         "nisa.dropout(dst, data, prob)", proven=False)
_declare("rng", (VECTOR, GPSIMD), (_out("dst", SBUF),), Latency(STREAMS),
         "dst = random bits of dst's integer dtype, from the generator nisa.set_rng_seed / nl.random_seed seeds "
         "(NumPy's in the simulator: reproducible per seed, not the NeuronCore's stream). On GpSimd NeuronCore-v3 "
         "and newer.", "nisa.rng(dst, engine)", proven=False)
_declare("tensor_tensor_scan", (VECTOR,),
         (_out("dst", *ON_CHIP), _tile("data0", *ON_CHIP), _tile("data1", *ON_CHIP), _vector("initial", None),
          Attr("op0", OP, ALU_OPS), Attr("op1", OP, ALU_OPS), Attr("reverse0", FLAG, FLAGS, default=False),
          Attr("reverse1", FLAG, FLAGS, default=False)),
         Latency(STREAMS, ("data0", "data1")),
         "dst[:, i] = (data0[:, i] op0 dst[:, i - 1]) op1 data1[:, i] along the free axis, dst[:, -1] = initial (a "
         "scalar or [P, 1] tile); reverse swaps an op's operands.",
         "nisa.tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0, reverse1)", proven=False)
_declare("tensor_scalar_cumulative", (VECTOR,),
         (_out("dst", *ON_CHIP), _tile("src", *ON_CHIP), Attr("op0", OP, ARITHMETIC_OPS),
          Attr("op1", OP, ("add", "subtract", "multiply", "maximum", "minimum")), Attr("imm0", NUMBER),
          Attr("imm1", NUMBER, default=None), Attr("reverse0", FLAG, FLAGS, default=False),
          Attr("reduce_cmd", CMD, ("reset_reduce", "load_reduce"), default="reset_reduce",
               why="must be reset_reduce or load_reduce (continuing the Vector engine's accumulator across "
                   "instructions is not modelled)")),
         Latency(STREAMS, ("src",)),
         "dst[:, i] = reg = op1(op0(src[:, i], imm0), reg) along the free elements of each partition; reg starts at "
         "op1's identity (reset_reduce) or imm1 (load_reduce); reverse0 swaps op0's operands.",
         "nisa.tensor_scalar_cumulative(dst, src, op0, op1, imm0, imm1, reduce_cmd)", proven=False)
_declare("affine_select", (GPSIMD,),
         (_out("dst", SBUF), _tile("on_true_tile", SBUF), Attr("on_false_value", NUMBER),
          Attr("pattern", PATTERN, default=(), side=KERNEL), Attr("offset", INT, default=0),
          Attr("channel_multiplier", INT, default=0), Attr("cmp_op", OP, COMPARE_OPS, default="greater_equal"),
          Attr("expr", EXPR, default=None, side=KERNEL)),
         Latency(STREAMS, ("on_true_tile",)),
         "dst = on_true_tile where the affine value offset + p * channel_multiplier + sum(i_k * step_k) compares "
         "true against 0 (cmp_op), else on_false_value (legacy: where the nl.arange predicate holds); the "
         "triangular masks of attention.", "nisa.affine_select(dst, pattern, channel_multiplier, on_true_tile, "
         "on_false_value, cmp_op, offset)", proven=False)


def limit_keys() -> set[str]:
    """Every hardware-file key an instruction check reads (the tie test checks each target has them)."""
    keys = {PARTITION_MAX, *FREE_MAX.values(), *(k for ks in LATENCY_KEYS.values() for k in ks)}
    keys |= {f"compute.engines.{e}.clock" for e in ENGINES if e != DMA}
    for d in DECLARATIONS.values():
        keys |= set(d.limits.values()) | {f"features.{f}" for f in d.features}
    return keys
