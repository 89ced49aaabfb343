"""The simulator's implementation of each declared NKI instruction: its NumPy semantics and its own checks.

What an instruction takes (operands, memories, engines, attributes, limit keys, features, latency) is its
declaration (``axon_eg.semantics.isa.declarations``); :mod:`.isa` checks what is common to every
declared instruction and then calls the instruction's ``rule`` here, which states only its shape, dtype
and attribute rules, reading limit keys (``r.key("contraction")``) and allowed values from the
declaration. Semantics take float64 arrays (the engines compute in fp32; the simulator rounds each result
to fp32 and then to the destination dtype) and return the output values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from axon_eg.errors import ShapeError
from axon_eg.semantics.isa import declarations as D

from .nki_checks import DTYPES, NkiLimitError, NkiSimulationError, Rules, dtype_name

Semantics = Callable[[Mapping[str, Any], Mapping[str, Any], Mapping[str, tuple[int, ...]]], dict[str, np.ndarray]]

# ------------------------------------------------------------------ the declared vocabularies in NumPy
def _bits(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], np.ndarray]:
    """A bitwise op on the integer values of its operands (the engines' integer ALU paths)."""
    return lambda x, y: op(np.asarray(x).astype(np.int64), np.asarray(y).astype(np.int64)).astype(np.float64)


def _truth(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], np.ndarray]:
    """A comparison or logical op: 1.0 where it holds, else 0.0 (nonzero is true)."""
    return lambda x, y: op(x, y).astype(np.float64)


ALU_OPS: dict[str, Callable[[Any, Any], np.ndarray]] = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "power": np.power, "fmod": np.fmod, "mod": np.mod,
    "equal": _truth(np.equal), "not_equal": _truth(np.not_equal), "greater": _truth(np.greater),
    "greater_equal": _truth(np.greater_equal), "less": _truth(np.less), "less_equal": _truth(np.less_equal),
    "logical_and": _truth(np.logical_and), "logical_or": _truth(np.logical_or), "logical_xor": _truth(np.logical_xor),
    "bitwise_and": _bits(np.bitwise_and), "bitwise_or": _bits(np.bitwise_or), "bitwise_xor": _bits(np.bitwise_xor),
    "left_shift": _bits(np.left_shift), "right_shift": _bits(np.right_shift)}
REDUCE_OPS: dict[str, tuple[Callable[..., np.ndarray], float]] = {  # reduction, identity
    "add": (np.sum, 0.0), "maximum": (np.max, -np.inf), "minimum": (np.min, np.inf), "multiply": (np.prod, 1.0)}
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
    "erf": lambda x: _erf(x).astype(np.float64), "softplus": lambda x: np.logaddexp(0.0, x),
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "arctan": np.arctan, "ceil": np.ceil, "floor": np.floor,
    "trunc": np.trunc, "sign": np.sign, "mish": lambda x: x * np.tanh(np.logaddexp(0.0, x)),
    "gelu_dx": lambda x: 0.5 * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))
                         + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi),
    "gelu_apprx_sigmoid": lambda x: x * _sigmoid(1.702 * x),
    "gelu_apprx_sigmoid_dx": lambda x: _sigmoid(1.702 * x) * (1.0 + 1.702 * x * (1.0 - _sigmoid(1.702 * x))),
    "silu_dx": lambda x: _sigmoid(x) * (1.0 + x * (1.0 - _sigmoid(x))),
    "erf_dx": lambda x: 2.0 / math.sqrt(math.pi) * np.exp(-x * x)}


@dataclass(frozen=True)
class Implementation:
    semantics: Semantics
    rule: Callable[[Rules], None]


IMPLEMENTATIONS: dict[str, Implementation] = {}


def _implements(*names: str, semantics: Semantics) -> Callable[[Callable[[Rules], None]], Callable[[Rules], None]]:
    def register(rule: Callable[[Rules], None]) -> Callable[[Rules], None]:
        for name in names:
            IMPLEMENTATIONS[name] = Implementation(semantics, rule)
        return rule

    return register


# ------------------------------------------------------------------------------------------- helpers
def _per_partition(v: Any, ndim: int) -> Any:
    """A [P, 1] operand broadcast along the free axes of a [P, ...] tile (scalars pass through)."""
    return v.reshape((v.shape[0],) + (1,) * (ndim - 1)) if isinstance(v, np.ndarray) else v


def _copy(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    return {"dst": np.asarray(ins["src"]).reshape(shapes["dst"])}


def reduce_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    return tuple(sorted(int(a) % ndim if ndim else int(a) for a in axes))


# ------------------------------------------------------------------------------------------ data movement
@_implements("load", "store", semantics=_copy)
def _same_shape(r: Rules) -> None:
    if r.ops["src"].shape != r.ops["dst"].shape:
        raise ShapeError(f"{r.instruction}: src {list(r.ops['src'].shape)} and dst {list(r.ops['dst'].shape)} differ")


@_implements("dma_copy", semantics=_copy)
def _same_size(r: Rules) -> None:
    src, dst = r.ops["src"], r.ops["dst"]
    if math.prod(src.shape) != math.prod(dst.shape):
        raise ShapeError(f"{r.instruction}: src {list(src.shape)} and dst {list(dst.shape)} differ in element count")


@_implements("dma_transpose", semantics=lambda ins, a, s: {"dst": np.asarray(ins["src"]).T})
def _dma_transpose_rule(r: Rules) -> None:  # its feature and 2-byte dtype: declared, checked by isa.check
    src, dst = r.ops["src"], r.ops["dst"]
    r.rule(src.dtype == dst.dtype, "dst", "dtype", dtype_name(dst.dtype), dtype_name(src.dtype),
           "dma_transpose does not cast: src.dtype == dst.dtype")
    if r.attrs.get("axes") not in (None, *r.declaration.attrs["axes"].values, [1, 0]) or len(src.shape) != 2:
        raise NotImplementedError(f"dma_transpose: only 2-D transposes (axes (1, 0)) are simulated, got src "
                                  f"{list(src.shape)} axes {r.attrs.get('axes')}")
    if dst.shape != src.shape[::-1]:
        raise ShapeError(f"dma_transpose: dst {list(dst.shape)} must be src {list(src.shape)} transposed")


# ------------------------------------------------------------------------------------------ Tensor engine
def _matmul(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    st, mv = np.asarray(ins["stationary"]), np.asarray(ins["moving"])
    out = st.reshape(st.shape[0], -1).T @ mv.reshape(mv.shape[0], -1)
    return {"dst": out.reshape(shapes["dst"])}


@_implements("nc_matmul", semantics=_matmul)
def _matmul_rule(r: Rules) -> None:
    st, mv, dst = r.ops["stationary"], r.ops["moving"], r.ops["dst"]
    if st.partitions != mv.partitions:
        raise ShapeError(f"nc_matmul: stationary {list(st.shape)} and moving {list(mv.shape)} must share the "
                         f"contraction (partition) size")
    r.at_most("stationary", "contraction (partition) size", st.partitions, r.key("contraction"))
    r.at_most("stationary", "free size", st.free_size, r.key("stationary_free"))
    r.at_most("moving", "free size", mv.free_size, r.key("moving_free"))
    r.at_most("dst", "bytes per partition", dst.free_size * 4, r.key("psum_bank"))
    if (dst.partitions, dst.free_size) != (st.free_size, mv.free_size):
        raise ShapeError(f"nc_matmul: dst {list(dst.shape)} must be [{st.free_size}, {mv.free_size}] "
                         f"(stationary free x moving free)")
    r.rule(dst.dtype == DTYPES["float32"], "dst", "dtype", dtype_name(dst.dtype), "float32",
           "TensorE accumulates in fp32 PSUM")
    fp32 = [op.dtype == DTYPES["float32"] for op in (st, mv)]
    r.rule(fp32[0] == fp32[1], "moving", "dtype", dtype_name(mv.dtype), f"fp32 like stationary ({dtype_name(st.dtype)})"
           if fp32[0] else "not fp32", "an fp32 matmul operand needs an fp32 partner")


@_implements("nc_transpose",
             semantics=lambda ins, a, s: {"dst": np.asarray(ins["data"]).reshape(s["data"][0], -1).T.reshape(s["dst"])})
def _transpose_rule(r: Rules) -> None:
    data, dst = r.ops["data"], r.ops["dst"]
    key = r.key(r.engine)  # the transpose size of this engine
    r.at_most("data", "partition size", data.partitions, key)
    r.at_most("data", "free size", data.free_size, key)
    if (dst.partitions, dst.free_size) != (data.free_size, data.partitions):
        raise ShapeError(f"nc_transpose: dst {list(dst.shape)} must be [{data.free_size}, {data.partitions}] (data "
                         f"{list(data.shape)} transposed)")
    r.rule(dst.dtype == data.dtype, "dst", "dtype", dtype_name(dst.dtype), dtype_name(data.dtype),
           "nc_transpose does not cast")


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


@_implements("activation", semantics=_activation)
def _activation_rule(r: Rules) -> None:
    r.same_layout("data", "dst")
    p = r.ops["data"].partitions
    if "bias" not in r.ops and r.attrs.get("bias") is not None:
        raise NkiLimitError("activation", "bias", "a [P, 1] vector", r.attrs["bias"], message=(
            f"activation: bias must be a [{p}, 1] per-partition tile, got the scalar {r.attrs['bias']!r} (a scalar bias "
            f"needs NeuronCore-v3; the simulator keeps the portable form: memset a [{p}, 1] tile)"))
    r.vector("bias", p)
    r.vector("scale", p)
    reduce_op, allowed = r.attrs.get("reduce_op"), r.declaration.attrs["reduce_op"].values
    if reduce_op is not None and reduce_op not in allowed:
        raise NkiLimitError("activation", "reduce_op", "add", reduce_op, message=(
            f"activation: reduce_op {reduce_op} is not supported: the Scalar engine reduce registers only add "
            f"(nki.isa.activation docs); reduce with nisa.tensor_reduce instead"))
    cmds = r.declaration.attrs["reduce_cmd"].values
    r.rule(r.attrs.get("reduce_cmd") in cmds, "reduce_cmd", "", r.attrs.get("reduce_cmd"), set(cmds),
           "nisa.reduce_cmd", relation="not in")
    if "reduce_res" in r.ops:
        r.vector("reduce_res", p)


@_implements("tensor_tensor", semantics=lambda ins, a, s: {"dst": ALU_OPS[a["op"]](
    np.asarray(ins["data1"]), np.asarray(ins["data2"]).reshape(s["data1"])).reshape(s["dst"])})
def _tensor_tensor_rule(r: Rules) -> None:
    r.same_layout("data1", "dst")
    r.same_layout("data2", "dst")
    _not_both_psum(r, "data1", "data2")


def _tensor_scalar(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    out = np.asarray(ins["data"])
    for i in (0, 1):
        op = attrs[f"op{i}"]
        if op is None:
            continue
        operand = _per_partition(ins.get(f"operand{i}", attrs[f"operand{i}"]), out.ndim)
        out = ALU_OPS[op](operand, out) if attrs[f"reverse{i}"] else ALU_OPS[op](out, operand)
    return {"dst": out.reshape(shapes["dst"])}


@_implements("tensor_scalar", semantics=_tensor_scalar)
def _tensor_scalar_rule(r: Rules) -> None:
    r.same_layout("data", "dst")
    for i in (0, 1):
        r.vector(f"operand{i}", r.ops["data"].partitions)
        given = f"operand{i}" in r.ops or r.attrs.get(f"operand{i}") is not None
        if (r.attrs.get(f"op{i}") is None) == given:
            raise NkiSimulationError(f"tensor_scalar: op{i} and operand{i} go together (op{i}={r.attrs.get(f'op{i}')!r})")


def _tensor_reduce(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    data = np.asarray(ins["data"])
    out = REDUCE_OPS[attrs["op"]][0](data, axis=reduce_axes(attrs["axis"], data.ndim), keepdims=attrs["keepdims"])
    return {"dst": (-out if attrs["negate"] else out).reshape(shapes["dst"])}


@_implements("tensor_reduce", semantics=_tensor_reduce)
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


@_implements("tensor_copy", semantics=_copy)
def _tensor_copy_rule(r: Rules) -> None:
    r.same_layout("src", "dst")


@_implements("memset", semantics=lambda ins, a, s: {"dst": np.full(s["dst"], float(a["value"]))})
def _memset_rule(r: Rules) -> None:
    return None


def _iota(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    if attrs.get("expr") is not None:  # legacy dialect: an nl.arange expression, evaluated as written
        return {"dst": np.broadcast_to(np.asarray(attrs["expr"], dtype=np.float64), shapes["dst"])}
    steps, nums = zip(*attrs["pattern"]) if attrs["pattern"] else ((), ())
    free = sum(np.arange(n).reshape([-1 if j == i else 1 for j in range(len(nums))]) * s
               for i, (s, n) in enumerate(zip(steps, nums)))
    channel = np.arange(shapes["dst"][0]) * attrs["channel_multiplier"]
    values = attrs["offset"] + channel.reshape(-1, 1) + np.asarray(free, dtype=np.float64).reshape(1, -1)
    return {"dst": values.reshape(shapes["dst"])}


@_implements("iota", semantics=_iota)
def _iota_rule(r: Rules) -> None:
    if r.attrs.get("expr") is None:
        count = math.prod(n for _, n in r.attrs["pattern"])
        if count != r.ops["dst"].free_size:
            raise ShapeError(f"iota: pattern {r.attrs['pattern']} makes {count} values per partition, dst "
                             f"{list(r.ops['dst'].shape)} holds {r.ops['dst'].free_size}")


# ------------------------------------------------------------------------- more Vector / GpSimd instructions
def _rows(x: Any) -> np.ndarray:
    """A tile as [P, free elements]."""
    x = np.asarray(x)
    return x.reshape(x.shape[0], -1)


def _not_both_psum(r: Rules, a: str, b: str) -> None:
    if r.ops[a].space == "psum" and r.ops[b].space == "psum":
        raise NkiLimitError(r.instruction, b, "sbuf", "psum", message=f"{r.instruction}: {a} and {b} are both in PSUM; "
                            f"at most one input may be (nki.isa.{r.instruction} docs)")


def _required_vector(r: Rules, key: str, partitions: int) -> None:
    """An operand that is a compile-time scalar or a [P, 1] tile, and must be given."""
    r.vector(key, partitions)
    if key not in r.ops and r.attrs.get(key) is None:
        raise NkiSimulationError(f"{r.instruction}: {key} (a scalar or [P, 1] tile) is required")


@_implements("reciprocal", semantics=lambda ins, a, s: {"dst": (1.0 / np.asarray(ins["data"])).reshape(s["dst"])})
def _reciprocal_rule(r: Rules) -> None:
    r.same_layout("data", "dst")


def _scalar_tensor_tensor(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    data = np.asarray(ins["data"])
    operand0 = _per_partition(ins.get("operand0", attrs["operand0"]), data.ndim)
    other = np.asarray(ins["operand1"]).reshape(data.shape)
    op0, op1 = ALU_OPS[attrs["op0"]], ALU_OPS[attrs["op1"]]
    v = op0(operand0, data) if attrs["reverse0"] else op0(data, operand0)
    return {"dst": (op1(other, v) if attrs["reverse1"] else op1(v, other)).reshape(shapes["dst"])}


@_implements("scalar_tensor_tensor", semantics=_scalar_tensor_tensor)
def _scalar_tensor_tensor_rule(r: Rules) -> None:
    r.same_layout("data", "dst")
    r.same_layout("operand1", "dst")
    _required_vector(r, "operand0", r.ops["data"].partitions)
    _not_both_psum(r, "data", "operand1")


def _tensor_scalar_reduce(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    data = np.asarray(ins["data"])
    operand0 = _per_partition(ins.get("operand0", attrs["operand0"]), data.ndim)
    out = ALU_OPS[attrs["op0"]](data, operand0)
    return {"dst": out.reshape(shapes["dst"]),
            "reduce_res": REDUCE_OPS[attrs["reduce_op"]][0](_rows(out), axis=1).reshape(shapes["reduce_res"])}


@_implements("tensor_scalar_reduce", semantics=_tensor_scalar_reduce)
def _tensor_scalar_reduce_rule(r: Rules) -> None:
    r.same_layout("data", "dst")
    _required_vector(r, "operand0", r.ops["data"].partitions)
    r.vector("reduce_res", r.ops["data"].partitions)


def _copy_predicated(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    keep = np.asarray(ins["predicate"]).reshape(shapes["dst"]) != 0
    return {"dst": np.asarray(ins["src"]).reshape(shapes["dst"]), "where": ~keep if attrs["reverse_pred"] else keep}


@_implements("tensor_copy_predicated", semantics=_copy_predicated)
def _tensor_copy_predicated_rule(r: Rules) -> None:
    r.same_layout("src", "dst")
    r.same_layout("predicate", "dst")
    pred = r.ops["predicate"].dtype
    r.rule(pred.kind == "u", "predicate", "dtype", dtype_name(pred), "uint8, uint16 or uint32",
           "tensor_copy_predicated takes an unsigned integer predicate", relation="is not")
    r.rule(r.ops["src"].dtype == r.ops["dst"].dtype, "dst", "dtype", dtype_name(r.ops["dst"].dtype),
           dtype_name(r.ops["src"].dtype), "tensor_copy_predicated does not cast")
    _not_both_psum(r, "src", "predicate")


_PARTITION_REDUCE = {"add": np.add.reduce, "maximum": np.maximum.reduce, "bitwise_or": np.bitwise_or.reduce,
                     "bitwise_and": np.bitwise_and.reduce}


def _partition_reduce(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    data = np.asarray(ins["data"])
    if attrs["op"].startswith("bitwise"):
        data = data.astype(np.int64)
    return {"dst": _PARTITION_REDUCE[attrs["op"]](data, axis=0, keepdims=True).astype(np.float64).reshape(shapes["dst"])}


@_implements("tensor_partition_reduce", semantics=_partition_reduce)
def _tensor_partition_reduce_rule(r: Rules) -> None:
    data, dst = r.ops["data"], r.ops["dst"]
    if (dst.partitions, dst.free_size) != (1, data.free_size):
        raise ShapeError(f"tensor_partition_reduce: dst {list(dst.shape)} must be [1, {data.free_size}] (data "
                         f"{list(data.shape)} reduced over its partitions)")


def _bn_stats(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    data = _rows(ins["data"])
    out = []
    for half in (data[:, 0::2], data[:, 1::2]):
        n = half.shape[1]
        mean = half.mean(axis=1) if n else np.zeros(len(half))
        out += [np.full(len(half), float(n)), mean, ((half - mean[:, None]) ** 2).sum(axis=1)]
    return {"dst": np.stack(out, axis=1).reshape(shapes["dst"])}


@_implements("bn_stats", semantics=_bn_stats)
def _bn_stats_rule(r: Rules) -> None:
    data, dst = r.ops["data"], r.ops["dst"]
    r.at_most("data", "free size", data.free_size, r.key("free"))
    if (dst.partitions, dst.free_size) != (data.partitions, 6):
        raise ShapeError(f"bn_stats: dst {list(dst.shape)} must be [{data.partitions}, 6] (count, mean, variance * count "
                         f"of the even and of the odd elements)")


def _bn_aggr(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    stats = _rows(ins["data"]).reshape(len(np.asarray(ins["data"])), -1, 3)
    count, mean, m2 = stats[..., 0], stats[..., 1], stats[..., 2]
    total = count.sum(axis=1)
    with np.errstate(all="ignore"):
        mu = (count * mean).sum(axis=1) / total
        var = (m2 + count * (mean - mu[:, None]) ** 2).sum(axis=1) / total
    return {"dst": np.stack([mu, var], axis=1).reshape(shapes["dst"])}


@_implements("bn_aggr", semantics=_bn_aggr)
def _bn_aggr_rule(r: Rules) -> None:
    data, dst = r.ops["data"], r.ops["dst"]
    if data.free_size % 3:
        raise ShapeError(f"bn_aggr: data {list(data.shape)} holds {data.free_size} elements per partition, not a "
                         f"multiple of 3 ((count, mean, variance * count) triples)")
    if (dst.partitions, dst.free_size) != (data.partitions, 2):
        raise ShapeError(f"bn_aggr: dst {list(dst.shape)} must be [{data.partitions}, 2] (mean, variance)")


@_implements("max8", semantics=lambda ins, a, s: {"dst": -np.sort(-_rows(ins["src"]), axis=1)[:, :8].reshape(s["dst"])})
def _max8_rule(r: Rules) -> None:
    src, dst = r.ops["src"], r.ops["dst"]
    r.rule(src.free_size >= 8, "src", "free size", src.free_size, 8, "max8 needs at least 8 elements per partition",
           relation="<")
    r.at_most("src", "free size", src.free_size, r.key("free"))
    if (dst.partitions, dst.free_size) != (src.partitions, 8):
        raise ShapeError(f"max8: dst {list(dst.shape)} must be [{src.partitions}, 8]")


def _match8(instruction: str, data: np.ndarray, vals: np.ndarray, order: range) -> np.ndarray:
    """[P, 8] positions in data of the 8 values of each partition: taking ``vals`` in ``order``, each value's first
    occurrence not taken yet (so a value given k times is paired with k distinct occurrences)."""
    out = np.zeros(vals.shape, np.int64)
    for p in range(len(data)):
        taken: set[int] = set()
        for j in order:
            hits = [int(i) for i in np.flatnonzero(data[p] == vals[p, j]) if int(i) not in taken]
            if not hits:
                raise NkiSimulationError(f"{instruction}: value {vals[p, j]!r} (vals[{p}, {j}]) does not occur in "
                                         f"partition {p} of data" + (" often enough" if data[p].tolist().count(vals[p, j])
                                                                     else ""))
            out[p, j] = hits[0]
            taken.add(hits[0])
    return out


def _find_index8(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    """Duplicate values pair with their occurrences in ascending order across dst (nki.isa.nc_find_index8)."""
    idx = _match8("nc_find_index8", _rows(ins["data"]), _rows(ins["vals"]), range(8))
    return {"dst": idx.astype(np.float64).reshape(shapes["dst"])}


def _match_replace8(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    """vals taken in reverse order (7 .. 0), as the docs say: the first occurrence of a duplicate goes to the
    highest of its dst_idx slots."""
    data = _rows(ins["data"])
    idx = _match8("nc_match_replace8", data, _rows(ins["vals"]), range(7, -1, -1))
    out = data.copy()
    np.put_along_axis(out, idx, float(attrs["imm"]), axis=1)
    result = {"dst": out.reshape(shapes["dst"])}
    if "dst_idx" in shapes:
        result["dst_idx"] = idx.astype(np.float64).reshape(shapes["dst_idx"])
    return result


@_implements("nc_match_replace8", semantics=_match_replace8)
def _match_replace8_rule(r: Rules) -> None:
    data, vals = r.ops["data"], r.ops["vals"]
    r.same_layout("data", "dst")
    r.at_most("data", "free size", data.free_size, r.key("free"))
    if (vals.partitions, vals.free_size) != (data.partitions, 8):
        raise ShapeError(f"nc_match_replace8: vals {list(vals.shape)} must be [{data.partitions}, 8]")
    if "dst_idx" in r.ops:
        idx = r.ops["dst_idx"]
        if (idx.partitions, idx.free_size) != (data.partitions, 8):
            raise ShapeError(f"nc_match_replace8: dst_idx {list(idx.shape)} must be [{data.partitions}, 8]")
        r.rule(idx.dtype.kind in "iu", "dst_idx", "dtype", dtype_name(idx.dtype), "an integer dtype",
               "nc_match_replace8 writes indices to dst_idx", relation="is not")


@_implements("nc_find_index8", semantics=_find_index8)
def _find_index8_rule(r: Rules) -> None:
    data, vals, dst = r.ops["data"], r.ops["vals"], r.ops["dst"]
    r.at_most("data", "free size", data.free_size, r.key("free"))
    for key, op in (("vals", vals), ("dst", dst)):
        if (op.partitions, op.free_size) != (data.partitions, 8):
            raise ShapeError(f"nc_find_index8: {key} {list(op.shape)} must be [{data.partitions}, 8]")
    r.rule(dst.dtype.kind in "iu", "dst", "dtype", dtype_name(dst.dtype), "an integer dtype",
           "nc_find_index8 writes indices", relation="is not")


def _scan(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    d0, d1 = _rows(ins["data0"]), _rows(ins["data1"]).reshape(_rows(ins["data0"]).shape)
    prev = np.broadcast_to(np.asarray(ins.get("initial", attrs["initial"]), np.float64).reshape(-1), len(d0)).copy()
    op0, op1, out = ALU_OPS[attrs["op0"]], ALU_OPS[attrs["op1"]], np.empty_like(d0)
    with np.errstate(all="ignore"):  # what a step computes (inf, nan) is the value, as an engine's would be
        for i in range(d0.shape[1]):
            v = op0(prev, d0[:, i]) if attrs["reverse0"] else op0(d0[:, i], prev)
            prev = op1(d1[:, i], v) if attrs["reverse1"] else op1(v, d1[:, i])
            out[:, i] = prev
    return {"dst": out.reshape(shapes["dst"])}


@_implements("tensor_tensor_scan", semantics=_scan)
def _scan_rule(r: Rules) -> None:
    r.same_layout("data0", "dst")
    r.same_layout("data1", "dst")
    _required_vector(r, "initial", r.ops["data0"].partitions)
    _not_both_psum(r, "data0", "data1")


def _affine_select(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    on_true = np.asarray(ins["on_true_tile"]).reshape(shapes["dst"])
    if attrs.get("expr") is not None:  # legacy: an nl.arange predicate, evaluated as written
        keep = np.broadcast_to(np.asarray(attrs["expr"]) != 0, shapes["dst"])
    else:
        value = _iota({}, {**attrs, "offset": attrs["offset"]}, {"dst": shapes["dst"]})["dst"]
        keep = ALU_OPS[attrs["cmp_op"]](value, 0.0) != 0
    return {"dst": np.where(keep, on_true, float(attrs["on_false_value"]))}


@_implements("affine_select", semantics=_affine_select)
def _affine_select_rule(r: Rules) -> None:
    r.same_layout("on_true_tile", "dst")
    if r.attrs.get("expr") is None:
        count = math.prod(n for _, n in r.attrs["pattern"]) if r.attrs["pattern"] else 0
        if count != r.ops["dst"].free_size:
            raise ShapeError(f"affine_select: pattern {r.attrs['pattern']} makes {count} values per partition, dst "
                             f"{list(r.ops['dst'].shape)} holds {r.ops['dst'].free_size}")


def _cumulative(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    src = _rows(ins["src"])
    op0, op1 = ALU_OPS[attrs["op0"]], ALU_OPS[attrs["op1"]]
    start = attrs["imm1"] if attrs["reduce_cmd"] == "load_reduce" else REDUCE_OPS.get(
        attrs["op1"], (None, 0.0))[1]  # subtract starts at 0, as add does
    reg, out = np.full(len(src), float(start)), np.empty_like(src)
    with np.errstate(all="ignore"):
        for i in range(src.shape[1]):
            v = op0(attrs["imm0"], src[:, i]) if attrs["reverse0"] else op0(src[:, i], attrs["imm0"])
            reg = op1(v, reg)
            out[:, i] = reg
    return {"dst": out.reshape(shapes["dst"])}


@_implements("tensor_scalar_cumulative", semantics=_cumulative)
def _cumulative_rule(r: Rules) -> None:
    r.same_layout("src", "dst")
    if r.attrs.get("reduce_cmd") == "load_reduce" and r.attrs.get("imm1") is None:
        raise NkiSimulationError("tensor_scalar_cumulative: reduce_cmd=load_reduce starts from imm1, which is not given")
    for key in ("src", "dst"):
        dt = r.ops[key].dtype
        r.rule(dt.itemsize <= 2 or dt == np.float32, key, "dtype", dtype_name(dt), "not int32/uint32",
               "tensor_scalar_cumulative: INT32/UINT32 are not supported (ISA limitation)", relation="is")


def _with_row_max(out: np.ndarray, shapes: Mapping[str, tuple[int, ...]]) -> dict:
    result = {"dst": out.reshape(shapes["dst"])}
    if "reduce_res" in shapes:
        result["reduce_res"] = _rows(out).max(axis=1).reshape(shapes["reduce_res"])
    return result


def _select_reduce(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    on_true = np.asarray(ins["on_true"])
    keep = np.asarray(ins["predicate"]).reshape(on_true.shape) != 0
    on_false = _per_partition(ins.get("on_false", attrs["on_false"]), on_true.ndim)
    return _with_row_max(np.where(~keep if attrs["reverse_pred"] else keep, on_true, on_false), shapes)


@_implements("select_reduce", semantics=_select_reduce)
def _select_reduce_rule(r: Rules) -> None:
    r.same_layout("on_true", "dst")
    r.same_layout("predicate", "dst")
    _required_vector(r, "on_false", r.ops["on_true"].partitions)
    _not_both_psum(r, "on_true", "predicate")
    pred, on_true = r.ops["predicate"].dtype, r.ops["on_true"].dtype
    r.rule(pred.kind in "iu" and pred.itemsize <= 2, "predicate", "dtype", dtype_name(pred), "int8, uint8, int16 or "
           "uint16", "select_reduce takes an 8- or 16-bit integer predicate", relation="is not")
    r.rule(not (on_true.kind in "iu" and on_true.itemsize == 4), "on_true", "dtype", dtype_name(on_true),
           "not int32/uint32", "select_reduce: on_true may not be int32 or uint32", relation="is")
    if "reduce_res" in r.ops:
        r.vector("reduce_res", r.ops["on_true"].partitions)


def _range_select(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    on_true = _rows(ins["on_true_tile"])
    index = np.arange(on_true.shape[1], dtype=np.float64)[None, :] + float(attrs["range_start"])
    keep = (ALU_OPS[attrs["comp_op0"]](index, _rows(ins["bound0"])) != 0) & \
        (ALU_OPS[attrs["comp_op1"]](index, _rows(ins["bound1"])) != 0)
    return _with_row_max(np.where(keep, on_true, float(attrs["on_false_value"])), shapes)


@_implements("range_select", semantics=_range_select)
def _range_select_rule(r: Rules) -> None:
    r.same_layout("on_true_tile", "dst")
    for key in ("bound0", "bound1"):
        r.vector(key, r.ops["on_true_tile"].partitions)
        r.rule(r.ops[key].dtype == np.float32, key, "dtype", dtype_name(r.ops[key].dtype), "float32",
               "range_select bounds are fp32", relation="is not")
    if "reduce_res" in r.ops:
        r.vector("reduce_res", r.ops["on_true_tile"].partitions)
    fill = float(r.attrs.get("on_false_value", D.FP32_MIN))
    r.rule(fill == D.FP32_MIN, "on_false_value", "", fill, "FP32_MIN", "range_select: on_false_value must be FP32_MIN "
           "(nki.isa.range_select)")


def _dropout(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    data = np.asarray(ins["data"])
    prob = _per_partition(ins.get("prob", attrs["prob"]), data.ndim)
    return {"dst": np.where(np.asarray(ins["uniform"]).reshape(data.shape) < prob, 0.0, data).reshape(shapes["dst"])}


@_implements("dropout", semantics=_dropout)
def _dropout_rule(r: Rules) -> None:
    r.same_layout("data", "dst")
    _required_vector(r, "prob", r.ops["data"].partitions)
    p = r.attrs.get("prob")
    if p is not None and not 0.0 <= float(p) <= 1.0:
        raise NkiSimulationError(f"dropout: prob {p!r} is not a probability in [0, 1]")
    data, dst = r.ops["data"].dtype, r.ops["dst"].dtype
    if data.kind in "iu":
        r.rule(dst == data, "dst", "dtype", dtype_name(dst), dtype_name(data),
               "dropout of integer data keeps its dtype", relation="is not")


def _rng(ins: Mapping[str, Any], attrs: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict:
    bits = np.asarray(ins["uniform"], np.float64)  # the session's draws in [0, 1): scaled to the dtype's range
    return {"dst": np.floor(bits * ins["levels"]) + ins["low"]}


@_implements("rng", semantics=_rng)
def _rng_rule(r: Rules) -> None:
    dt = r.ops["dst"].dtype
    r.rule(dt.kind in "iu", "dst", "dtype", dtype_name(dt), "an integer dtype", "rng writes random integers",
           relation="is not")
    if r.engine == "gpsimd" and not r.spec.get("features.neuroncore_v3", False):
        raise NkiLimitError("rng", "engine", "vector", "gpsimd", key="features.neuroncore_v3", target=r.spec.name,
                            message=f"rng: the GpSimd engine's generator needs NeuronCore-v3 (features.neuroncore_v3 "
                                    f"is false in {r.spec.name}.yaml); use engine=nisa.vector_engine")
