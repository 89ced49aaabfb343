"""The fake ``nki.isa`` namespaces the simulator installs (the ``nl`` one is :mod:`.nki_namespaces`'):
:class:`IsaCommon` (the enums both dialects' ``nisa`` share), :class:`Isa` (current ``nki.isa``: every
instruction writes ``dst``) and :class:`LegacyIsa` (``neuronxcc.nki.isa``: instructions return tiles), each over
a :class:`session.Session`. A namespace's public attributes are exactly its NKI names (:func:`members`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import isa
from .isa import ACTIVATIONS, ALU_OPS, PSUM, REDUCE_OPS, SBUF
from .nki_values import (
    Result,
    Token,
    as_tensor,
)
from .session import Session


class Namespace:
    """An enum-like group of tokens (``nisa.engine.vector``) or constants (``nl.tile_size.pmax``)."""

    def __init__(self, kind: str, members: Mapping[str, Any]):
        self._kind = kind
        self.__dict__.update(members)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise NotImplementedError(f"{self._kind}.{name} is not supported by the axon_eg NKI simulator")


def enum_namespace(kind: str, *names: str) -> Namespace:
    return Namespace(kind, {n: Token(kind, n) for n in names})


def unsupported(api: str, **given: Any) -> None:
    """Arguments the simulator does not model must keep their defaults (None, (), False or a 'none' token)."""
    for key, value in given.items():
        default = value is None or value is False or (isinstance(value, tuple) and not value)
        if not default and getattr(value, "name", None) not in ("none", "unknown"):
            shown = f"<index expression {list(value.shape)}>" if isinstance(value, np.ndarray) else repr(value)
            raise NotImplementedError(f"{api}: {key}={shown} is not supported by the axon_eg NKI simulator")


def op_of(op: Any, vocabulary: Mapping[str, Any], instruction: str, what: str = "op") -> str | None:
    return None if op is None else isa.op_name(op, vocabulary, instruction, what)


def cmd_of(cmd: Any) -> str:
    return getattr(cmd, "name", cmd) or "idle"


def free_size(shape: tuple[int, ...]) -> int:
    return math.prod(shape[1:])


class IsaCommon:
    """What both dialects' ``nisa`` share: the enums, ``get_nc_version``, ``NkiValidationError``."""

    NkiValidationError = isa.NkiSimulationError  # what a kernel may catch: the simulator's refusals

    def __init__(self, session: Session):
        self._s = session
        self.engine = enum_namespace("nisa.engine", "tensor", "vector", "scalar", "gpsimd", "dma", "sync", "unknown")
        self.nc_version = enum_namespace("nisa.nc_version", "gen2", "gen3", "gen4")
        self.reduce_cmd = enum_namespace("nisa.reduce_cmd", *isa.REDUCE_CMDS, "load_reduce")
        self.dge_mode = enum_namespace("nisa.dge_mode", "unknown", "swdge", "hwdge", "none")
        self.oob_mode = enum_namespace("nisa.oob_mode", "error", "skip")
        self.matmul_perf_mode = enum_namespace("nisa.matmul_perf_mode", "none", "double_row")
        for e in ("tensor", "vector", "scalar", "gpsimd", "unknown"):
            setattr(self, f"{e}_engine", getattr(self.engine, e))

    def get_nc_version(self) -> Token:
        known = {"trn1": self.nc_version.gen2, "trn2": self.nc_version.gen3}
        if self._s.spec.name not in known:
            raise NotImplementedError(f"nisa.get_nc_version: no NeuronCore version known for {self._s.spec.name}")
        return known[self._s.spec.name]


PARTITION_OPS = {o: None for o in isa.get("tensor_partition_reduce").declaration.attrs["op"].values}
COMPARE_OPS = {o: None for o in isa.get("affine_select").declaration.attrs["cmp_op"].values}
CUMULATIVE_OPS = {o: None for o in isa.ALU_OPS}  # the declaration's values say which each operand takes


def _select_attrs(reduce_cmd: Any, reduce_op: Any, **more: Any) -> dict[str, Any]:
    """The reduce attributes of select_reduce / range_select (given ones only: the declaration has the defaults)."""
    out = dict(more)
    if reduce_cmd is not None:
        out["reduce_cmd"] = cmd_of(reduce_cmd)
    if reduce_op is not None:
        out["reduce_op"] = isa.op_name(reduce_op, {"maximum": None}, "select_reduce/range_select", "reduce_op")
    return out


def _range_attrs(comp_op0: Any, comp_op1: Any, reduce_cmd: Any, reduce_op: Any, range_start: Any,
                 on_false_value: Any) -> dict[str, Any]:
    return _select_attrs(reduce_cmd, reduce_op, comp_op0=op_of(comp_op0, COMPARE_OPS, "range_select", "comp_op0"),
                         comp_op1=op_of(comp_op1, COMPARE_OPS, "range_select", "comp_op1"), range_start=float(range_start),
                         **({} if on_false_value is None else {"on_false_value": float(on_false_value)}))


class Isa(IsaCommon):
    """``nki.isa``, destination passing: every instruction writes ``dst`` and returns None."""

    def nc_matmul(self, dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
                  accumulate=None, tile_position=(), tile_size=(), perf_mode=None, name=None):
        unsupported("nisa.nc_matmul", tile_position=tile_position, tile_size=tile_size, perf_mode=perf_mode)
        self._s.run("nc_matmul", {"dst": dst, "stationary": stationary, "moving": moving}, {"accumulate": accumulate})

    def nc_transpose(self, dst, data, engine=None, name=None):
        self._s.run("nc_transpose", {"dst": dst, "data": data}, {}, engine)

    def activation(self, dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=None, name=None):
        self._s.run("activation", {"dst": dst, "data": data, "bias": bias, "scale": scale, "reduce_res": reduce_res},
                    {"op": op_of(op, ACTIVATIONS, "activation"),
                     "reduce_op": op_of(reduce_op, REDUCE_OPS, "activation", "reduce_op"), "reduce_cmd": cmd_of(reduce_cmd)})

    def activation_reduce(self, dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
        self.activation(dst, op, data, bias, scale, reduce_op, reduce_res, "reset_reduce")

    def tensor_tensor(self, dst, data1, data2, op, engine=None, name=None):
        self._s.run("tensor_tensor", {"dst": dst, "data1": data1, "data2": data2},
                    {"op": op_of(op, ALU_OPS, "tensor_tensor")}, engine)

    def tensor_scalar(self, dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, engine=None,
                      name=None):
        self._s.run("tensor_scalar", {"dst": dst, "data": data, "operand0": operand0, "operand1": operand1},
                    {"op0": op_of(op0, ALU_OPS, "tensor_scalar", "op0"), "op1": op_of(op1, ALU_OPS, "tensor_scalar", "op1"),
                     "reverse0": bool(reverse0), "reverse1": bool(reverse1)}, engine)

    def tensor_reduce(self, dst, op, data, axis, negate=False, keepdims=False, name=None):
        self._s.run("tensor_reduce", {"dst": dst, "data": data},
                    {"op": op_of(op, REDUCE_OPS, "tensor_reduce"), "axis": axis, "negate": bool(negate),
                     "keepdims": bool(keepdims)})

    def tensor_copy(self, dst, src, engine=None, name=None):
        self._s.run("tensor_copy", {"dst": dst, "src": src}, {}, engine)

    def memset(self, dst, value, engine=None, name=None):
        self._s.run("memset", {"dst": dst}, {"value": float(value)}, engine)

    def iota(self, dst, pattern, offset=0, channel_multiplier=0, name=None):
        self._s.run("iota", {"dst": dst}, {"pattern": tuple(tuple(int(v) for v in p) for p in pattern), "offset": int(offset),
                                           "channel_multiplier": int(channel_multiplier)})

    def dma_copy(self, dst, src, priority=None, oob_mode=None, dge_mode=None, engine=None, name=None):
        self._s.run("dma_copy", {"dst": dst, "src": src}, {})

    def dma_transpose(self, dst, src, axes=None, priority=None, dge_mode=None, oob_mode=None, name=None):
        self._s.run("dma_transpose", {"dst": dst, "src": src}, {"axes": None if axes is None else tuple(axes)})

    def reciprocal(self, dst, data, name=None):
        self._s.run("reciprocal", {"dst": dst, "data": data}, {})

    def scalar_tensor_tensor(self, dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, name=None):
        self._s.run("scalar_tensor_tensor", {"dst": dst, "data": data, "operand0": operand0, "operand1": operand1},
                    {"op0": op_of(op0, ALU_OPS, "scalar_tensor_tensor", "op0"),
                     "op1": op_of(op1, ALU_OPS, "scalar_tensor_tensor", "op1"), "reverse0": bool(reverse0),
                     "reverse1": bool(reverse1)})

    def tensor_scalar_reduce(self, dst, data, op0, operand0, reduce_op, reduce_res, reverse0=False, reduce_cmd=None,
                             reduce_init=None, name=None):
        unsupported("nisa.tensor_scalar_reduce", reverse0=reverse0, reduce_cmd=reduce_cmd, reduce_init=reduce_init)
        self._s.run("tensor_scalar_reduce", {"dst": dst, "data": data, "operand0": operand0, "reduce_res": reduce_res},
                    {"op0": op_of(op0, ALU_OPS, "tensor_scalar_reduce", "op0"),
                     "reduce_op": op_of(reduce_op, REDUCE_OPS, "tensor_scalar_reduce", "reduce_op")})

    def tensor_copy_predicated(self, dst, src, predicate, reverse_pred=False, name=None):
        self._s.run("tensor_copy_predicated", {"dst": dst, "src": src, "predicate": predicate},
                    {"reverse_pred": bool(reverse_pred)})

    def tensor_partition_reduce(self, dst, op, data, name=None):
        self._s.run("tensor_partition_reduce", {"dst": dst, "data": data},
                    {"op": op_of(op, PARTITION_OPS, "tensor_partition_reduce")})

    def bn_stats(self, dst, data, name=None):
        self._s.run("bn_stats", {"dst": dst, "data": data}, {})

    def bn_aggr(self, dst, data, name=None):
        self._s.run("bn_aggr", {"dst": dst, "data": data}, {})

    def max8(self, dst, src, name=None):
        self._s.run("max8", {"dst": dst, "src": src}, {})

    def nc_find_index8(self, dst, data, vals, name=None):
        self._s.run("nc_find_index8", {"dst": dst, "data": data, "vals": vals}, {})

    def tensor_tensor_scan(self, dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, name=None):
        self._s.run("tensor_tensor_scan", {"dst": dst, "data0": data0, "data1": data1, "initial": initial},
                    {"op0": op_of(op0, ALU_OPS, "tensor_tensor_scan", "op0"),
                     "op1": op_of(op1, ALU_OPS, "tensor_tensor_scan", "op1"), "reverse0": bool(reverse0),
                     "reverse1": bool(reverse1)})

    def select_reduce(self, dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=None, reduce_op=None,
                      reverse_pred=False, name=None):
        self._s.run("select_reduce", {"dst": dst, "predicate": predicate, "on_true": on_true, "on_false": on_false,
                                      "reduce_res": reduce_res},
                    _select_attrs(reduce_cmd, reduce_op, reverse_pred=bool(reverse_pred)))

    def range_select(self, dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=None, reduce_res=None,
                     reduce_op=None, range_start=0.0, on_false_value=None, name=None):
        self._s.run("range_select", {"dst": dst, "on_true_tile": on_true_tile, "bound0": bound0, "bound1": bound1,
                                     "reduce_res": reduce_res},
                    _range_attrs(comp_op0, comp_op1, reduce_cmd, reduce_op, range_start, on_false_value))

    def dropout(self, dst, data, prob, name=None):
        self._s.run("dropout", {"dst": dst, "data": data, "prob": prob}, {})

    def rng(self, dst, engine=None, name=None):
        self._s.run("rng", {"dst": dst}, {}, engine)

    def set_rng_seed(self, src_seeds, name=None):
        self._s.seed(src_seeds, "nisa.set_rng_seed")

    def nc_match_replace8(self, dst, data, vals, imm, dst_idx=None, name=None):
        self._s.run("nc_match_replace8", {"dst": dst, "data": data, "vals": vals, "dst_idx": dst_idx}, {"imm": float(imm)})

    def tensor_scalar_cumulative(self, dst, src, op0, op1, imm0, imm1=None, reduce_cmd=None, reverse0=False, name=None):
        self._s.run("tensor_scalar_cumulative", {"dst": dst, "src": src},
                    {"op0": op_of(op0, CUMULATIVE_OPS, "tensor_scalar_cumulative", "op0"),
                     "op1": op_of(op1, CUMULATIVE_OPS, "tensor_scalar_cumulative", "op1"), "imm0": float(imm0),
                     "imm1": None if imm1 is None else float(imm1), "reverse0": bool(reverse0),
                     "reduce_cmd": "reset_reduce" if reduce_cmd is None else cmd_of(reduce_cmd)})

    def affine_select(self, dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op=None, offset=0, name=None):
        self._s.run("affine_select", {"dst": dst, "on_true_tile": on_true_tile},
                    {"pattern": tuple(tuple(int(v) for v in p) for p in pattern), "offset": int(offset),
                     "channel_multiplier": int(channel_multiplier), "on_false_value": float(on_false_value),
                     **({} if cmp_op is None else {"cmp_op": op_of(cmp_op, COMPARE_OPS, "affine_select", "cmp_op")})})


class LegacyIsa(IsaCommon):
    """``neuronxcc.nki.isa``: instructions return tiles (:class:`nki_values.Result`); ``dma_copy`` writes ``dst``."""

    def nc_matmul(self, stationary, moving, *, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
                  mask=None, **kwargs):
        unsupported("nisa.nc_matmul", mask=mask, **kwargs)
        st, mv = as_tensor(stationary), as_tensor(moving)
        return self._s.prepare("nc_matmul", {"stationary": st, "moving": mv}, {"accumulate": False}, None,
                               (free_size(st.shape), *mv.shape[1:]), np.float32, PSUM)

    def nc_transpose(self, data, *, engine=None, dtype=None, mask=None):
        unsupported("nisa.nc_transpose", mask=mask)
        data = as_tensor(data)
        engine = getattr(engine, "name", engine)
        if engine in (None, "unknown"):
            small = max(data.shape[0], free_size(data.shape)) <= self._s.spec.value("limits.transpose.vector_engine_max")
            engine = isa.VECTOR if small or data.buffer.space == PSUM else isa.TENSOR
        return self._s.prepare("nc_transpose", {"data": data}, {}, engine, (free_size(data.shape), data.shape[0]),
                               dtype or data.dtype, PSUM if engine == isa.TENSOR else SBUF)

    def activation(self, op, data, *, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=None, mask=None,
                   dtype=None):
        with self._s.masked(mask, "nisa.activation"):
            return self._activation(op, data, bias, scale, reduce_op, reduce_res, reduce_cmd, dtype)

    def _activation(self, op, data, bias, scale, reduce_op, reduce_res, reduce_cmd, dtype):
        data = as_tensor(data)
        return self._s.prepare("activation", {"data": data, "bias": bias, "scale": scale, "reduce_res": reduce_res},
                               {"op": op_of(op, ACTIVATIONS, "activation"),
                                "reduce_op": op_of(reduce_op, REDUCE_OPS, "activation", "reduce_op"),
                                "reduce_cmd": cmd_of(reduce_cmd)}, None, data.shape, dtype or data.dtype, SBUF)

    def activation_reduce(self, op, data, *, reduce_op, reduce_res, bias=None, scale=1.0, mask=None, dtype=None):
        return self.activation(op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
                               reduce_cmd="reset_reduce", mask=mask, dtype=dtype)

    def tensor_tensor(self, data1, data2, op, *, dtype=None, mask=None, engine=None):
        d1, d2 = as_tensor(data1), as_tensor(data2)
        dtype = dtype or (d1.dtype if d1.dtype == d2.dtype else np.float32)
        with self._s.masked(mask, "nisa.tensor_tensor"):
            return self._s.prepare("tensor_tensor", {"data1": d1, "data2": d2}, {"op": op_of(op, ALU_OPS, "tensor_tensor")},
                                   engine, d1.shape, dtype, SBUF)

    def tensor_scalar(self, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, *, dtype=None,
                      mask=None, engine=None):
        data = as_tensor(data)
        with self._s.masked(mask, "nisa.tensor_scalar"):
            return self._s.prepare("tensor_scalar", {"data": data, "operand0": operand0, "operand1": operand1},
                                   {"op0": op_of(op0, ALU_OPS, "tensor_scalar", "op0"),
                                    "op1": op_of(op1, ALU_OPS, "tensor_scalar", "op1"), "reverse0": bool(reverse0),
                                    "reverse1": bool(reverse1)}, engine, data.shape, dtype or data.dtype, SBUF)

    def tensor_reduce(self, op, data, axis, *, dtype=None, negate=False, keepdims=False, mask=None):
        data = as_tensor(data)
        axes = isa.reduce_axes(axis, data.ndim)
        shape = tuple(1 if i in axes else d for i, d in enumerate(data.shape) if keepdims or i not in axes)
        with self._s.masked(mask, "nisa.tensor_reduce"):  # over data: left-out elements do not count
            return self._s.prepare("tensor_reduce", {"data": data}, {"op": op_of(op, REDUCE_OPS, "tensor_reduce"),
                                   "axis": axis, "negate": bool(negate), "keepdims": bool(keepdims)}, None, shape,
                                   dtype or data.dtype, SBUF)

    def tensor_copy(self, src, *, mask=None, dtype=None, engine=None):
        src = as_tensor(src)
        with self._s.masked(mask, "nisa.tensor_copy"):
            return self._s.prepare("tensor_copy", {"src": src}, {}, engine, src.shape, dtype or src.dtype, SBUF)

    def memset(self, shape, value, dtype, *, mask=None, engine=None):
        with self._s.masked(mask, "nisa.memset"):
            return self._s.prepare("memset", {}, {"value": float(value)}, engine, tuple(shape), dtype, SBUF)

    def iota(self, expr, dtype, *, mask=None):
        expr = np.asarray(expr)
        with self._s.masked(mask, "nisa.iota"):
            return self._s.prepare("iota", {}, {"expr": expr}, None, expr.shape, dtype, SBUF)

    def dma_copy(self, *, dst, src, mask=None, dst_rmw_op=None, oob_mode=None, dge_mode=None):
        unsupported("nisa.dma_copy", dst_rmw_op=dst_rmw_op)
        with self._s.masked(mask, "nisa.dma_copy"):
            self._s.run("dma_copy", {"dst": dst, "src": src}, {})

    def dma_transpose(self, src, *, axes=None, mask=None, dtype=None, dge_mode=None):
        unsupported("nisa.dma_transpose", mask=mask)
        src = as_tensor(src)
        return self._s.prepare("dma_transpose", {"src": src}, {"axes": None if axes is None else tuple(axes)}, None,
                               src.shape[::-1], dtype or src.dtype, SBUF)

    def reciprocal(self, data, *, dtype=None, mask=None):
        data = as_tensor(data)
        with self._s.masked(mask, "nisa.reciprocal"):
            return self._s.prepare("reciprocal", {"data": data}, {}, None, data.shape, dtype or data.dtype, SBUF)

    def scalar_tensor_tensor(self, *, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, dtype=None,
                             mask=None):
        data = as_tensor(data)
        with self._s.masked(mask, "nisa.scalar_tensor_tensor"):
            return self._s.prepare("scalar_tensor_tensor", {"data": data, "operand0": operand0, "operand1": operand1},
                                   {"op0": op_of(op0, ALU_OPS, "scalar_tensor_tensor", "op0"),
                                    "op1": op_of(op1, ALU_OPS, "scalar_tensor_tensor", "op1"), "reverse0": bool(reverse0),
                                    "reverse1": bool(reverse1)}, None, data.shape, dtype or data.dtype, SBUF)

    def tensor_scalar_reduce(self, *, data, op0, operand0, reduce_op, reduce_res, reverse0=False, dtype=None, mask=None):
        unsupported("nisa.tensor_scalar_reduce", mask=mask, reverse0=reverse0)
        data = as_tensor(data)
        return self._s.prepare("tensor_scalar_reduce", {"data": data, "operand0": operand0, "reduce_res": reduce_res},
                               {"op0": op_of(op0, ALU_OPS, "tensor_scalar_reduce", "op0"),
                                "reduce_op": op_of(reduce_op, REDUCE_OPS, "tensor_scalar_reduce", "reduce_op")},
                               None, data.shape, dtype or data.dtype, SBUF)

    def tensor_copy_predicated(self, *, src, dst, predicate, reverse_pred=False, mask=None, dtype=None):
        unsupported("nisa.tensor_copy_predicated", dtype=dtype)
        with self._s.masked(mask, "nisa.tensor_copy_predicated"):
            self._s.run("tensor_copy_predicated", {"dst": dst, "src": src, "predicate": predicate},
                        {"reverse_pred": bool(reverse_pred)})

    def tensor_partition_reduce(self, op, data, *, mask=None, dtype=None):
        unsupported("nisa.tensor_partition_reduce", mask=mask)
        data = as_tensor(data)
        return self._s.prepare("tensor_partition_reduce", {"data": data},
                               {"op": op_of(op, PARTITION_OPS, "tensor_partition_reduce")}, None, (1, *data.shape[1:]),
                               dtype or data.dtype, SBUF)

    def _fixed(self, name: str, width: int, operand: str, args: tuple, kw: dict, mask: Any, dtype: Any) -> Result:
        """An instruction with a fixed number of results per partition (``bn_stats``: 6, ``max8``: 8 ...)."""
        unsupported(f"nisa.{name}", mask=mask)
        values = dict(zip((operand, "vals") if name == "nc_find_index8" else (operand,), args), **kw)
        first = as_tensor(values[operand])
        return self._s.prepare(name, values, {}, None, (first.shape[0], width),
                               dtype or (np.uint32 if name == "nc_find_index8" else np.float32 if name.startswith("bn_")
                                         else first.dtype), SBUF)

    def bn_stats(self, *args, mask=None, dtype=None, **kw):
        return self._fixed("bn_stats", 6, "data", args, kw, mask, dtype)

    def bn_aggr(self, *args, mask=None, dtype=None, **kw):
        return self._fixed("bn_aggr", 2, "data", args, kw, mask, dtype)

    def max8(self, *args, mask=None, dtype=None, **kw):
        return self._fixed("max8", 8, "src", args, kw, mask, dtype)

    def nc_find_index8(self, *args, mask=None, dtype=None, **kw):
        return self._fixed("nc_find_index8", 8, "data", args, kw, mask, dtype)

    def select_reduce(self, *, dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=None, reduce_op=None,
                      reverse_pred=False, mask=None, dtype=None):
        unsupported("nisa.select_reduce", mask=mask, dtype=dtype)
        self._s.run("select_reduce", {"dst": dst, "predicate": predicate, "on_true": on_true, "on_false": on_false,
                                      "reduce_res": reduce_res},
                    _select_attrs(reduce_cmd, reduce_op, reverse_pred=bool(reverse_pred)))

    def range_select(self, *, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=None, reduce_res=None,
                     reduce_op=None, range_start=0.0, on_false_value=None, mask=None, dtype=None):
        unsupported("nisa.range_select", mask=mask)
        on_true = as_tensor(on_true_tile)
        return self._s.prepare("range_select", {"on_true_tile": on_true, "bound0": bound0, "bound1": bound1,
                                                "reduce_res": reduce_res},
                               _range_attrs(comp_op0, comp_op1, reduce_cmd, reduce_op, range_start, on_false_value), None,
                               on_true.shape, dtype or on_true.dtype, SBUF)

    def dropout(self, data, prob, *, mask=None, dtype=None):
        unsupported("nisa.dropout", mask=mask)
        data = as_tensor(data)
        return self._s.prepare("dropout", {"data": data, "prob": prob}, {}, None, data.shape, dtype or data.dtype, SBUF)

    def nc_match_replace8(self, *, data, vals, imm, dst_idx=None, mask=None, dtype=None):
        unsupported("nisa.nc_match_replace8", mask=mask)
        data = as_tensor(data)
        return self._s.prepare("nc_match_replace8", {"data": data, "vals": vals, "dst_idx": dst_idx}, {"imm": float(imm)}, None,
                               data.shape, dtype or data.dtype, SBUF)

    def tensor_tensor_scan(self, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, *, dtype=None, mask=None):
        unsupported("nisa.tensor_tensor_scan", mask=mask)
        d0 = as_tensor(data0)
        return self._s.prepare("tensor_tensor_scan", {"data0": d0, "data1": data1, "initial": initial},
                               {"op0": op_of(op0, ALU_OPS, "tensor_tensor_scan", "op0"),
                                "op1": op_of(op1, ALU_OPS, "tensor_tensor_scan", "op1"), "reverse0": bool(reverse0),
                                "reverse1": bool(reverse1)}, None, d0.shape, dtype or d0.dtype, SBUF)

    def affine_select(self, pred, on_true_tile, on_false_value, *, mask=None, dtype=None):
        unsupported("nisa.affine_select", mask=mask)
        on_true = as_tensor(on_true_tile)
        return self._s.prepare("affine_select", {"on_true_tile": on_true},
                               {"expr": np.asarray(pred), "on_false_value": float(on_false_value)}, None, on_true.shape,
                               dtype or on_true.dtype, SBUF)
