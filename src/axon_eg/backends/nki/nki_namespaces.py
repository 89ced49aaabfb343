"""The fake ``nki.language`` / ``nki.isa`` (and legacy ``neuronxcc.nki``) namespaces the simulator installs:
NKI tokens (dtypes, buffers, ops, enums), index grids, and the instruction functions of each dialect."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from . import isa
from .isa import HBM, PSUM, SBUF
from .nki_values import LEGACY, NkiTensor, _ParDim, _Result, _tensor, loop_range, plain

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
        if s.grid and getattr(buffer, "name", None) in ("shared_hbm", "hbm"):  # one tensor all programs share
            return s.shared_hbm(shape, dtype, name)
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
            axes = isa.reduce_axes(axis, _tensor(x).ndim)
            count = math.prod(_tensor(x).shape[a] for a in axes)
            kept = None if mask is None else np.broadcast_to(np.asarray(mask), _tensor(x).shape).any(axis=axes,
                                                                                                       keepdims=keepdims)
            return legacy["tensor_scalar"](out, "multiply", 1.0 / count, dtype=dtype, mask=kept)

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

    # -- composites: what the compiler makes of the higher-level functions, as instruction sequences
    def unary_alu(name: str, op: str, operand: Callable[[np.dtype], float]) -> Callable[..., _Result]:
        def call(x: Any, dtype: Any = None, *, mask: Any = None) -> _Result:
            x = _tensor(x)
            return legacy["tensor_scalar"](x, op, operand(x.dtype), dtype=dtype, mask=mask)
        call.__name__ = name
        return call

    def ones_of(dt: np.dtype) -> float:  # every bit set: ~x = x ^ ones
        return float(2 ** (8 * dt.itemsize) - 1) if dt.kind == "u" else -1.0

    def spread(column: Any, shape: tuple[int, ...], dtype: Any) -> Any:
        """A reduction's keepdims result read along the reduced axes as a tile of ``shape`` (the Vector engine's
        repeated read of the size-1 axes)."""
        return broadcast_to(column, shape, dtype)

    def with_column(x: Any, op: str, column: Any, dtype: Any = None) -> _Result:
        """x op column, where column is x reduced with keepdims (a [P, 1] column: tensor_scalar)."""
        x, column = _tensor(x), _tensor(column)
        if x.ndim == 2 and tuple(column.shape) == (x.shape[0], 1):
            return legacy["tensor_scalar"](x, op, column, dtype=dtype)
        return legacy["tensor_tensor"](x, spread(column, x.shape, np.float32), op, dtype=dtype)

    def where(condition: Any, x: Any, y: Any, dtype: Any = None, *, mask: Any = None) -> _Result:
        """``x`` where ``condition`` is nonzero, else ``y``: y copied, then x copied over it under the predicate
        (``nisa.tensor_copy_predicated``; another condition first becomes the uint8 predicate ``condition != 0``)."""
        cond = _tensor(condition)
        dtype = isa.as_dtype(dtype or next((v.dtype for v in (x, y) if is_tile(v)), np.float32), "nl.where dtype")
        pred = cond if cond.dtype.kind == "u" else legacy["tensor_scalar"](cond, "not_equal", 0.0, dtype=np.uint8,
                                                                            mask=mask)
        def tile(v: Any) -> Any:
            return full(cond.shape, float(v), dtype) if not is_tile(v) else v
        out = copy(tile(y), dtype, mask=mask)._tile()
        with s.masked(mask, "nl.where"):
            s.run("tensor_copy_predicated", {"dst": out, "src": copy(tile(x), dtype), "predicate": pred},
                  {"reverse_pred": False})
        return out

    def all_(x: Any, axis: Any, dtype: Any = None, *, mask: Any = None) -> _Result:
        nonzero = legacy["tensor_scalar"](x, "not_equal", 0.0, dtype=np.float32, mask=mask)
        return legacy["tensor_reduce"]("minimum", nonzero, axis, dtype=dtype or np.uint8, mask=mask)

    def var(x: Any, axis: Any, dtype: Any = None, *, mask: Any = None) -> _Result:
        """The population variance: the mean of the squared deviations from the mean (two passes)."""
        _unsupported("nl.var", mask=mask)
        x = _tensor(x)
        n = math.prod(x.shape[a] for a in isa.reduce_axes(axis, x.ndim))
        mean = legacy["tensor_reduce"]("add", x, axis, dtype=np.float32, keepdims=True)
        mean = legacy["tensor_scalar"](mean, "multiply", 1.0 / n, dtype=np.float32)
        dev = with_column(x, "subtract", mean, np.float32)
        sq = legacy["tensor_tensor"](dev, dev, "multiply", dtype=np.float32)
        total = legacy["tensor_reduce"]("add", sq, axis, dtype=np.float32)
        return legacy["tensor_scalar"](total, "multiply", 1.0 / n, dtype=dtype or x.dtype)

    def softmax(x: Any, axis: Any, dtype: Any = None, compute_dtype: Any = None, *, mask: Any = None) -> _Result:
        """exp(x - max) / sum(exp(x - max)) along ``axis``."""
        _unsupported("nl.softmax", mask=mask)
        x = _tensor(x)
        top = legacy["tensor_reduce"]("maximum", x, axis, dtype=np.float32, keepdims=True)
        e = legacy["activation"]("exp", with_column(x, "subtract", top, np.float32), dtype=np.float32)
        total = legacy["tensor_reduce"]("add", e, axis, dtype=np.float32, keepdims=True)
        return with_column(e, "divide", total, dtype or x.dtype)

    def rms_norm(x: Any, w: Any, axis: Any, n: int, epsilon: float = 1e-6, dtype: Any = None,
                 compute_dtype: Any = None, *, mask: Any = None) -> _Result:
        """x / sqrt(sum(x^2, axis) / n + epsilon) * w."""
        _unsupported("nl.rms_norm", mask=mask)
        x = _tensor(x)
        sq = legacy["activation"]("square", x, dtype=np.float32)
        total = legacy["tensor_reduce"]("add", sq, axis, dtype=np.float32, keepdims=True)
        rms = legacy["activation"]("rsqrt", total, scale=1.0 / float(n), bias=None, dtype=np.float32) if not epsilon \
            else legacy["activation"]("rsqrt", legacy["tensor_scalar"](total, "multiply", 1.0 / float(n), op1="add",
                                                                        operand1=float(epsilon), dtype=np.float32),
                                      dtype=np.float32)
        normed = with_column(x, "multiply", rms, np.float32)
        w = _tensor(w)
        if tuple(w.shape) != tuple(x.shape):
            w = spread(w, x.shape, w.dtype)
        return legacy["tensor_tensor"](normed, w, "multiply", dtype=dtype or x.dtype)

    def expand_dims(data: Any, axis: Any) -> Any:
        """A view with a size-1 axis added after the last (the only place the docs allow)."""
        t = _tensor(data)
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        if any(a in (0, -t.ndim - 1) for a in axes):
            raise isa.NkiSimulationError(f"nl.expand_dims: axis {list(axes)} includes the partition axis 0")
        if sorted(a % (t.ndim + len(axes)) for a in axes) != list(range(t.ndim, t.ndim + len(axes))):
            raise NotImplementedError(f"nl.expand_dims: axis {list(axes)} of a rank-{t.ndim} tile: only expanding "
                                      f"after the last axis is supported (nki.language.expand_dims)")
        return t.reshape(*t.shape, *(1 for _ in axes))

    grid = s.grid

    def program_id(axis: int = 0) -> int:
        if not 0 <= int(axis) < max(len(grid), 1):
            raise isa.NkiSimulationError(f"nl.program_id({axis}): the launch grid {list(grid) or '()'} has "
                                         f"{len(grid)} axes")
        return s.program[int(axis)] if grid else 0

    def num_programs(axes: Any = None) -> int:
        if axes is None:
            return math.prod(grid)
        if isinstance(axes, (tuple, list)):
            return math.prod(num_programs(a) for a in axes)
        return int(grid[int(axes)]) if grid else 1

    def is_space(*spaces: str) -> Callable[[Any], bool]:
        return lambda buffer: getattr(buffer, "space", None) in spaces

    class _Finfo:
        def __init__(self, dtype: Any):
            info = ml_dtypes.finfo(isa.as_dtype(dtype, "nl.finfo"))
            self.min, self.max, self.eps, self.tiny = float(info.min), float(info.max), float(info.eps), float(info.tiny)
            self.bits, self.dtype = int(info.bits), info.dtype

    def random_seed(seed: Any, *, mask: Any = None) -> None:
        """Seeds the generator dropout draws from (current dialect: a [1, 1] SBUF/PSUM tile holding it)."""
        _unsupported("nl.random_seed", mask=mask)
        s.seed(seed, "nl.random_seed")

    def rand(shape: Any, dtype: Any = np.float32, buffer: Any = None, name: str | None = None) -> _Result:
        """Uniform values in [0, 1): 16 random bits per element (nisa.rng into a uint16 tile) times 2**-16."""
        bits = ndarray(shape, np.uint16, buffer, name)
        s.run("rng", {"dst": bits}, {}, isa.VECTOR)
        return legacy["tensor_scalar"](bits, "multiply", 2.0 ** -16, dtype=dtype)

    def dropout(x: Any, rate: Any, dtype: Any = None, *, mask: Any = None) -> _Result:
        return legacy["dropout"](x, rate, dtype=dtype, mask=mask)

    def shared_constant(constant: Any, dtype: Any = None) -> NkiTensor:
        """A trace-time array placed in HBM as a constant tensor."""
        values = np.asarray(constant)
        t = s.allocate(values.shape, dtype or values.dtype, HBM, what="nl.shared_constant")
        t._buf.data[:] = values.reshape(-1).astype(t.dtype)
        t._buf.written[:] = True
        return t

    def shared_identity_matrix(n: int, dtype: Any = np.uint8, dst: Any = None) -> NkiTensor:
        """The n x n identity as a constant HBM tensor (the stationary operand of a TensorE transpose)."""
        _unsupported("nl.shared_identity_matrix", dst=dst)
        return shared_constant(np.eye(int(n)), dtype)

    def dynamic_range(start: Any, stop: Any = None, step: int = 1) -> Any:
        """A loop whose bounds may be runtime values: here the values they have."""
        if int(step) <= 0:
            raise isa.NkiSimulationError(f"nl.dynamic_range: step must be a positive compile-time integer, got {step!r}")
        return loop_range("dynamic_range")(*((0, start) if stop is None else (start, stop)), step)

    limits = s.spec.value
    tile_size = _Namespace("nl.tile_size", {"pmax": limits("limits.partition_max"),
                                            "gemm_stationary_fmax": limits("limits.matmul.stationary_free_max"),
                                            "gemm_moving_fmax": limits("limits.matmul.moving_free_max"),
                                            "bn_stats_fmax": limits("limits.vector.bn_stats_free_max")})
    ops = {n: Op(n) for n in (*isa.ALU_OPS, *isa.ACTIVATIONS, "identity")}
    dtypes = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "int32": np.int32,
              "uint32": np.uint32, "int16": np.int16, "uint16": np.uint16, "int8": np.int8, "uint8": np.uint8,
              "bool_": np.bool_, "float8_e4m3": ml_dtypes.float8_e4m3, "float8_e5m2": ml_dtypes.float8_e5m2,
              "float8_e4m3fn": ml_dtypes.float8_e4m3fn}
    functions = {"negative": negative, "transpose": transpose, "matmul": matmul, "load_transpose2d": load_transpose2d,
                 "broadcast_to": broadcast_to, "zeros_like": like(0.0), "empty_like": like(None), "full": full,
                 "device_print": device_print, "where": where, "all": all_, "var": var, "softmax": softmax,
                 "rms_norm": rms_norm, "expand_dims": expand_dims, "program_id": program_id,
                 "num_programs": num_programs, "program_ndim": lambda: len(grid),
                 "invert": unary_alu("invert", "bitwise_xor", ones_of),
                 "logical_not": unary_alu("logical_not", "equal", lambda dt: 0.0),
                 "is_hbm": is_space(HBM), "is_sbuf": is_space(SBUF), "is_psum": is_space(PSUM),
                 "is_on_chip": is_space(SBUF, PSUM), "finfo": _Finfo, "shared_constant": shared_constant,
                 "shared_identity_matrix": shared_identity_matrix, "dynamic_range": dynamic_range,
                 "random_seed": random_seed, "dropout": dropout, "rand": rand,
                 "no_reorder": contextlib.nullcontext,  # one instruction at a time: there is no reordering to stop
                 "static_cast": lambda input_data, dtype: np.asarray(input_data).astype(isa.as_dtype(dtype)),
                 **{n: reduction(n, op) for n, op in (("sum", "add"), ("max", "maximum"), ("min", "minimum"),
                                                      ("mean", "add"), ("prod", "multiply"))}}
    if s.dialect == LEGACY:  # the legacy module's float constants (min: the most negative finite value)
        functions.update(fp32=_Namespace("nl.fp32", {"min": float(np.finfo(np.float32).min)}),
                         bfp16=_Namespace("nl.bfp16", {"min": float(ml_dtypes.finfo(ml_dtypes.bfloat16).min)}))
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

    return {"engine": engine, "reduce_cmd": _enum("nisa.reduce_cmd", *isa.REDUCE_CMDS, "load_reduce"),
            "dge_mode": _enum("nisa.dge_mode", "unknown", "swdge", "hwdge", "none"),
            "oob_mode": _enum("nisa.oob_mode", "error", "skip"), "nc_version": versions,
            "matmul_perf_mode": _enum("nisa.matmul_perf_mode", "none", "double_row"), "get_nc_version": get_nc_version,
            "NkiValidationError": isa.NkiSimulationError,  # what a kernel may catch: the simulator's refusals
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

    def reciprocal(dst, data, name=None):
        s.run("reciprocal", {"dst": dst, "data": data}, {})

    def scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, name=None):
        s.run("scalar_tensor_tensor", {"dst": dst, "data": data, "operand0": operand0, "operand1": operand1},
              {"op0": _op(op0, ALU, "scalar_tensor_tensor", "op0"), "op1": _op(op1, ALU, "scalar_tensor_tensor", "op1"),
               "reverse0": bool(reverse0), "reverse1": bool(reverse1)})

    def tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res, reverse0=False, reduce_cmd=None,
                             reduce_init=None, name=None):
        _unsupported("nisa.tensor_scalar_reduce", reverse0=reverse0, reduce_cmd=reduce_cmd, reduce_init=reduce_init)
        s.run("tensor_scalar_reduce", {"dst": dst, "data": data, "operand0": operand0, "reduce_res": reduce_res},
              {"op0": _op(op0, ALU, "tensor_scalar_reduce", "op0"),
               "reduce_op": _op(reduce_op, R, "tensor_scalar_reduce", "reduce_op")})

    def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=None):
        s.run("tensor_copy_predicated", {"dst": dst, "src": src, "predicate": predicate},
              {"reverse_pred": bool(reverse_pred)})

    def tensor_partition_reduce(dst, op, data, name=None):
        s.run("tensor_partition_reduce", {"dst": dst, "data": data}, {"op": _op(op, PARTITION_OPS, "tensor_partition_reduce")})

    def bn_stats(dst, data, name=None):
        s.run("bn_stats", {"dst": dst, "data": data}, {})

    def bn_aggr(dst, data, name=None):
        s.run("bn_aggr", {"dst": dst, "data": data}, {})

    def max8(dst, src, name=None):
        s.run("max8", {"dst": dst, "src": src}, {})

    def nc_find_index8(dst, data, vals, name=None):
        s.run("nc_find_index8", {"dst": dst, "data": data, "vals": vals}, {})

    def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, name=None):
        s.run("tensor_tensor_scan", {"dst": dst, "data0": data0, "data1": data1, "initial": initial},
              {"op0": _op(op0, ALU, "tensor_tensor_scan", "op0"), "op1": _op(op1, ALU, "tensor_tensor_scan", "op1"),
               "reverse0": bool(reverse0), "reverse1": bool(reverse1)})

    def select_reduce(dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=None, reduce_op=None,
                      reverse_pred=False, name=None):
        s.run("select_reduce", {"dst": dst, "predicate": predicate, "on_true": on_true, "on_false": on_false,
                                "reduce_res": reduce_res}, _select_attrs(reduce_cmd, reduce_op, reverse_pred=bool(reverse_pred)))

    def range_select(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=None, reduce_res=None,
                     reduce_op=None, range_start=0.0, on_false_value=None, name=None):
        s.run("range_select", {"dst": dst, "on_true_tile": on_true_tile, "bound0": bound0, "bound1": bound1,
                               "reduce_res": reduce_res},
              _range_attrs(comp_op0, comp_op1, reduce_cmd, reduce_op, range_start, on_false_value))

    def dropout(dst, data, prob, name=None):
        s.run("dropout", {"dst": dst, "data": data, "prob": prob}, {})

    def rng(dst, engine=None, name=None):
        s.run("rng", {"dst": dst}, {}, engine)

    def set_rng_seed(src_seeds, name=None):
        s.seed(src_seeds, "nisa.set_rng_seed")

    def nc_match_replace8(dst, data, vals, imm, dst_idx=None, name=None):
        s.run("nc_match_replace8", {"dst": dst, "data": data, "vals": vals, "dst_idx": dst_idx}, {"imm": float(imm)})

    def tensor_scalar_cumulative(dst, src, op0, op1, imm0, imm1=None, reduce_cmd=None, reverse0=False, name=None):
        s.run("tensor_scalar_cumulative", {"dst": dst, "src": src},
              {"op0": _op(op0, CUMULATIVE_OPS, "tensor_scalar_cumulative", "op0"),
               "op1": _op(op1, CUMULATIVE_OPS, "tensor_scalar_cumulative", "op1"), "imm0": float(imm0),
               "imm1": None if imm1 is None else float(imm1), "reverse0": bool(reverse0),
               "reduce_cmd": "reset_reduce" if reduce_cmd is None else _cmd(reduce_cmd)})

    def affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op=None, offset=0, name=None):
        s.run("affine_select", {"dst": dst, "on_true_tile": on_true_tile},
              {"pattern": tuple(tuple(int(v) for v in p) for p in pattern), "offset": int(offset),
               "channel_multiplier": int(channel_multiplier), "on_false_value": float(on_false_value),
               **({} if cmp_op is None else {"cmp_op": _op(cmp_op, COMPARE_OPS, "affine_select", "cmp_op")})})

    return {**_isa_common(s), **{f.__name__: f for f in (
        nc_matmul, nc_transpose, activation, activation_reduce, tensor_tensor, tensor_scalar, tensor_reduce,
        tensor_copy, memset, iota, dma_copy, dma_transpose, reciprocal, scalar_tensor_tensor, tensor_scalar_reduce,
        tensor_copy_predicated, tensor_partition_reduce, bn_stats, bn_aggr, max8, nc_find_index8, tensor_tensor_scan,
        tensor_scalar_cumulative, affine_select, nc_match_replace8, select_reduce, range_select, dropout, rng,
        set_rng_seed)}}


PARTITION_OPS = {o: None for o in isa.get("tensor_partition_reduce").declaration.attrs["op"].values}
COMPARE_OPS = {o: None for o in isa.get("affine_select").declaration.attrs["cmp_op"].values}
CUMULATIVE_OPS = {o: None for o in isa.ALU_OPS}  # the declaration's values say which each operand takes


def _select_attrs(reduce_cmd: Any, reduce_op: Any, **more: Any) -> dict[str, Any]:
    """The reduce attributes of select_reduce / range_select (given ones only: the declaration has the defaults)."""
    out = dict(more)
    if reduce_cmd is not None:
        out["reduce_cmd"] = _cmd(reduce_cmd)
    if reduce_op is not None:
        out["reduce_op"] = isa.op_name(reduce_op, {"maximum": None}, "select_reduce/range_select", "reduce_op")
    return out


def _range_attrs(comp_op0: Any, comp_op1: Any, reduce_cmd: Any, reduce_op: Any, range_start: Any,
                 on_false_value: Any) -> dict[str, Any]:
    return _select_attrs(reduce_cmd, reduce_op, comp_op0=_op(comp_op0, COMPARE_OPS, "range_select", "comp_op0"),
                         comp_op1=_op(comp_op1, COMPARE_OPS, "range_select", "comp_op1"), range_start=float(range_start),
                         **({} if on_false_value is None else {"on_false_value": float(on_false_value)}))


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

    def reciprocal(data, *, dtype=None, mask=None):
        data = _tensor(data)
        with s.masked(mask, "nisa.reciprocal"):
            return s.prepare("reciprocal", {"data": data}, {}, None, data.shape, dtype or data.dtype, SBUF)

    def scalar_tensor_tensor(*, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, dtype=None,
                             mask=None):
        data = _tensor(data)
        with s.masked(mask, "nisa.scalar_tensor_tensor"):
            return s.prepare("scalar_tensor_tensor", {"data": data, "operand0": operand0, "operand1": operand1},
                             {"op0": _op(op0, ALU, "scalar_tensor_tensor", "op0"),
                              "op1": _op(op1, ALU, "scalar_tensor_tensor", "op1"), "reverse0": bool(reverse0),
                              "reverse1": bool(reverse1)}, None, data.shape, dtype or data.dtype, SBUF)

    def tensor_scalar_reduce(*, data, op0, operand0, reduce_op, reduce_res, reverse0=False, dtype=None, mask=None):
        _unsupported("nisa.tensor_scalar_reduce", mask=mask, reverse0=reverse0)
        data = _tensor(data)
        return s.prepare("tensor_scalar_reduce", {"data": data, "operand0": operand0, "reduce_res": reduce_res},
                         {"op0": _op(op0, ALU, "tensor_scalar_reduce", "op0"),
                          "reduce_op": _op(reduce_op, R, "tensor_scalar_reduce", "reduce_op")},
                         None, data.shape, dtype or data.dtype, SBUF)

    def tensor_copy_predicated(*, src, dst, predicate, reverse_pred=False, mask=None, dtype=None):
        _unsupported("nisa.tensor_copy_predicated", dtype=dtype)
        with s.masked(mask, "nisa.tensor_copy_predicated"):
            s.run("tensor_copy_predicated", {"dst": dst, "src": src, "predicate": predicate},
                  {"reverse_pred": bool(reverse_pred)})

    def tensor_partition_reduce(op, data, *, mask=None, dtype=None):
        _unsupported("nisa.tensor_partition_reduce", mask=mask)
        data = _tensor(data)
        return s.prepare("tensor_partition_reduce", {"data": data},
                         {"op": _op(op, PARTITION_OPS, "tensor_partition_reduce")}, None, (1, *data.shape[1:]),
                         dtype or data.dtype, SBUF)

    def fixed(name: str, width: int, operand: str = "data") -> Callable[..., _Result]:
        def call(*args, mask=None, dtype=None, **kw):
            _unsupported(f"nisa.{name}", mask=mask)
            values = dict(zip((operand, "vals") if name == "nc_find_index8" else (operand,), args), **kw)
            first = _tensor(values[operand])
            return s.prepare(name, values, {}, None, (first.shape[0], width),
                             dtype or (np.uint32 if name == "nc_find_index8" else np.float32 if name.startswith("bn_")
                                       else first.dtype), SBUF)
        call.__name__ = name
        return call

    def select_reduce(*, dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=None, reduce_op=None,
                      reverse_pred=False, mask=None, dtype=None):
        _unsupported("nisa.select_reduce", mask=mask, dtype=dtype)
        s.run("select_reduce", {"dst": dst, "predicate": predicate, "on_true": on_true, "on_false": on_false,
                                "reduce_res": reduce_res}, _select_attrs(reduce_cmd, reduce_op, reverse_pred=bool(reverse_pred)))

    def range_select(*, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=None, reduce_res=None,
                     reduce_op=None, range_start=0.0, on_false_value=None, mask=None, dtype=None):
        _unsupported("nisa.range_select", mask=mask)
        on_true = _tensor(on_true_tile)
        return s.prepare("range_select", {"on_true_tile": on_true, "bound0": bound0, "bound1": bound1,
                                          "reduce_res": reduce_res},
                         _range_attrs(comp_op0, comp_op1, reduce_cmd, reduce_op, range_start, on_false_value), None,
                         on_true.shape, dtype or on_true.dtype, SBUF)

    def dropout(data, prob, *, mask=None, dtype=None):
        _unsupported("nisa.dropout", mask=mask)
        data = _tensor(data)
        return s.prepare("dropout", {"data": data, "prob": prob}, {}, None, data.shape, dtype or data.dtype, SBUF)

    def nc_match_replace8(*, data, vals, imm, dst_idx=None, mask=None, dtype=None):
        _unsupported("nisa.nc_match_replace8", mask=mask)
        data = _tensor(data)
        return s.prepare("nc_match_replace8", {"data": data, "vals": vals, "dst_idx": dst_idx}, {"imm": float(imm)}, None,
                         data.shape, dtype or data.dtype, SBUF)

    def tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=False, reverse1=False, *, dtype=None, mask=None):
        _unsupported("nisa.tensor_tensor_scan", mask=mask)
        d0 = _tensor(data0)
        return s.prepare("tensor_tensor_scan", {"data0": d0, "data1": data1, "initial": initial},
                         {"op0": _op(op0, ALU, "tensor_tensor_scan", "op0"), "op1": _op(op1, ALU, "tensor_tensor_scan", "op1"),
                          "reverse0": bool(reverse0), "reverse1": bool(reverse1)}, None, d0.shape, dtype or d0.dtype, SBUF)

    def affine_select(pred, on_true_tile, on_false_value, *, mask=None, dtype=None):
        _unsupported("nisa.affine_select", mask=mask)
        on_true = _tensor(on_true_tile)
        return s.prepare("affine_select", {"on_true_tile": on_true},
                         {"expr": np.asarray(pred), "on_false_value": float(on_false_value)}, None, on_true.shape,
                         dtype or on_true.dtype, SBUF)

    return {**_isa_common(s), **{f.__name__: f for f in (
        nc_matmul, nc_transpose, activation, activation_reduce, tensor_tensor, tensor_scalar, tensor_reduce,
        tensor_copy, memset, iota, dma_copy, dma_transpose, reciprocal, scalar_tensor_tensor, tensor_scalar_reduce,
        tensor_copy_predicated, tensor_partition_reduce, tensor_tensor_scan, affine_select, nc_match_replace8,
        select_reduce, range_select, dropout)},
        "bn_stats": fixed("bn_stats", 6), "bn_aggr": fixed("bn_aggr", 2), "max8": fixed("max8", 8, "src"),
        "nc_find_index8": fixed("nc_find_index8", 8)}


