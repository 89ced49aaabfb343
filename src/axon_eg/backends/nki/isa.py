"""THE NKI instruction vocabulary: each Trainium instruction the backend emits is declared here once.

An :class:`Instruction` says which engines may run it, which memory spaces (``hbm``/``sbuf``/``psum``) each
tensor operand may live in, its attributes, its NumPy semantics, its limit checks and its latency. The
simulator (:mod:`.simulator`), the cost model and the emitter look instructions up here by name; no other
module keeps a list of instructions. Every limit is read from the hardware file
(``hw.load("trn2").value("limits.matmul.moving_free_max")``), and a violation raises
:class:`NkiLimitError` naming the instruction, the operand, the limit and the value, e.g.
``nc_matmul: moving free size 1024 > 512 (limits.matmul.moving_free_max on trn2)``.

Tiles are ``[partition, free...]``: axis 0 is the partition axis (<= ``limits.partition_max``), the free
size is the product of the other axes. Semantics take float64 arrays (the engines compute in fp32; the
simulator rounds each result to fp32 and then to the destination dtype) and return the output values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

from axon_eg.errors import AxonError, DtypeError, ShapeError, UnknownOperation
from axon_eg.hw import HardwareSpec

HBM, SBUF, PSUM = "hbm", "sbuf", "psum"
ON_CHIP = (SBUF, PSUM)
TENSOR, VECTOR, SCALAR, GPSIMD, DMA = "tensor", "vector", "scalar", "gpsimd", "dma"
ENGINES = (TENSOR, VECTOR, SCALAR, GPSIMD, DMA)
ELEMENTWISE_ENGINES = (VECTOR, SCALAR, GPSIMD)

# What each engine can read and write (hw-facts.md): TensorE reads only SBUF and writes only PSUM,
# GpSimd cannot touch PSUM, the DMA engines move data between HBM and SBUF.
ENGINE_READS = {TENSOR: {SBUF}, VECTOR: {SBUF, PSUM}, SCALAR: {SBUF, PSUM}, GPSIMD: {SBUF}, DMA: {HBM, SBUF}}
ENGINE_WRITES = {TENSOR: {PSUM}, VECTOR: {SBUF, PSUM}, SCALAR: {SBUF, PSUM}, GPSIMD: {SBUF}, DMA: {HBM, SBUF}}
_ENGINE_RULE = {TENSOR: "the tensor engine reads only SBUF and writes only PSUM",
                GPSIMD: "the gpsimd engine cannot access PSUM", DMA: "DMA moves data between HBM and SBUF"}

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
DTYPES: dict[str, np.dtype] = {"float32": np.dtype(np.float32), "bfloat16": BFLOAT16, "float16": np.dtype(np.float16),
                               **{n: np.dtype(n) for n in ("int32", "uint32", "int16", "uint16", "int8", "uint8")}}
FLOAT_DTYPES = frozenset({DTYPES["float32"], BFLOAT16, DTYPES["float16"]})


def as_dtype(dtype: Any, what: str = "dtype") -> np.dtype:
    """The NumPy dtype of an NKI dtype (``nl.bfloat16``, ``np.float32``, ``"float16"``); DtypeError otherwise."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt not in DTYPES.values():
        raise DtypeError(f"{what}: {dtype!r} is not a supported NKI dtype; use one of {', '.join(DTYPES)}")
    return dt


def dtype_name(dtype: np.dtype) -> str:
    return next(n for n, d in DTYPES.items() if d == dtype)


# ---------------------------------------------------------------------------------------------- errors
class NkiLimitError(AxonError, ValueError):
    """A kernel breaks a Trainium limit or rule. ``instruction`` and ``operand`` name the culprit, ``limit``
    the bound (a number, a set of memory spaces ...), ``value`` what the kernel asked for, ``key`` the
    hardware-file key the limit comes from (None for a rule of the ISA docs)."""

    def __init__(self, instruction: str, operand: str, limit: Any, value: Any, *, what: str = "size",
                 key: str | None = None, target: str | None = None, why: str | None = None, relation: str = ">",
                 message: str | None = None):
        self.instruction, self.operand, self.limit, self.value = instruction, operand, limit, value
        self.key, self.target = key, target
        source = f"{key} on {target}" if key else why
        text = message or f"{instruction}: {f'{operand} {what}'.strip()} {value} {relation} {limit}"
        super().__init__(text + (f" ({source})" if source and not message else ""))


class NkiUninitializedError(AxonError, ValueError):
    """A kernel reads memory no instruction wrote (new buffers hold NaN), or returns such an output."""


class NkiSimulationError(AxonError, ValueError):
    """A kernel uses the NKI API in a way the simulator cannot run (wrong argument, dialect, target)."""


# --------------------------------------------------------------------------------------------- operands
@dataclass(frozen=True)
class Operand:
    """What the checks and the cost model know of one tensor operand."""

    shape: tuple[int, ...]
    dtype: np.dtype
    space: str

    @property
    def partitions(self) -> int:
        return self.shape[0] if self.shape else 1

    @property
    def free_size(self) -> int:
        return math.prod(self.shape[1:])

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


# ------------------------------------------------------------------------------------ op vocabularies
ALU_OPS: dict[str, Callable[[Any, Any], np.ndarray]] = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "maximum": np.maximum, "minimum": np.minimum}
REDUCE_OPS: dict[str, tuple[Callable[..., np.ndarray], float]] = {  # reduction, identity
    "add": (np.sum, 0.0), "maximum": (np.max, -np.inf), "minimum": (np.min, np.inf)}
_erf = np.frompyfunc(math.erf, 1, 1)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "copy": lambda x: x, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "reciprocal": lambda x: 1.0 / x, "tanh": np.tanh, "sigmoid": _sigmoid, "silu": lambda x: x * _sigmoid(x),
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64)),
    "gelu_apprx_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))),
    "relu": lambda x: np.maximum(x, 0.0), "square": np.square, "abs": np.abs,
    "erf": lambda x: _erf(x).astype(np.float64), "softplus": lambda x: np.logaddexp(0.0, x)}
_ALIASES = {"sum": "add", "max": "maximum", "amax": "maximum", "min": "minimum", "amin": "minimum",
            "sub": "subtract", "mul": "multiply", "mult": "multiply", "div": "divide", "true_divide": "divide",
            "identity": "copy", "absolute": "abs"}
REDUCE_CMDS = ("idle", "reset", "reduce", "reset_reduce")


def op_name(op: Any, vocabulary: Mapping[str, Any], instruction: str, what: str = "op") -> str:
    """The vocabulary name of an op given as an NKI token (``nl.add``), a NumPy function or a string."""
    name = getattr(op, "nki_op", None) or (op if isinstance(op, str) else getattr(op, "__name__", None))
    name = _ALIASES.get(name, name)
    if name not in vocabulary:
        raise NotImplementedError(f"{instruction}: {what} {op!r} is not supported by the simulator; "
                                  f"supported: {', '.join(sorted(vocabulary))}")
    return name


# -------------------------------------------------------------------------------------- instructions
REQUIRED = object()
Semantics = Callable[[Mapping[str, Any], Mapping[str, Any], Mapping[str, tuple[int, ...]]], dict[str, np.ndarray]]


@dataclass(frozen=True)
class Instruction:
    """One NKI instruction. ``reads``/``writes``: tensor operand -> memory spaces it may live in (the
    engine's own rules narrow them further); an operand that may also be a scalar (``bias``, ``scale``,
    ``operand0``) is passed in ``attrs`` when scalar. ``engines``: the first is the default."""

    name: str
    engines: tuple[str, ...]
    reads: Mapping[str, frozenset[str]]
    writes: Mapping[str, frozenset[str]]
    attributes: Mapping[str, Any]
    semantics: Semantics
    rule: Callable[[Rules], None]
    cycles: Callable[[Rules], float]  # engine cycles (DMA: seconds, see latency())
    doc: str
    api: str = field(default="")  # the NKI call it corresponds to


INSTRUCTIONS: dict[str, Instruction] = {}


def get(name: str) -> Instruction:
    if name not in INSTRUCTIONS:
        raise UnknownOperation(f"unknown NKI instruction {name!r}; known: {', '.join(INSTRUCTIONS)}")
    return INSTRUCTIONS[name]


@dataclass
class Rules:
    """The facts one check or cost function sees, with helpers that raise the right error."""

    instruction: str
    ops: Mapping[str, Operand]
    attrs: Mapping[str, Any]
    spec: HardwareSpec
    engine: str

    def value(self, key: str) -> Any:
        return self.spec.value(key)

    def at_most(self, operand: str, what: str, value: int, key: str) -> None:
        limit = self.spec.value(key)
        if value > limit:
            raise NkiLimitError(self.instruction, operand, limit, value, what=what, key=key, target=self.spec.name)

    def rule(self, ok: bool, operand: str, what: str, value: Any, limit: Any, why: str, relation: str = "!=") -> None:
        if not ok:
            raise NkiLimitError(self.instruction, operand, limit, value, what=what, why=why, relation=relation)

    def same_layout(self, a: str, b: str) -> None:
        """Operands ``a`` and ``b`` have the same partitions and the same free size."""
        x, y = self.ops[a], self.ops[b]
        if (x.partitions, x.free_size) != (y.partitions, y.free_size):
            raise ShapeError(f"{self.instruction}: {a} {list(x.shape)} and {b} {list(y.shape)} must have the same "
                             f"partition size and free size ({x.partitions}x{x.free_size} vs {y.partitions}x{y.free_size})")

    def vector(self, operand: str, partitions: int) -> None:
        """A tensor operand that must be a per-partition ``[P, 1]`` vector."""
        if operand in self.ops and (self.ops[operand].partitions, self.ops[operand].free_size) != (partitions, 1):
            raise ShapeError(f"{self.instruction}: {operand} {list(self.ops[operand].shape)} must be a [{partitions}, 1] "
                             f"per-partition vector (or a scalar)")


def check(name: str, ops: Mapping[str, Operand], attrs: Mapping[str, Any], spec: HardwareSpec, engine: str) -> Rules:
    """Raise NkiLimitError (or ShapeError) unless ``name`` may run on ``engine`` with these operands."""
    instr = get(name)
    r = Rules(name, ops, attrs, spec, engine)
    r.rule(engine in instr.engines, "", "engine", engine, "{" + ", ".join(instr.engines) + "}", f"{name} runs on "
           f"{' or '.join(instr.engines)}", relation="not in")
    for operand, op in ops.items():
        if operand in instr.reads:
            allowed, verb = instr.reads[operand] & ENGINE_READS[engine], "reads"
        elif operand in instr.writes:
            allowed, verb = instr.writes[operand] & ENGINE_WRITES[engine], "writes"
        else:
            raise NkiSimulationError(f"{name}: unknown operand {operand!r}")
        why = _ENGINE_RULE.get(engine) or f"{name} {verb} {operand} in {'/'.join(sorted(allowed))}"
        r.rule(op.space in allowed, operand, "memory", op.space, "{" + ", ".join(sorted(allowed)) + "}", why, "not in")
        if op.space in ON_CHIP:
            r.at_most(operand, "partition size", op.partitions, "limits.partition_max")
            if engine in ELEMENTWISE_ENGINES:
                r.at_most(operand, f"free size in {op.space.upper()}", op.free_size, f"limits.vector.free_max_{op.space}")
    instr.rule(r)
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
    """Seconds one instruction keeps its engine busy (hw-facts.md): DMA fixed cost plus bytes over one DMA
    engine's bandwidth; compute engines: cycles at the engine's clock."""
    cycles = get(rules.instruction).cycles(rules)
    if rules.engine == DMA:
        return cycles
    return cycles / rules.value(f"compute.engines.{rules.engine}.clock")


# ------------------------------------------------------------------------------------------- helpers
def _per_partition(v: Any, ndim: int) -> Any:
    """A [P, 1] operand broadcast along the free axes of a [P, ...] tile (scalars pass through)."""
    return v.reshape((v.shape[0],) + (1,) * (ndim - 1)) if isinstance(v, np.ndarray) else v


def _dma_seconds(r: Rules) -> float:
    nbytes = max(op.nbytes for op in r.ops.values())
    return r.value("costs.dma_fixed") + nbytes / r.value("compute.dma.bandwidth_per_engine")


def _streams(*operands: str) -> Callable[[Rules], float]:
    """Vector/Scalar/GpSimd: ~N cycles per input stream of N free elements (N for one input, 2N for two)."""
    def cycles(r: Rules) -> float:
        n = max(r.ops[o].free_size for o in (*operands, "dst") if o in r.ops)
        return max(1, sum(o in r.ops for o in operands)) * n * r.value("costs.vector_cycles_per_element")
    return cycles


def _pe_cycles(r: Rules, moving_free: int) -> float:
    """TensorE: one moving column per PE cycle, at least the minimum interval; fp32 operands ~4x slower."""
    fp32 = any(op.dtype == DTYPES["float32"] for o, op in r.ops.items() if o != "dst")
    return max(moving_free, r.value("costs.matmul_moving_min_cycles")) * (4 if fp32 else 1)


def _copy(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    return {"dst": np.asarray(ins["src"]).reshape(shapes["dst"])}


def _same_size(r: Rules) -> None:
    src, dst = r.ops["src"], r.ops["dst"]
    if math.prod(src.shape) != math.prod(dst.shape):
        raise ShapeError(f"{r.instruction}: src {list(src.shape)} and dst {list(dst.shape)} differ in element count")


def _same_shape(r: Rules) -> None:
    if r.ops["src"].shape != r.ops["dst"].shape:
        raise ShapeError(f"{r.instruction}: src {list(r.ops['src'].shape)} and dst {list(r.ops['dst'].shape)} differ")


def _register(name: str, engines: tuple[str, ...], reads: dict[str, set[str]], writes: dict[str, set[str]],
              semantics: Semantics, rule: Callable[[Rules], None], cycles: Callable[[Rules], float], doc: str,
              api: str, **attributes: Any) -> None:
    INSTRUCTIONS[name] = Instruction(name, engines, {k: frozenset(v) for k, v in reads.items()},
                                     {k: frozenset(v) for k, v in writes.items()}, attributes, semantics, rule,
                                     cycles, doc, api)


# ------------------------------------------------------------------------------------------ data movement
_register("load", (DMA,), {"src": {HBM}}, {"dst": {SBUF}}, _copy, _same_shape, _dma_seconds,
          "HBM -> SBUF tile (one DMA).", "nl.load(src)")
_register("store", (DMA,), {"src": {SBUF}}, {"dst": {HBM}}, _copy, _same_shape, _dma_seconds,
          "SBUF tile -> HBM (one DMA).", "nl.store(dst, value)")
_register("dma_copy", (DMA,), {"src": {HBM, SBUF}}, {"dst": {HBM, SBUF}}, _copy, _same_size, _dma_seconds,
          "Memory to memory (HBM/SBUF) in row-major element order, casting through fp32 when dtypes differ.",
          "nisa.dma_copy(dst, src)")


def _dma_transpose_rule(r: Rules) -> None:
    if not r.spec.get("features.dma_transpose", False):
        raise NkiLimitError("dma_transpose", "", True, False, key="features.dma_transpose", target=r.spec.name,
                            message=f"dma_transpose: not available on {r.spec.name} (features.dma_transpose is false in "
                                    f"{r.spec.name}.yaml; DMA transpose exists on trn2 and later)")
    src, dst = r.ops["src"], r.ops["dst"]
    r.rule(src.dtype.itemsize == 2, "src", "dtype", dtype_name(src.dtype), "a 2-byte dtype",
           "DMA transpose moves 2-byte elements only", relation="is not")
    r.rule(src.dtype == dst.dtype, "dst", "dtype", dtype_name(dst.dtype), dtype_name(src.dtype),
           "dma_transpose does not cast: src.dtype == dst.dtype")
    if r.attrs.get("axes") not in (None, (1, 0), [1, 0]) or len(src.shape) != 2:
        raise NotImplementedError(f"dma_transpose: only 2-D transposes (axes (1, 0)) are simulated, got src "
                                  f"{list(src.shape)} axes {r.attrs.get('axes')}")
    if dst.shape != src.shape[::-1]:
        raise ShapeError(f"dma_transpose: dst {list(dst.shape)} must be src {list(src.shape)} transposed")


_register("dma_transpose", (DMA,), {"src": {HBM, SBUF}}, {"dst": {SBUF}},
          lambda ins, a, s: {"dst": np.asarray(ins["src"]).T}, _dma_transpose_rule, _dma_seconds,
          "2-D transpose during a DMA (2-byte dtypes; features.dma_transpose, trn2 and later).",
          "nisa.dma_transpose(dst, src)", axes=None)


# ------------------------------------------------------------------------------------------ Tensor engine
def _matmul_rule(r: Rules) -> None:
    st, mv, dst = r.ops["stationary"], r.ops["moving"], r.ops["dst"]
    if st.partitions != mv.partitions:
        raise ShapeError(f"nc_matmul: stationary {list(st.shape)} and moving {list(mv.shape)} must share the "
                         f"contraction (partition) size")
    r.at_most("stationary", "contraction (partition) size", st.partitions, "limits.matmul.contraction_max")
    r.at_most("stationary", "free size", st.free_size, "limits.matmul.stationary_free_max")
    r.at_most("moving", "free size", mv.free_size, "limits.matmul.moving_free_max")
    r.at_most("dst", "bytes per partition", dst.free_size * 4, "memory.psum.bank")
    if (dst.partitions, dst.free_size) != (st.free_size, mv.free_size):
        raise ShapeError(f"nc_matmul: dst {list(dst.shape)} must be [{st.free_size}, {mv.free_size}] "
                         f"(stationary free x moving free)")
    r.rule(dst.dtype == DTYPES["float32"], "dst", "dtype", dtype_name(dst.dtype), "float32",
           "TensorE accumulates in fp32 PSUM")
    fp32 = [op.dtype == DTYPES["float32"] for op in (st, mv)]
    r.rule(fp32[0] == fp32[1], "moving", "dtype", dtype_name(mv.dtype), f"fp32 like stationary ({dtype_name(st.dtype)})"
           if fp32[0] else "not fp32", "an fp32 matmul operand needs an fp32 partner")


def _matmul(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    st, mv = np.asarray(ins["stationary"]), np.asarray(ins["moving"])
    out = st.reshape(st.shape[0], -1).T @ mv.reshape(mv.shape[0], -1)
    return {"dst": out.reshape(shapes["dst"])}


_register("nc_matmul", (TENSOR,), {"stationary": {SBUF}, "moving": {SBUF}}, {"dst": {PSUM}}, _matmul, _matmul_rule,
          lambda r: _pe_cycles(r, r.ops["moving"].free_size),
          "dst[M, N] (fp32 PSUM) = or += stationary[K, M].T @ moving[K, N]; accumulate None: the first write to a PSUM "
          "element overwrites, later ones add (the simulator's write mode).",
          "nisa.nc_matmul(dst, stationary, moving, accumulate=None)", accumulate=None)


def _transpose_rule(r: Rules) -> None:
    data, dst = r.ops["data"], r.ops["dst"]
    key = "limits.transpose.tensor_engine_max" if r.engine == TENSOR else "limits.transpose.vector_engine_max"
    r.at_most("data", "partition size", data.partitions, key)
    r.at_most("data", "free size", data.free_size, key)
    if (dst.partitions, dst.free_size) != (data.free_size, data.partitions):
        raise ShapeError(f"nc_transpose: dst {list(dst.shape)} must be [{data.free_size}, {data.partitions}] (data "
                         f"{list(data.shape)} transposed)")
    r.rule(dst.dtype == data.dtype, "dst", "dtype", dtype_name(dst.dtype), dtype_name(data.dtype),
           "nc_transpose does not cast")


def _transpose_cycles(r: Rules) -> float:
    if r.engine == TENSOR:  # a matmul against an identity: the moving tile has P columns
        return _pe_cycles(r, r.ops["data"].partitions)
    return _streams("data")(r)


_register("nc_transpose", (TENSOR, VECTOR), {"data": {SBUF, PSUM}}, {"dst": {SBUF, PSUM}},
          lambda ins, a, s: {"dst": np.asarray(ins["data"]).reshape(s["data"][0], -1).T.reshape(s["dst"])},
          _transpose_rule, _transpose_cycles,
          "dst = data.T (free axes flattened): tensor engine <= 128x128 SBUF -> PSUM, vector engine <= 32x32.",
          "nisa.nc_transpose(dst, data, engine)")


# ----------------------------------------------------------------------------------- element-wise engines
def _activation(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    data = np.asarray(ins["data"])
    scale = _per_partition(ins.get("scale", attrs["scale"]), data.ndim)
    bias = ins.get("bias", attrs["bias"])
    with np.errstate(all="ignore"):
        out = ACTIVATIONS[attrs["op"]](data * scale + (0.0 if bias is None else _per_partition(bias, data.ndim)))
    regs = np.asarray(ins.get("reduce_regs", np.full((data.shape[0], 1), np.nan)), dtype=np.float64)
    reduce_op, cmd = attrs["reduce_op"], attrs["reduce_cmd"]
    fn, identity = REDUCE_OPS[reduce_op or "add"]
    if cmd in ("reset", "reset_reduce"):
        regs = np.full_like(regs, identity)
    if reduce_op is not None and cmd in ("reduce", "reset_reduce"):
        part = fn(out.reshape(data.shape[0], -1), axis=1).reshape(-1, 1)
        regs = fn(np.concatenate([regs, part], axis=1), axis=1).reshape(-1, 1)
    result = {"dst": out.reshape(shapes["dst"]), "reduce_regs": regs}
    if "reduce_res" in shapes:
        result["reduce_res"] = regs.reshape(shapes["reduce_res"])
    return result


def _activation_rule(r: Rules) -> None:
    r.same_layout("data", "dst")
    p = r.ops["data"].partitions
    if "bias" not in r.ops and r.attrs.get("bias") is not None:
        raise NkiLimitError("activation", "bias", "a [P, 1] vector", r.attrs["bias"], message=(
            f"activation: bias must be a [{p}, 1] per-partition tile, got the scalar {r.attrs['bias']!r} (a scalar bias "
            f"needs NeuronCore-v3; the simulator keeps the portable form: memset a [{p}, 1] tile)"))
    r.vector("bias", p)
    r.vector("scale", p)
    reduce_op = r.attrs.get("reduce_op")
    if reduce_op not in (None, "add"):
        raise NkiLimitError("activation", "reduce_op", "add", reduce_op, message=(
            f"activation: reduce_op {reduce_op} is not supported: the Scalar engine reduce registers only add "
            f"(nki.isa.activation docs); reduce with nisa.tensor_reduce instead"))
    r.rule(r.attrs.get("reduce_cmd") in REDUCE_CMDS, "reduce_cmd", "", r.attrs.get("reduce_cmd"), set(REDUCE_CMDS),
           "nisa.reduce_cmd", relation="not in")
    if "reduce_res" in r.ops:
        r.vector("reduce_res", p)


_register("activation", (SCALAR,), {"data": {SBUF, PSUM}, "bias": {SBUF, PSUM}, "scale": {SBUF, PSUM}},
          {"dst": {SBUF, PSUM}, "reduce_res": {SBUF, PSUM}}, _activation, _activation_rule, _streams("data"),
          "dst = op(data * scale + bias); bias a [P, 1] tile, scale a scalar or [P, 1] tile. reduce_cmd drives the "
          "Scalar engine's per-partition reduce registers (reset: set to the identity, reduce: add the row reduction of "
          "dst over the free axes, reset_reduce: both); reduce_res[P, 1] reads the registers out.",
          "nisa.activation(dst, op, data, bias, scale, reduce_op, reduce_res, reduce_cmd)",
          op=REQUIRED, bias=None, scale=1.0, reduce_op=None, reduce_cmd="idle")


def _tensor_tensor_rule(r: Rules) -> None:
    r.same_layout("data1", "dst")
    r.same_layout("data2", "dst")
    if r.ops["data1"].space == PSUM and r.ops["data2"].space == PSUM:
        raise NkiLimitError("tensor_tensor", "data2", SBUF, PSUM, message="tensor_tensor: data1 and data2 are both in PSUM; "
                            "at most one input may be (nki.isa.tensor_tensor docs)")


_register("tensor_tensor", (VECTOR, GPSIMD), {"data1": {SBUF, PSUM}, "data2": {SBUF, PSUM}}, {"dst": {SBUF, PSUM}},
          lambda ins, a, s: {"dst": ALU_OPS[a["op"]](np.asarray(ins["data1"]),
                                                     np.asarray(ins["data2"]).reshape(s["data1"])).reshape(s["dst"])},
          _tensor_tensor_rule, _streams("data1", "data2"), "dst = data1 op data2, element-wise.",
          "nisa.tensor_tensor(dst, data1, data2, op)", op=REQUIRED)


def _tensor_scalar(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    out = np.asarray(ins["data"])
    for i in (0, 1):
        op = attrs[f"op{i}"]
        if op is None:
            continue
        operand = _per_partition(ins.get(f"operand{i}", attrs[f"operand{i}"]), out.ndim)
        out = ALU_OPS[op](operand, out) if attrs[f"reverse{i}"] else ALU_OPS[op](out, operand)
    return {"dst": out.reshape(shapes["dst"])}


def _tensor_scalar_rule(r: Rules) -> None:
    r.same_layout("data", "dst")
    for i in (0, 1):
        r.vector(f"operand{i}", r.ops["data"].partitions)
        given = f"operand{i}" in r.ops or r.attrs.get(f"operand{i}") is not None
        if (r.attrs.get(f"op{i}") is None) == given:
            raise NkiSimulationError(f"tensor_scalar: op{i} and operand{i} go together (op{i}={r.attrs.get(f'op{i}')!r})")


_register("tensor_scalar", (VECTOR, SCALAR, GPSIMD),
          {"data": {SBUF, PSUM}, "operand0": {SBUF, PSUM}, "operand1": {SBUF, PSUM}}, {"dst": {SBUF, PSUM}},
          _tensor_scalar, _tensor_scalar_rule, _streams("data"),
          "dst = (data op0 operand0) op1 operand1; operands scalars or [P, 1] tiles; reverse swaps an op's operands.",
          "nisa.tensor_scalar(dst, data, op0, operand0, reverse0, op1, operand1, reverse1)",
          op0=REQUIRED, operand0=None, reverse0=False, op1=None, operand1=None, reverse1=False)


def reduce_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    return tuple(sorted(int(a) % ndim if ndim else int(a) for a in axes))


def _tensor_reduce(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    data = np.asarray(ins["data"])
    out = REDUCE_OPS[attrs["op"]][0](data, axis=reduce_axes(attrs["axis"], data.ndim), keepdims=attrs["keepdims"])
    return {"dst": (-out if attrs["negate"] else out).reshape(shapes["dst"])}


def _tensor_reduce_rule(r: Rules) -> None:
    data, dst = r.ops["data"], r.ops["dst"]
    axes = reduce_axes(r.attrs["axis"], len(data.shape))
    if 0 in axes:
        raise NkiLimitError("tensor_reduce", "axis", "free axes", 0, message=f"tensor_reduce: axis {list(axes)} includes "
                            f"axis 0, the partition axis; only free axes can be reduced (transpose first)")
    if not axes or axes != tuple(range(axes[0], len(data.shape))):
        raise NkiLimitError("tensor_reduce", "axis", "trailing free axes", list(axes), message=f"tensor_reduce: axis "
                            f"{list(axes)} of data {list(data.shape)} must be the last contiguous free axes")
    kept = math.prod(data.shape[1:axes[0]])
    if (dst.partitions, dst.free_size) != (data.partitions, kept):
        raise ShapeError(f"tensor_reduce: dst {list(dst.shape)} must hold [{data.partitions}, {kept}] values (data "
                         f"{list(data.shape)} reduced over axes {list(axes)})")


_register("tensor_reduce", (VECTOR,), {"data": {SBUF, PSUM}}, {"dst": {SBUF, PSUM}}, _tensor_reduce,
          _tensor_reduce_rule, _streams("data"),
          "dst = reduce(op, data, trailing free axes); negate multiplies the result by -1.",
          "nisa.tensor_reduce(dst, op, data, axis, negate, keepdims)", op=REQUIRED, axis=REQUIRED, negate=False,
          keepdims=False)

_register("tensor_copy", (VECTOR, SCALAR, GPSIMD), {"src": {SBUF, PSUM}}, {"dst": {SBUF, PSUM}}, _copy,
          lambda r: r.same_layout("src", "dst"), _streams("src"), "dst = src on chip (casting to dst.dtype).",
          "nisa.tensor_copy(dst, src, engine)")
_register("memset", (VECTOR, GPSIMD), {}, {"dst": {SBUF, PSUM}},
          lambda ins, a, s: {"dst": np.full(s["dst"], float(a["value"]))}, lambda r: None, _streams(),
          "dst = value everywhere.", "nisa.memset(dst, value)", value=REQUIRED)


def _iota(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    if attrs.get("expr") is not None:  # legacy dialect: an nl.arange expression, evaluated as written
        return {"dst": np.broadcast_to(np.asarray(attrs["expr"], dtype=np.float64), shapes["dst"])}
    steps, nums = zip(*attrs["pattern"]) if attrs["pattern"] else ((), ())
    free = sum(np.arange(n).reshape([-1 if j == i else 1 for j in range(len(nums))]) * s
               for i, (s, n) in enumerate(zip(steps, nums)))
    channel = np.arange(shapes["dst"][0]) * attrs["channel_multiplier"]
    values = attrs["offset"] + channel.reshape(-1, 1) + np.asarray(free, dtype=np.float64).reshape(1, -1)
    return {"dst": values.reshape(shapes["dst"])}


def _iota_rule(r: Rules) -> None:
    if r.attrs.get("expr") is None:
        count = math.prod(n for _, n in r.attrs["pattern"])
        if count != r.ops["dst"].free_size:
            raise ShapeError(f"iota: pattern {r.attrs['pattern']} makes {count} values per partition, dst "
                             f"{list(r.ops['dst'].shape)} holds {r.ops['dst'].free_size}")


_register("iota", (GPSIMD,), {}, {"dst": {SBUF}}, _iota, _iota_rule, _streams(),
          "dst[c, i...] = offset + c * channel_multiplier + sum(i_k * step_k) over pattern [[step, num], ...] (legacy: "
          "the values of an nl.arange expression).", "nisa.iota(dst, pattern, offset, channel_multiplier)",
          pattern=(), offset=0, channel_multiplier=0, expr=None)
