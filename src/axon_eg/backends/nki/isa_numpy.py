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

from .nki_checks import DTYPES, NkiLimitError, NkiSimulationError, Rules, dtype_name

Semantics = Callable[[Mapping[str, Any], Mapping[str, Any], Mapping[str, tuple[int, ...]]], dict[str, np.ndarray]]

# ------------------------------------------------------------------ the declared vocabularies in NumPy
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
    if r.ops["data1"].space == "psum" and r.ops["data2"].space == "psum":
        raise NkiLimitError("tensor_tensor", "data2", "sbuf", "psum", message="tensor_tensor: data1 and data2 are both in "
                            "PSUM; at most one input may be (nki.isa.tensor_tensor docs)")


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
