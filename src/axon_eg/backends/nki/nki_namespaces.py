"""The fake ``nki.language`` / ``nki.isa`` (and legacy ``neuronxcc.nki``) namespaces the simulator installs:
NKI tokens (dtypes, buffers, ops, enums), index grids, and the instruction functions of each dialect."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from . import isa
from .isa import HBM, PSUM, SBUF
from .nki_values import NkiTensor, _ParDim, _Result, _tensor, loop_range, plain

if TYPE_CHECKING:  # annotations only: the session lives in simulator.py, which imports this module
    from .simulator import _Session


# ------------------------------------------------------------------------------------------- NKI tokens
class _Token:
    def __init__(self, kind: str, name: str):
        self.kind, self.name = kind, name

    def __repr__(self) -> str:
        return f"{self.kind}.{self.name}"


class _BufferKind(_Token):
    """``nl.sbuf``, ``nl.psum``, ``nl.hbm`` / ``nl.shared_hbm`` / ``nl.private_hbm``: equal when the memory is."""

    def __init__(self, name: str, space: str):
        super().__init__("nl", name)
        self.space = space

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _BufferKind) and other.space == self.space

    def __hash__(self) -> int:
        return hash(self.space)


_BUFFER_KINDS = {HBM: _BufferKind("hbm", HBM), SBUF: _BufferKind("sbuf", SBUF), PSUM: _BufferKind("psum", PSUM)}


class _Namespace:
    """An enum-like group of tokens (``nisa.engine.vector``) or constants (``nl.tile_size.pmax``)."""

    def __init__(self, kind: str, members: Mapping[str, Any]):
        self._kind = kind
        self.__dict__.update(members)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise NotImplementedError(f"{self._kind}.{name} is not supported by the axon_eg NKI simulator")


def _enum(kind: str, *names: str) -> _Namespace:
    return _Namespace(kind, {n: _Token(kind, n) for n in names})


class _Grid(tuple):
    """``nl.mgrid[0:128, 0:512]``: open index arrays, also as ``.p`` (partition) and ``.x`` (free)."""

    p = property(lambda self: self[0])
    x = property(lambda self: self[1])


class _MGrid:
    def __getitem__(self, index: Any) -> _Grid:
        return _Grid(np.ogrid[index] if isinstance(index, tuple) else (np.ogrid[index],))


def _unsupported(api: str, **given: Any) -> None:
    """Arguments the simulator does not model must keep their defaults (None, (), False or a 'none' token)."""
    for key, value in given.items():
        default = value is None or value is False or (isinstance(value, tuple) and not value)
        if not default and getattr(value, "name", None) not in ("none", "unknown"):
            shown = f"<index expression {list(value.shape)}>" if isinstance(value, np.ndarray) else repr(value)
            raise NotImplementedError(f"{api}: {key}={shown} is not supported by the axon_eg NKI simulator")


def _op(op: Any, vocabulary: Mapping[str, Any], instruction: str, what: str = "op") -> str | None:
    return None if op is None else isa.op_name(op, vocabulary, instruction, what)


def _cmd(cmd: Any) -> str:
    return getattr(cmd, "name", cmd) or "idle"


def _free(shape: tuple[int, ...]) -> int:
    return math.prod(shape[1:])


def _language(s: _Session) -> dict[str, Any]:
    """``nki.language`` / ``neuronxcc.nki.language``: allocation, load/store, indexing, dtypes, op tokens."""

    def space(buffer: Any) -> str:
        if buffer is None:
            return SBUF
        if not isinstance(buffer, _BufferKind):
            raise NotImplementedError(f"buffer={buffer!r} is not supported; use nl.sbuf, nl.psum or nl.shared_hbm")
        return buffer.space

    def ndarray(shape: Any, dtype: Any, buffer: Any = None, name: str | None = None, **kw: Any) -> NkiTensor:
        _unsupported("nl.ndarray", **kw)
        return s.allocate(shape, dtype, space(buffer), name)

    def filled(value: float) -> Callable[..., NkiTensor]:
        def make(shape: Any, dtype: Any, buffer: Any = None, name: str | None = None, **kw: Any) -> NkiTensor:
            t = ndarray(shape, dtype, buffer, name, **kw)
            if value == 0 and t._buf.space == PSUM:  # an empty accumulation bank: the compiler emits no memset,
                s.charge(t._buf, "nl.zeros")  # the first matmul into it overwrites (NKI docs)
                t._buf.data[:], t._buf.written[:] = 0, True
            else:
                s.run("memset", {"dst": t}, {"value": value})
            return t
        return make

    def load(src: Any, *, mask: Any = None, dtype: Any = None, **kw: Any) -> _Result:
        _unsupported("nl.load", **kw)
        src = _tensor(src)
        with s.masked(mask, "nl.load"):
            return s.prepare("load", {"src": src}, {}, None, src.shape, dtype or src.dtype, SBUF)

    def store(dst: Any, value: Any, *, mask: Any = None, **kw: Any) -> None:
        _unsupported("nl.store", **kw)
        with s.masked(mask, "nl.store"):
            s.run("store", {"dst": dst, "src": value}, {})

    class Op(_Token):
        """``nl.add``, ``nl.exp`` ...: what instructions take as ``op``; ``nl.copy(x, dtype)`` also copies."""

        def __init__(self, name: str):
            super().__init__("nl", name)
            self.nki_op = name

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            if self.name == "copy":
                return copy(*args, **kwargs)
            return elementwise(self, *args, **kwargs)

    def copy(x: Any = None, dtype: Any = None, *, src: Any = None, mask: Any = None, **kw: Any) -> _Result:
        _unsupported("nl.copy", **kw)
        x = _tensor(x if x is not None else src)
        with s.masked(mask, "nl.copy"):
            return s.prepare("tensor_copy", {"src": x}, {}, None, x.shape, dtype or x.dtype, SBUF)

    # The high-level tile functions (``nl.exp(x)``, ``nl.add(x, y)``, ``nl.sum(x, axis=1)``, ``nl.matmul``,
    # ``nl.transpose`` ...): each is the instruction the NKI compiler would pick for it, run through the same
    # rules and trace as a kernel calling that instruction itself.
    legacy = _legacy_isa(s)

    def is_tile(v: Any) -> bool:
        return isinstance(v, NkiTensor | _Result)

    def elementwise(op: Op, *args: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> Any:
        with s.masked(mask, f"nl.{op.name}"):
            return _elementwise(op, *args, dtype=dtype, **kw)

    def _elementwise(op: Op, *args: Any, dtype: Any = None, **kw: Any) -> Any:
        name = op.name
        if name in isa.ALU_OPS:
            x, y = _two(name, args, kw)
            if is_tile(x) and is_tile(y):
                xs, ys = tuple(x.shape), tuple(y.shape)
                if xs != ys and len(ys) == 2 and ys == (xs[0], 1):  # a [P, 1] column: one scalar per partition
                    return legacy["tensor_scalar"](x, op, y, dtype=dtype)
                if xs != ys and len(xs) == 2 and xs == (ys[0], 1):
                    return legacy["tensor_scalar"](y, op, x, reverse0=True, dtype=dtype)
                return legacy["tensor_tensor"](x, y, op, dtype=dtype)
            if is_tile(x):
                return legacy["tensor_scalar"](x, op, float(y), dtype=dtype)
            if is_tile(y):
                return legacy["tensor_scalar"](y, op, float(x), reverse0=True, dtype=dtype)
            return float(isa.ALU_OPS[name](x, y))
        x = args[0] if args else kw.pop("x")
        if kw:
            raise TypeError(f"nl.{name}() got unexpected keyword arguments {sorted(kw)}")
        return legacy["activation"](op, x, dtype=dtype)

    def _two(name: str, args: tuple, kw: dict) -> tuple[Any, Any]:
        values = list(args) + [kw.pop(k) for k in ("x", "y") if k in kw]
        if len(values) != 2 or kw:
            raise TypeError(f"nl.{name}(x, y, dtype=None) takes two operands, got {len(values)}"
                            + (f" and {sorted(kw)}" if kw else ""))
        return values[0], values[1]

    def negative(x: Any, dtype: Any = None, *, mask: Any = None) -> _Result:
        return legacy["tensor_scalar"](x, "multiply", -1.0, dtype=dtype, mask=mask)

    def reduction(name: str, op: str) -> Callable[..., _Result]:
        def reduce(x: Any, axis: Any, dtype: Any = None, keepdims: bool = False, *, mask: Any = None) -> _Result:
            if name == "mean" and mask is not None:
                m = np.broadcast_to(np.asarray(mask), _tensor(x).shape)
                axes = isa.reduce_axes(axis, m.ndim)
                if (m.any(axis=axes) != m.all(axis=axes)).any():
                    raise NotImplementedError("nl.mean: a mask= that leaves out part of a reduced row is not supported "
                                              "by the axon_eg NKI simulator (mask whole rows: i_p < n)")
            out = legacy["tensor_reduce"](op, x, axis, dtype=dtype, keepdims=keepdims, mask=mask)
            if name != "mean":
                return out
            count = math.prod(_tensor(x).shape[a] for a in isa.reduce_axes(axis, _tensor(x).ndim))
            return legacy["tensor_scalar"](out, "multiply", 1.0 / count, dtype=dtype)

        reduce.__name__ = name
        return reduce

    def transpose(x: Any, dtype: Any = None, *, mask: Any = None) -> _Result:
        _unsupported("nl.transpose", mask=mask)
        return legacy["nc_transpose"](x, dtype=dtype)

    def matmul(x: Any, y: Any, transpose_x: bool = False, *, mask: Any = None) -> _Result:
        """``x @ y`` on the Tensor engine into PSUM: ``x`` is [M, K] (``transpose_x``: given as [K, M], the
        stationary operand as the engine takes it), ``y`` is [K, N]; an untransposed ``x`` is transposed first."""
        _unsupported("nl.matmul", mask=mask)
        stationary = x if transpose_x else copy(legacy["nc_transpose"](x, engine=isa.TENSOR))  # PSUM -> SBUF
        return legacy["nc_matmul"](stationary, y)

    def load_transpose2d(src: Any, dtype: Any = None, *, mask: Any = None) -> _Result:
        """An HBM [M, K] tile loaded as the SBUF tile [K, M]: a DMA whose access pattern walks the source
        column by column (any dtype, every NeuronCore; the DMA-transpose engine of trn2 is ``nisa.dma_transpose``)."""
        src = _tensor(src)
        if src.ndim != 2:
            raise isa.NkiSimulationError(f"nl.load_transpose2d: src must be a 2-D HBM tile, got shape {list(src.shape)}")
        view = NkiTensor(src._buf, src._flat.T)
        with s.masked(mask, "nl.load_transpose2d"):  # over the loaded [K, M] tile
            return s.prepare("load", {"src": view}, {}, None, view.shape, dtype or src.dtype, SBUF)

    def broadcast_to(x: Any = None, shape: Any = None, dtype: Any = None, *, src: Any = None) -> _Result:
        """``x`` copied to ``shape`` along axes of size 1 (the Vector engine reads the size-1 axes repeatedly)."""
        x = _tensor(x if x is not None else src)
        shape = tuple(int(d) for d in shape)
        try:
            view = NkiTensor(x._buf, np.broadcast_to(x._flat, shape))
        except ValueError:
            raise isa.NkiSimulationError(f"nl.broadcast_to: shape {list(x.shape)} does not broadcast to "
                                         f"{list(shape)}") from None
        return s.prepare("tensor_copy", {"src": view}, {}, None, shape, dtype or x.dtype, SBUF)

    def like(value: float | None) -> Callable[..., NkiTensor]:
        def make(x: Any = None, dtype: Any = None, buffer: Any = None, name: str | None = None, *, a: Any = None) -> NkiTensor:
            x = _tensor(x if x is not None else a)
            if value is None:
                return ndarray(x.shape, dtype or x.dtype, buffer, name)
            return filled(value)(x.shape, dtype or x.dtype, buffer, name)
        return make

    def full(shape: Any, fill_value: float, dtype: Any, buffer: Any = None, name: str | None = None) -> NkiTensor:
        return filled(float(fill_value))(shape, dtype, buffer, name)

    def device_print(prefix: Any = "", tensor: Any = None, *, print_prefix: Any = None, x: Any = None,
                     mask: Any = None) -> None:
        """Prints the tile's values (the simulator's stdout; on a device the runtime's)."""
        _unsupported("nl.device_print", mask=mask)
        t = _tensor(next(v for v in (tensor, x) if v is not None))
        label = print_prefix if print_prefix is not None else prefix
        print(label, np.asarray(t._buf.data[t._flat]))

    limits = s.spec.value
    tile_size = _Namespace("nl.tile_size", {"pmax": limits("limits.partition_max"),
                                            "gemm_stationary_fmax": limits("limits.matmul.stationary_free_max"),
                                            "gemm_moving_fmax": limits("limits.matmul.moving_free_max")})
    ops = {n: Op(n) for n in (*isa.ALU_OPS, *isa.ACTIVATIONS, "identity")}
    dtypes = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "int32": np.int32,
              "uint32": np.uint32, "int16": np.int16, "uint16": np.uint16, "int8": np.int8, "uint8": np.uint8}
    functions = {"negative": negative, "transpose": transpose, "matmul": matmul, "load_transpose2d": load_transpose2d,
                 "broadcast_to": broadcast_to, "zeros_like": like(0.0), "empty_like": like(None), "full": full,
                 "device_print": device_print,
                 **{n: reduction(n, op) for n, op in (("sum", "add"), ("max", "maximum"), ("min", "minimum"),
                                                      ("mean", "add"))}}
    return {**ops, **dtypes, **functions, "ndarray": ndarray, "zeros": filled(0.0), "ones": filled(1.0), "load": load,
            "store": store, "arange": lambda *a, **k: np.arange(*map(plain, a), **k), "mgrid": _MGrid(),
            "ds": lambda start, size: slice(start, start + size), "par_dim": _ParDim, "affine_range": loop_range("affine_range"),
            "sequential_range": loop_range("sequential_range"), "static_range": range,
            "tile_size": tile_size, "sbuf": _BUFFER_KINDS[SBUF], "psum": _BUFFER_KINDS[PSUM], "hbm": _BUFFER_KINDS[HBM],
            "shared_hbm": _BufferKind("shared_hbm", HBM), "private_hbm": _BufferKind("private_hbm", HBM)}


def _isa_common(s: _Session) -> dict[str, Any]:
    engine = _enum("nisa.engine", "tensor", "vector", "scalar", "gpsimd", "dma", "sync", "unknown")
    versions = _enum("nisa.nc_version", "gen2", "gen3", "gen4")

    def get_nc_version() -> _Token:
        known = {"trn1": versions.gen2, "trn2": versions.gen3}
        if s.spec.name not in known:
            raise NotImplementedError(f"nisa.get_nc_version: no NeuronCore version known for {s.spec.name}")
        return known[s.spec.name]

    return {"engine": engine, "reduce_cmd": _enum("nisa.reduce_cmd", *isa.REDUCE_CMDS),
            "dge_mode": _enum("nisa.dge_mode", "unknown", "swdge", "hwdge", "none"),
            "oob_mode": _enum("nisa.oob_mode", "error", "skip"), "nc_version": versions,
            "matmul_perf_mode": _enum("nisa.matmul_perf_mode", "none", "double_row"), "get_nc_version": get_nc_version,
            **{f"{e}_engine": getattr(engine, e) for e in ("tensor", "vector", "scalar", "gpsimd", "unknown")}}


def _current_isa(s: _Session) -> dict[str, Any]:
    """``nki.isa``, destination passing: every instruction writes ``dst`` and returns None."""
    A, R, ALU = isa.ACTIVATIONS, isa.REDUCE_OPS, isa.ALU_OPS

    def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
                  accumulate=None, tile_position=(), tile_size=(), perf_mode=None, name=None):
        _unsupported("nisa.nc_matmul", tile_position=tile_position, tile_size=tile_size, perf_mode=perf_mode)
        s.run("nc_matmul", {"dst": dst, "stationary": stationary, "moving": moving}, {"accumulate": accumulate})

    def nc_transpose(dst, data, engine=None, name=None):
        s.run("nc_transpose", {"dst": dst, "data": data}, {}, engine)

    def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=None, name=None):
        s.run("activation", {"dst": dst, "data": data, "bias": bias, "scale": scale, "reduce_res": reduce_res},
              {"op": _op(op, A, "activation"), "reduce_op": _op(reduce_op, R, "activation", "reduce_op"),
               "reduce_cmd": _cmd(reduce_cmd)})

    def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
        activation(dst, op, data, bias, scale, reduce_op, reduce_res, "reset_reduce")

    def tensor_tensor(dst, data1, data2, op, engine=None, name=None):
        s.run("tensor_tensor", {"dst": dst, "data1": data1, "data2": data2}, {"op": _op(op, ALU, "tensor_tensor")}, engine)

    def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, engine=None,
                      name=None):
        s.run("tensor_scalar", {"dst": dst, "data": data, "operand0": operand0, "operand1": operand1},
              {"op0": _op(op0, ALU, "tensor_scalar", "op0"), "op1": _op(op1, ALU, "tensor_scalar", "op1"),
               "reverse0": bool(reverse0), "reverse1": bool(reverse1)}, engine)

    def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
        s.run("tensor_reduce", {"dst": dst, "data": data},
              {"op": _op(op, R, "tensor_reduce"), "axis": axis, "negate": bool(negate), "keepdims": bool(keepdims)})

    def tensor_copy(dst, src, engine=None, name=None):
        s.run("tensor_copy", {"dst": dst, "src": src}, {}, engine)

    def memset(dst, value, engine=None, name=None):
        s.run("memset", {"dst": dst}, {"value": float(value)}, engine)

    def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
        s.run("iota", {"dst": dst}, {"pattern": tuple(tuple(int(v) for v in p) for p in pattern), "offset": int(offset),
                                     "channel_multiplier": int(channel_multiplier)})

    def dma_copy(dst, src, priority=None, oob_mode=None, dge_mode=None, engine=None, name=None):
        s.run("dma_copy", {"dst": dst, "src": src}, {})

    def dma_transpose(dst, src, axes=None, priority=None, dge_mode=None, oob_mode=None, name=None):
        s.run("dma_transpose", {"dst": dst, "src": src}, {"axes": None if axes is None else tuple(axes)})

    return {**_isa_common(s), **{f.__name__: f for f in (
        nc_matmul, nc_transpose, activation, activation_reduce, tensor_tensor, tensor_scalar, tensor_reduce,
        tensor_copy, memset, iota, dma_copy, dma_transpose)}}


def _legacy_isa(s: _Session) -> dict[str, Any]:
    """``neuronxcc.nki.isa``: instructions return tiles (``_Result``); ``dma_copy`` writes ``dst``."""
    A, R, ALU = isa.ACTIVATIONS, isa.REDUCE_OPS, isa.ALU_OPS

    def nc_matmul(stationary, moving, *, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
                  mask=None, **kwargs):
        _unsupported("nisa.nc_matmul", mask=mask, **kwargs)
        st, mv = _tensor(stationary), _tensor(moving)
        return s.prepare("nc_matmul", {"stationary": st, "moving": mv}, {"accumulate": False}, None,
                         (_free(st.shape), *mv.shape[1:]), np.float32, PSUM)

    def nc_transpose(data, *, engine=None, dtype=None, mask=None):
        _unsupported("nisa.nc_transpose", mask=mask)
        data = _tensor(data)
        engine = getattr(engine, "name", engine)
        if engine in (None, "unknown"):
            small = max(data.shape[0], _free(data.shape)) <= s.spec.value("limits.transpose.vector_engine_max")
            engine = isa.VECTOR if small or data.buffer.space == PSUM else isa.TENSOR
        return s.prepare("nc_transpose", {"data": data}, {}, engine, (_free(data.shape), data.shape[0]),
                         dtype or data.dtype, PSUM if engine == isa.TENSOR else SBUF)

    def activation(op, data, *, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=None, mask=None,
                   dtype=None):
        with s.masked(mask, "nisa.activation"):
            return _activation(op, data, bias, scale, reduce_op, reduce_res, reduce_cmd, dtype)

    def _activation(op, data, bias, scale, reduce_op, reduce_res, reduce_cmd, dtype):
        data = _tensor(data)
        return s.prepare("activation", {"data": data, "bias": bias, "scale": scale, "reduce_res": reduce_res},
                         {"op": _op(op, A, "activation"), "reduce_op": _op(reduce_op, R, "activation", "reduce_op"),
                          "reduce_cmd": _cmd(reduce_cmd)}, None, data.shape, dtype or data.dtype, SBUF)

    def activation_reduce(op, data, *, reduce_op, reduce_res, bias=None, scale=1.0, mask=None, dtype=None):
        return activation(op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
                          reduce_cmd="reset_reduce", mask=mask, dtype=dtype)

    def tensor_tensor(data1, data2, op, *, dtype=None, mask=None, engine=None):
        d1, d2 = _tensor(data1), _tensor(data2)
        dtype = dtype or (d1.dtype if d1.dtype == d2.dtype else np.float32)
        with s.masked(mask, "nisa.tensor_tensor"):
            return s.prepare("tensor_tensor", {"data1": d1, "data2": d2}, {"op": _op(op, ALU, "tensor_tensor")}, engine,
                         d1.shape, dtype, SBUF)

    def tensor_scalar(data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, *, dtype=None,
                      mask=None, engine=None):
        data = _tensor(data)
        with s.masked(mask, "nisa.tensor_scalar"):
            return s.prepare("tensor_scalar", {"data": data, "operand0": operand0, "operand1": operand1},
                         {"op0": _op(op0, ALU, "tensor_scalar", "op0"), "op1": _op(op1, ALU, "tensor_scalar", "op1"),
                          "reverse0": bool(reverse0), "reverse1": bool(reverse1)}, engine, data.shape,
                         dtype or data.dtype, SBUF)

    def tensor_reduce(op, data, axis, *, dtype=None, negate=False, keepdims=False, mask=None):
        data = _tensor(data)
        axes = isa.reduce_axes(axis, data.ndim)
        shape = tuple(1 if i in axes else d for i, d in enumerate(data.shape) if keepdims or i not in axes)
        with s.masked(mask, "nisa.tensor_reduce"):  # over data: left-out elements do not count
            return s.prepare("tensor_reduce", {"data": data}, {"op": _op(op, R, "tensor_reduce"), "axis": axis,
                         "negate": bool(negate), "keepdims": bool(keepdims)}, None, shape, dtype or data.dtype, SBUF)

    def tensor_copy(src, *, mask=None, dtype=None, engine=None):
        src = _tensor(src)
        with s.masked(mask, "nisa.tensor_copy"):
            return s.prepare("tensor_copy", {"src": src}, {}, engine, src.shape, dtype or src.dtype, SBUF)

    def memset(shape, value, dtype, *, mask=None, engine=None):
        with s.masked(mask, "nisa.memset"):
            return s.prepare("memset", {}, {"value": float(value)}, engine, tuple(shape), dtype, SBUF)

    def iota(expr, dtype, *, mask=None):
        expr = np.asarray(expr)
        with s.masked(mask, "nisa.iota"):
            return s.prepare("iota", {}, {"expr": expr}, None, expr.shape, dtype, SBUF)

    def dma_copy(*, dst, src, mask=None, dst_rmw_op=None, oob_mode=None, dge_mode=None):
        _unsupported("nisa.dma_copy", dst_rmw_op=dst_rmw_op)
        with s.masked(mask, "nisa.dma_copy"):
            s.run("dma_copy", {"dst": dst, "src": src}, {})

    def dma_transpose(src, *, axes=None, mask=None, dtype=None, dge_mode=None):
        _unsupported("nisa.dma_transpose", mask=mask)
        src = _tensor(src)
        return s.prepare("dma_transpose", {"src": src}, {"axes": None if axes is None else tuple(axes)}, None,
                         src.shape[::-1], dtype or src.dtype, SBUF)

    return {**_isa_common(s), **{f.__name__: f for f in (
        nc_matmul, nc_transpose, activation, activation_reduce, tensor_tensor, tensor_scalar, tensor_reduce,
        tensor_copy, memset, iota, dma_copy, dma_transpose)}}


