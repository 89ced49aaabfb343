"""The fake ``nki.language`` / ``nki.isa`` (and legacy ``neuronxcc.nki``) namespaces the simulator installs, one
class per namespace over a :class:`session.Session`: :class:`Language` (``nl``: allocation, load/store, indexing,
dtypes, op tokens, the high-level tile functions), :class:`IsaCommon` (the enums both dialects' ``nisa`` share),
:class:`Isa` (current ``nki.isa``: every instruction writes ``dst``) and :class:`LegacyIsa` (``neuronxcc.nki.isa``:
instructions return tiles). A namespace's public attributes are exactly its NKI names (:func:`members`); its
helpers are private."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from typing import Any

import ml_dtypes
import numpy as np

from . import isa
from .isa import ACTIVATIONS, ALU_OPS, HBM, PSUM, REDUCE_OPS, SBUF
from .nki_values import (
    BUFFER_KINDS,
    LEGACY,
    BufferKind,
    NkiTensor,
    ParDim,
    Result,
    Token,
    as_tensor,
    loop_range,
    plain,
)
from .session import Session


def members(namespace: object) -> dict[str, Any]:
    """The NKI names a namespace object provides, as its fake module holds them: its public attributes."""
    return {name: getattr(namespace, name) for name in dir(namespace) if not name.startswith("_")}


# ------------------------------------------------------------------------------------------- NKI tokens
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
    return _Namespace(kind, {n: Token(kind, n) for n in names})


class _Grid(tuple):
    """``nl.mgrid[0:128, 0:512]``: open index arrays, also as ``.p`` (partition) and ``.x`` (free)."""

    p = property(lambda self: self[0])
    x = property(lambda self: self[1])


class _MGrid:
    def __getitem__(self, index: Any) -> _Grid:
        return _Grid(np.ogrid[index] if isinstance(index, tuple) else (np.ogrid[index],))


class _Finfo:
    """``nl.finfo(dtype)``: the limits of a float dtype."""

    def __init__(self, dtype: Any):
        info = ml_dtypes.finfo(isa.as_dtype(dtype, "nl.finfo"))
        self.min, self.max, self.eps, self.tiny = float(info.min), float(info.max), float(info.eps), float(info.tiny)
        self.bits, self.dtype = int(info.bits), info.dtype


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


def _is_tile(v: Any) -> bool:
    return isinstance(v, NkiTensor | Result)


def _ones_of(dt: np.dtype) -> float:  # every bit set: ~x = x ^ ones
    return float(2 ** (8 * dt.itemsize) - 1) if dt.kind == "u" else -1.0


# ------------------------------------------------------------------------------------------ nki.language
class Op(Token):
    """``nl.add``, ``nl.exp`` ...: what instructions take as ``op``; called, the high-level tile function of that
    name (``nl.exp(x)``, ``nl.add(x, y)``), and ``nl.copy(x, dtype)`` copies."""

    def __init__(self, name: str, language: Language):
        super().__init__("nl", name)
        self.nki_op = name
        self._language = language

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.name == "copy":
            return self._language._copy(*args, **kwargs)
        return self._language._elementwise(self, *args, **kwargs)


class Language:
    """``nki.language`` / ``neuronxcc.nki.language``: allocation, load/store, indexing, dtypes, op tokens.

    The high-level tile functions (``nl.exp(x)``, ``nl.add(x, y)``, ``nl.sum(x, axis=1)``, ``nl.matmul``,
    ``nl.transpose`` ...) are each the instruction the NKI compiler would pick for it (a :class:`LegacyIsa`
    call), run through the same rules and trace as a kernel calling that instruction itself; the composites
    (``softmax``, ``rms_norm``, ``var``, ``where``, ``all``) are the instruction sequences the compiler makes."""

    float32, bfloat16, float16, float8_e4m3, float8_e5m2, float8_e4m3fn = (
        np.float32, ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e4m3, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fn)
    int32, uint32, int16, uint16, int8, uint8, bool_ = np.int32, np.uint32, np.int16, np.uint16, np.int8, np.uint8, np.bool_
    sbuf, psum, hbm = BUFFER_KINDS[SBUF], BUFFER_KINDS[PSUM], BUFFER_KINDS[HBM]
    shared_hbm, private_hbm = BufferKind("shared_hbm", HBM), BufferKind("private_hbm", HBM)
    par_dim, mgrid, static_range, finfo = ParDim, _MGrid(), range, _Finfo
    no_reorder = contextlib.nullcontext  # one instruction at a time: there is no reordering to stop

    def __init__(self, session: Session):
        self._s = session
        self._isa = LegacyIsa(session)
        for name in (*ALU_OPS, *ACTIVATIONS, "identity"):
            setattr(self, name, Op(name, self))
        limits = session.spec.value
        self.tile_size = _Namespace("nl.tile_size", {"pmax": limits("limits.partition_max"),
                                                     "gemm_stationary_fmax": limits("limits.matmul.stationary_free_max"),
                                                     "gemm_moving_fmax": limits("limits.matmul.moving_free_max"),
                                                     "bn_stats_fmax": limits("limits.vector.bn_stats_free_max")})
        if session.dialect == LEGACY:  # the legacy module's float constants (min: the most negative finite value)
            self.fp32 = _Namespace("nl.fp32", {"min": float(np.finfo(np.float32).min)})
            self.bfp16 = _Namespace("nl.bfp16", {"min": float(ml_dtypes.finfo(ml_dtypes.bfloat16).min)})

    # -- allocation, load / store
    @staticmethod
    def _space(buffer: Any) -> str:
        if buffer is None:
            return SBUF
        if not isinstance(buffer, BufferKind):
            raise NotImplementedError(f"buffer={buffer!r} is not supported; use nl.sbuf, nl.psum or nl.shared_hbm")
        return buffer.space

    def ndarray(self, shape: Any, dtype: Any, buffer: Any = None, name: str | None = None, **kw: Any) -> NkiTensor:
        _unsupported("nl.ndarray", **kw)
        if self._s.grid and getattr(buffer, "name", None) in ("shared_hbm", "hbm"):  # one tensor all programs share
            return self._s.shared_hbm(shape, dtype, name)
        return self._s.allocate(shape, dtype, self._space(buffer), name)

    def _filled(self, value: float, shape: Any, dtype: Any, buffer: Any = None, name: str | None = None,
                **kw: Any) -> NkiTensor:
        t = self.ndarray(shape, dtype, buffer, name, **kw)
        if value == 0 and t._buf.space == PSUM:  # an empty accumulation bank: the compiler emits no memset,
            self._s.charge(t._buf, "nl.zeros")  # the first matmul into it overwrites (NKI docs)
            t._buf.data[:], t._buf.written[:] = 0, True
        else:
            self._s.run("memset", {"dst": t}, {"value": value})
        return t

    def zeros(self, shape: Any, dtype: Any, buffer: Any = None, name: str | None = None, **kw: Any) -> NkiTensor:
        return self._filled(0.0, shape, dtype, buffer, name, **kw)

    def ones(self, shape: Any, dtype: Any, buffer: Any = None, name: str | None = None, **kw: Any) -> NkiTensor:
        return self._filled(1.0, shape, dtype, buffer, name, **kw)

    def full(self, shape: Any, fill_value: float, dtype: Any, buffer: Any = None, name: str | None = None) -> NkiTensor:
        return self._filled(float(fill_value), shape, dtype, buffer, name)

    def zeros_like(self, x: Any = None, dtype: Any = None, buffer: Any = None, name: str | None = None, *,
                   a: Any = None) -> NkiTensor:
        x = as_tensor(x if x is not None else a)
        return self._filled(0.0, x.shape, dtype or x.dtype, buffer, name)

    def empty_like(self, x: Any = None, dtype: Any = None, buffer: Any = None, name: str | None = None, *,
                   a: Any = None) -> NkiTensor:
        x = as_tensor(x if x is not None else a)
        return self.ndarray(x.shape, dtype or x.dtype, buffer, name)

    def load(self, src: Any, *, mask: Any = None, dtype: Any = None, **kw: Any) -> Result:
        _unsupported("nl.load", **kw)
        src = as_tensor(src)
        with self._s.masked(mask, "nl.load"):
            return self._s.prepare("load", {"src": src}, {}, None, src.shape, dtype or src.dtype, SBUF)

    def store(self, dst: Any, value: Any, *, mask: Any = None, **kw: Any) -> None:
        _unsupported("nl.store", **kw)
        with self._s.masked(mask, "nl.store"):
            self._s.run("store", {"dst": dst, "src": value}, {})

    def load_transpose2d(self, src: Any, dtype: Any = None, *, mask: Any = None) -> Result:
        """An HBM [M, K] tile loaded as the SBUF tile [K, M]: a DMA whose access pattern walks the source
        column by column (any dtype, every NeuronCore; the DMA-transpose engine of trn2 is ``nisa.dma_transpose``)."""
        src = as_tensor(src)
        if src.ndim != 2:
            raise isa.NkiSimulationError(f"nl.load_transpose2d: src must be a 2-D HBM tile, got shape {list(src.shape)}")
        view = NkiTensor(src._buf, src._flat.T)
        with self._s.masked(mask, "nl.load_transpose2d"):  # over the loaded [K, M] tile
            return self._s.prepare("load", {"src": view}, {}, None, view.shape, dtype or src.dtype, SBUF)

    def shared_constant(self, constant: Any, dtype: Any = None) -> NkiTensor:
        """A trace-time array placed in HBM as a constant tensor."""
        values = np.asarray(constant)
        t = self._s.allocate(values.shape, dtype or values.dtype, HBM, what="nl.shared_constant")
        t._buf.data[:] = values.reshape(-1).astype(t.dtype)
        t._buf.written[:] = True
        return t

    def shared_identity_matrix(self, n: int, dtype: Any = np.uint8, dst: Any = None) -> NkiTensor:
        """The n x n identity as a constant HBM tensor (the stationary operand of a TensorE transpose)."""
        _unsupported("nl.shared_identity_matrix", dst=dst)
        return self.shared_constant(np.eye(int(n)), dtype)

    def is_hbm(self, buffer: Any) -> bool:
        return getattr(buffer, "space", None) in (HBM,)

    def is_sbuf(self, buffer: Any) -> bool:
        return getattr(buffer, "space", None) in (SBUF,)

    def is_psum(self, buffer: Any) -> bool:
        return getattr(buffer, "space", None) in (PSUM,)

    def is_on_chip(self, buffer: Any) -> bool:
        return getattr(buffer, "space", None) in (SBUF, PSUM)

    # -- indexing, loops, the launch grid
    def arange(self, *args: Any, **kwargs: Any) -> np.ndarray:
        return np.arange(*map(plain, args), **kwargs)

    def ds(self, start: Any, size: Any) -> slice:
        return slice(start, start + size)

    def affine_range(self, *args: Any) -> Any:
        return loop_range("affine_range")(*args)

    def sequential_range(self, *args: Any) -> Any:
        return loop_range("sequential_range")(*args)

    def dynamic_range(self, start: Any, stop: Any = None, step: int = 1) -> Any:
        """A loop whose bounds may be runtime values: here the values they have."""
        if int(step) <= 0:
            raise isa.NkiSimulationError(f"nl.dynamic_range: step must be a positive compile-time integer, got {step!r}")
        return loop_range("dynamic_range")(*((0, start) if stop is None else (start, stop)), step)

    def expand_dims(self, data: Any, axis: Any) -> Any:
        """A view with a size-1 axis added after the last (the only place the docs allow)."""
        t = as_tensor(data)
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        if any(a in (0, -t.ndim - 1) for a in axes):
            raise isa.NkiSimulationError(f"nl.expand_dims: axis {list(axes)} includes the partition axis 0")
        if sorted(a % (t.ndim + len(axes)) for a in axes) != list(range(t.ndim, t.ndim + len(axes))):
            raise NotImplementedError(f"nl.expand_dims: axis {list(axes)} of a rank-{t.ndim} tile: only expanding "
                                      f"after the last axis is supported (nki.language.expand_dims)")
        return t.reshape(*t.shape, *(1 for _ in axes))

    def program_id(self, axis: int = 0) -> int:
        grid = self._s.grid
        if not 0 <= int(axis) < max(len(grid), 1):
            raise isa.NkiSimulationError(f"nl.program_id({axis}): the launch grid {list(grid) or '()'} has "
                                         f"{len(grid)} axes")
        return self._s.program[int(axis)] if grid else 0

    def num_programs(self, axes: Any = None) -> int:
        grid = self._s.grid
        if axes is None:
            return math.prod(grid)
        if isinstance(axes, (tuple, list)):
            return math.prod(self.num_programs(a) for a in axes)
        return int(grid[int(axes)]) if grid else 1

    def program_ndim(self) -> int:
        return len(self._s.grid)

    def static_cast(self, input_data: Any, dtype: Any) -> np.ndarray:
        return np.asarray(input_data).astype(isa.as_dtype(dtype))

    # -- element-wise tile functions (the op tokens call these)
    def _copy(self, x: Any = None, dtype: Any = None, *, src: Any = None, mask: Any = None, **kw: Any) -> Result:
        _unsupported("nl.copy", **kw)
        x = as_tensor(x if x is not None else src)
        with self._s.masked(mask, "nl.copy"):
            return self._s.prepare("tensor_copy", {"src": x}, {}, None, x.shape, dtype or x.dtype, SBUF)

    def _elementwise(self, op: Op, *args: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> Any:
        with self._s.masked(mask, f"nl.{op.name}"):
            return self._unmasked(op, *args, dtype=dtype, **kw)

    def _unmasked(self, op: Op, *args: Any, dtype: Any = None, **kw: Any) -> Any:
        name, legacy = op.name, self._isa
        if name in ALU_OPS:
            x, y = self._two(name, args, kw)
            if _is_tile(x) and _is_tile(y):
                xs, ys = tuple(x.shape), tuple(y.shape)
                if xs != ys and len(ys) == 2 and ys == (xs[0], 1):  # a [P, 1] column: one scalar per partition
                    return legacy.tensor_scalar(x, op, y, dtype=dtype)
                if xs != ys and len(xs) == 2 and xs == (ys[0], 1):
                    return legacy.tensor_scalar(y, op, x, reverse0=True, dtype=dtype)
                return legacy.tensor_tensor(x, y, op, dtype=dtype)
            if _is_tile(x):
                return legacy.tensor_scalar(x, op, float(y), dtype=dtype)
            if _is_tile(y):
                return legacy.tensor_scalar(y, op, float(x), reverse0=True, dtype=dtype)
            return float(ALU_OPS[name](x, y))
        x = args[0] if args else kw.pop("x")
        if kw:
            raise TypeError(f"nl.{name}() got unexpected keyword arguments {sorted(kw)}")
        return legacy.activation(op, x, dtype=dtype)

    @staticmethod
    def _two(name: str, args: tuple, kw: dict) -> tuple[Any, Any]:
        values = list(args) + [kw.pop(k) for k in ("x", "y") if k in kw]
        if len(values) != 2 or kw:
            raise TypeError(f"nl.{name}(x, y, dtype=None) takes two operands, got {len(values)}"
                            + (f" and {sorted(kw)}" if kw else ""))
        return values[0], values[1]

    def negative(self, x: Any, dtype: Any = None, *, mask: Any = None) -> Result:
        return self._isa.tensor_scalar(x, "multiply", -1.0, dtype=dtype, mask=mask)

    def invert(self, x: Any, dtype: Any = None, *, mask: Any = None) -> Result:
        x = as_tensor(x)
        return self._isa.tensor_scalar(x, "bitwise_xor", _ones_of(x.dtype), dtype=dtype, mask=mask)

    def logical_not(self, x: Any, dtype: Any = None, *, mask: Any = None) -> Result:
        x = as_tensor(x)
        return self._isa.tensor_scalar(x, "equal", 0.0, dtype=dtype, mask=mask)

    # -- reductions
    def sum(self, x: Any, axis: Any, dtype: Any = None, keepdims: bool = False, *, mask: Any = None) -> Result:
        return self._isa.tensor_reduce("add", x, axis, dtype=dtype, keepdims=keepdims, mask=mask)

    def max(self, x: Any, axis: Any, dtype: Any = None, keepdims: bool = False, *, mask: Any = None) -> Result:
        return self._isa.tensor_reduce("maximum", x, axis, dtype=dtype, keepdims=keepdims, mask=mask)

    def min(self, x: Any, axis: Any, dtype: Any = None, keepdims: bool = False, *, mask: Any = None) -> Result:
        return self._isa.tensor_reduce("minimum", x, axis, dtype=dtype, keepdims=keepdims, mask=mask)

    def prod(self, x: Any, axis: Any, dtype: Any = None, keepdims: bool = False, *, mask: Any = None) -> Result:
        return self._isa.tensor_reduce("multiply", x, axis, dtype=dtype, keepdims=keepdims, mask=mask)

    def mean(self, x: Any, axis: Any, dtype: Any = None, keepdims: bool = False, *, mask: Any = None) -> Result:
        """The sum, then times 1 / (the reduced axes' size)."""
        if mask is not None:
            m = np.broadcast_to(np.asarray(mask), as_tensor(x).shape)
            axes = isa.reduce_axes(axis, m.ndim)
            if (m.any(axis=axes) != m.all(axis=axes)).any():
                raise NotImplementedError("nl.mean: a mask= that leaves out part of a reduced row is not supported "
                                          "by the axon_eg NKI simulator (mask whole rows: i_p < n)")
        out = self._isa.tensor_reduce("add", x, axis, dtype=dtype, keepdims=keepdims, mask=mask)
        axes = isa.reduce_axes(axis, as_tensor(x).ndim)
        count = math.prod(as_tensor(x).shape[a] for a in axes)
        kept = None if mask is None else np.broadcast_to(np.asarray(mask), as_tensor(x).shape).any(axis=axes,
                                                                                                    keepdims=keepdims)
        return self._isa.tensor_scalar(out, "multiply", 1.0 / count, dtype=dtype, mask=kept)

    # -- the Tensor engine, broadcasts
    def transpose(self, x: Any, dtype: Any = None, *, mask: Any = None) -> Result:
        _unsupported("nl.transpose", mask=mask)
        return self._isa.nc_transpose(x, dtype=dtype)

    def matmul(self, x: Any, y: Any, transpose_x: bool = False, *, mask: Any = None) -> Result:
        """``x @ y`` on the Tensor engine into PSUM: ``x`` is [M, K] (``transpose_x``: given as [K, M], the
        stationary operand as the engine takes it), ``y`` is [K, N]; an untransposed ``x`` is transposed first."""
        _unsupported("nl.matmul", mask=mask)
        stationary = x if transpose_x else self._copy(self._isa.nc_transpose(x, engine=isa.TENSOR))  # PSUM -> SBUF
        return self._isa.nc_matmul(stationary, y)

    def broadcast_to(self, x: Any = None, shape: Any = None, dtype: Any = None, *, src: Any = None) -> Result:
        """``x`` copied to ``shape`` along axes of size 1 (the Vector engine reads the size-1 axes repeatedly)."""
        x = as_tensor(x if x is not None else src)
        shape = tuple(int(d) for d in shape)
        try:
            view = NkiTensor(x._buf, np.broadcast_to(x._flat, shape))
        except ValueError:
            raise isa.NkiSimulationError(f"nl.broadcast_to: shape {list(x.shape)} does not broadcast to "
                                         f"{list(shape)}") from None
        return self._s.prepare("tensor_copy", {"src": view}, {}, None, shape, dtype or x.dtype, SBUF)

    def device_print(self, prefix: Any = "", tensor: Any = None, *, print_prefix: Any = None, x: Any = None,
                     mask: Any = None) -> None:
        """Prints the tile's values (the simulator's stdout; on a device the runtime's)."""
        _unsupported("nl.device_print", mask=mask)
        t = as_tensor(next(v for v in (tensor, x) if v is not None))
        label = print_prefix if print_prefix is not None else prefix
        print(label, np.asarray(t._buf.data[t._flat]))

    # -- composites: what the compiler makes of the higher-level functions, as instruction sequences
    def _with_column(self, x: Any, op: str, column: Any, dtype: Any = None) -> Result:
        """x op column, where column is x reduced with keepdims (a [P, 1] column: tensor_scalar; otherwise the
        column read along the reduced axes as a tile of x's shape, the Vector engine's repeated read)."""
        x, column = as_tensor(x), as_tensor(column)
        if x.ndim == 2 and tuple(column.shape) == (x.shape[0], 1):
            return self._isa.tensor_scalar(x, op, column, dtype=dtype)
        return self._isa.tensor_tensor(x, self.broadcast_to(column, x.shape, np.float32), op, dtype=dtype)

    def where(self, condition: Any, x: Any, y: Any, dtype: Any = None, *, mask: Any = None) -> Result:
        """``x`` where ``condition`` is nonzero, else ``y``: y copied, then x copied over it under the predicate
        (``nisa.tensor_copy_predicated``; another condition first becomes the uint8 predicate ``condition != 0``)."""
        cond = as_tensor(condition)
        dtype = isa.as_dtype(dtype or next((v.dtype for v in (x, y) if _is_tile(v)), np.float32), "nl.where dtype")
        pred = cond if cond.dtype.kind == "u" else self._isa.tensor_scalar(cond, "not_equal", 0.0, dtype=np.uint8,
                                                                            mask=mask)

        def tile(v: Any) -> Any:
            return self.full(cond.shape, float(v), dtype) if not _is_tile(v) else v
        out = self._copy(tile(y), dtype, mask=mask)._tile()
        with self._s.masked(mask, "nl.where"):
            self._s.run("tensor_copy_predicated", {"dst": out, "src": self._copy(tile(x), dtype), "predicate": pred},
                        {"reverse_pred": False})
        return out

    def all(self, x: Any, axis: Any, dtype: Any = None, *, mask: Any = None) -> Result:
        nonzero = self._isa.tensor_scalar(x, "not_equal", 0.0, dtype=np.float32, mask=mask)
        return self._isa.tensor_reduce("minimum", nonzero, axis, dtype=dtype or np.uint8, mask=mask)

    def var(self, x: Any, axis: Any, dtype: Any = None, *, mask: Any = None) -> Result:
        """The population variance: the mean of the squared deviations from the mean (two passes)."""
        _unsupported("nl.var", mask=mask)
        legacy, x = self._isa, as_tensor(x)
        n = math.prod(x.shape[a] for a in isa.reduce_axes(axis, x.ndim))
        mean = legacy.tensor_reduce("add", x, axis, dtype=np.float32, keepdims=True)
        mean = legacy.tensor_scalar(mean, "multiply", 1.0 / n, dtype=np.float32)
        dev = self._with_column(x, "subtract", mean, np.float32)
        sq = legacy.tensor_tensor(dev, dev, "multiply", dtype=np.float32)
        total = legacy.tensor_reduce("add", sq, axis, dtype=np.float32)
        return legacy.tensor_scalar(total, "multiply", 1.0 / n, dtype=dtype or x.dtype)

    def softmax(self, x: Any, axis: Any, dtype: Any = None, compute_dtype: Any = None, *, mask: Any = None) -> Result:
        """exp(x - max) / sum(exp(x - max)) along ``axis``."""
        _unsupported("nl.softmax", mask=mask)
        legacy, x = self._isa, as_tensor(x)
        top = legacy.tensor_reduce("maximum", x, axis, dtype=np.float32, keepdims=True)
        e = legacy.activation("exp", self._with_column(x, "subtract", top, np.float32), dtype=np.float32)
        total = legacy.tensor_reduce("add", e, axis, dtype=np.float32, keepdims=True)
        return self._with_column(e, "divide", total, dtype or x.dtype)

    def rms_norm(self, x: Any, w: Any, axis: Any, n: int, epsilon: float = 1e-6, dtype: Any = None,
                 compute_dtype: Any = None, *, mask: Any = None) -> Result:
        """x / sqrt(sum(x^2, axis) / n + epsilon) * w."""
        _unsupported("nl.rms_norm", mask=mask)
        legacy, x = self._isa, as_tensor(x)
        sq = legacy.activation("square", x, dtype=np.float32)
        total = legacy.tensor_reduce("add", sq, axis, dtype=np.float32, keepdims=True)
        rms = legacy.activation("rsqrt", total, scale=1.0 / float(n), bias=None, dtype=np.float32) if not epsilon \
            else legacy.activation("rsqrt", legacy.tensor_scalar(total, "multiply", 1.0 / float(n), op1="add",
                                                                 operand1=float(epsilon), dtype=np.float32),
                                   dtype=np.float32)
        normed = self._with_column(x, "multiply", rms, np.float32)
        w = as_tensor(w)
        if tuple(w.shape) != tuple(x.shape):
            w = self.broadcast_to(w, x.shape, w.dtype)
        return legacy.tensor_tensor(normed, w, "multiply", dtype=dtype or x.dtype)

    # -- random numbers
    def random_seed(self, seed: Any, *, mask: Any = None) -> None:
        """Seeds the generator dropout draws from (current dialect: a [1, 1] SBUF/PSUM tile holding it)."""
        _unsupported("nl.random_seed", mask=mask)
        self._s.seed(seed, "nl.random_seed")

    def rand(self, shape: Any, dtype: Any = np.float32, buffer: Any = None, name: str | None = None) -> Result:
        """Uniform values in [0, 1): 16 random bits per element (nisa.rng into a uint16 tile) times 2**-16."""
        bits = self.ndarray(shape, np.uint16, buffer, name)
        self._s.run("rng", {"dst": bits}, {}, isa.VECTOR)
        return self._isa.tensor_scalar(bits, "multiply", 2.0 ** -16, dtype=dtype)

    def dropout(self, x: Any, rate: Any, dtype: Any = None, *, mask: Any = None) -> Result:
        return self._isa.dropout(x, rate, dtype=dtype, mask=mask)


# ------------------------------------------------------------------------------------------------ nki.isa
class IsaCommon:
    """What both dialects' ``nisa`` share: the enums, ``get_nc_version``, ``NkiValidationError``."""

    NkiValidationError = isa.NkiSimulationError  # what a kernel may catch: the simulator's refusals

    def __init__(self, session: Session):
        self._s = session
        self.engine = _enum("nisa.engine", "tensor", "vector", "scalar", "gpsimd", "dma", "sync", "unknown")
        self.nc_version = _enum("nisa.nc_version", "gen2", "gen3", "gen4")
        self.reduce_cmd = _enum("nisa.reduce_cmd", *isa.REDUCE_CMDS, "load_reduce")
        self.dge_mode = _enum("nisa.dge_mode", "unknown", "swdge", "hwdge", "none")
        self.oob_mode = _enum("nisa.oob_mode", "error", "skip")
        self.matmul_perf_mode = _enum("nisa.matmul_perf_mode", "none", "double_row")
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
        out["reduce_cmd"] = _cmd(reduce_cmd)
    if reduce_op is not None:
        out["reduce_op"] = isa.op_name(reduce_op, {"maximum": None}, "select_reduce/range_select", "reduce_op")
    return out


def _range_attrs(comp_op0: Any, comp_op1: Any, reduce_cmd: Any, reduce_op: Any, range_start: Any,
                 on_false_value: Any) -> dict[str, Any]:
    return _select_attrs(reduce_cmd, reduce_op, comp_op0=_op(comp_op0, COMPARE_OPS, "range_select", "comp_op0"),
                         comp_op1=_op(comp_op1, COMPARE_OPS, "range_select", "comp_op1"), range_start=float(range_start),
                         **({} if on_false_value is None else {"on_false_value": float(on_false_value)}))


class Isa(IsaCommon):
    """``nki.isa``, destination passing: every instruction writes ``dst`` and returns None."""

    def nc_matmul(self, dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
                  accumulate=None, tile_position=(), tile_size=(), perf_mode=None, name=None):
        _unsupported("nisa.nc_matmul", tile_position=tile_position, tile_size=tile_size, perf_mode=perf_mode)
        self._s.run("nc_matmul", {"dst": dst, "stationary": stationary, "moving": moving}, {"accumulate": accumulate})

    def nc_transpose(self, dst, data, engine=None, name=None):
        self._s.run("nc_transpose", {"dst": dst, "data": data}, {}, engine)

    def activation(self, dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=None, name=None):
        self._s.run("activation", {"dst": dst, "data": data, "bias": bias, "scale": scale, "reduce_res": reduce_res},
                    {"op": _op(op, ACTIVATIONS, "activation"), "reduce_op": _op(reduce_op, REDUCE_OPS, "activation", "reduce_op"),
                     "reduce_cmd": _cmd(reduce_cmd)})

    def activation_reduce(self, dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
        self.activation(dst, op, data, bias, scale, reduce_op, reduce_res, "reset_reduce")

    def tensor_tensor(self, dst, data1, data2, op, engine=None, name=None):
        self._s.run("tensor_tensor", {"dst": dst, "data1": data1, "data2": data2},
                    {"op": _op(op, ALU_OPS, "tensor_tensor")}, engine)

    def tensor_scalar(self, dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, engine=None,
                      name=None):
        self._s.run("tensor_scalar", {"dst": dst, "data": data, "operand0": operand0, "operand1": operand1},
                    {"op0": _op(op0, ALU_OPS, "tensor_scalar", "op0"), "op1": _op(op1, ALU_OPS, "tensor_scalar", "op1"),
                     "reverse0": bool(reverse0), "reverse1": bool(reverse1)}, engine)

    def tensor_reduce(self, dst, op, data, axis, negate=False, keepdims=False, name=None):
        self._s.run("tensor_reduce", {"dst": dst, "data": data},
                    {"op": _op(op, REDUCE_OPS, "tensor_reduce"), "axis": axis, "negate": bool(negate),
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
                    {"op0": _op(op0, ALU_OPS, "scalar_tensor_tensor", "op0"),
                     "op1": _op(op1, ALU_OPS, "scalar_tensor_tensor", "op1"), "reverse0": bool(reverse0),
                     "reverse1": bool(reverse1)})

    def tensor_scalar_reduce(self, dst, data, op0, operand0, reduce_op, reduce_res, reverse0=False, reduce_cmd=None,
                             reduce_init=None, name=None):
        _unsupported("nisa.tensor_scalar_reduce", reverse0=reverse0, reduce_cmd=reduce_cmd, reduce_init=reduce_init)
        self._s.run("tensor_scalar_reduce", {"dst": dst, "data": data, "operand0": operand0, "reduce_res": reduce_res},
                    {"op0": _op(op0, ALU_OPS, "tensor_scalar_reduce", "op0"),
                     "reduce_op": _op(reduce_op, REDUCE_OPS, "tensor_scalar_reduce", "reduce_op")})

    def tensor_copy_predicated(self, dst, src, predicate, reverse_pred=False, name=None):
        self._s.run("tensor_copy_predicated", {"dst": dst, "src": src, "predicate": predicate},
                    {"reverse_pred": bool(reverse_pred)})

    def tensor_partition_reduce(self, dst, op, data, name=None):
        self._s.run("tensor_partition_reduce", {"dst": dst, "data": data},
                    {"op": _op(op, PARTITION_OPS, "tensor_partition_reduce")})

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
                    {"op0": _op(op0, ALU_OPS, "tensor_tensor_scan", "op0"), "op1": _op(op1, ALU_OPS, "tensor_tensor_scan", "op1"),
                     "reverse0": bool(reverse0), "reverse1": bool(reverse1)})

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
                    {"op0": _op(op0, CUMULATIVE_OPS, "tensor_scalar_cumulative", "op0"),
                     "op1": _op(op1, CUMULATIVE_OPS, "tensor_scalar_cumulative", "op1"), "imm0": float(imm0),
                     "imm1": None if imm1 is None else float(imm1), "reverse0": bool(reverse0),
                     "reduce_cmd": "reset_reduce" if reduce_cmd is None else _cmd(reduce_cmd)})

    def affine_select(self, dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op=None, offset=0, name=None):
        self._s.run("affine_select", {"dst": dst, "on_true_tile": on_true_tile},
                    {"pattern": tuple(tuple(int(v) for v in p) for p in pattern), "offset": int(offset),
                     "channel_multiplier": int(channel_multiplier), "on_false_value": float(on_false_value),
                     **({} if cmp_op is None else {"cmp_op": _op(cmp_op, COMPARE_OPS, "affine_select", "cmp_op")})})


class LegacyIsa(IsaCommon):
    """``neuronxcc.nki.isa``: instructions return tiles (:class:`nki_values.Result`); ``dma_copy`` writes ``dst``."""

    def nc_matmul(self, stationary, moving, *, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
                  mask=None, **kwargs):
        _unsupported("nisa.nc_matmul", mask=mask, **kwargs)
        st, mv = as_tensor(stationary), as_tensor(moving)
        return self._s.prepare("nc_matmul", {"stationary": st, "moving": mv}, {"accumulate": False}, None,
                               (_free(st.shape), *mv.shape[1:]), np.float32, PSUM)

    def nc_transpose(self, data, *, engine=None, dtype=None, mask=None):
        _unsupported("nisa.nc_transpose", mask=mask)
        data = as_tensor(data)
        engine = getattr(engine, "name", engine)
        if engine in (None, "unknown"):
            small = max(data.shape[0], _free(data.shape)) <= self._s.spec.value("limits.transpose.vector_engine_max")
            engine = isa.VECTOR if small or data.buffer.space == PSUM else isa.TENSOR
        return self._s.prepare("nc_transpose", {"data": data}, {}, engine, (_free(data.shape), data.shape[0]),
                               dtype or data.dtype, PSUM if engine == isa.TENSOR else SBUF)

    def activation(self, op, data, *, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=None, mask=None,
                   dtype=None):
        with self._s.masked(mask, "nisa.activation"):
            return self._activation(op, data, bias, scale, reduce_op, reduce_res, reduce_cmd, dtype)

    def _activation(self, op, data, bias, scale, reduce_op, reduce_res, reduce_cmd, dtype):
        data = as_tensor(data)
        return self._s.prepare("activation", {"data": data, "bias": bias, "scale": scale, "reduce_res": reduce_res},
                               {"op": _op(op, ACTIVATIONS, "activation"),
                                "reduce_op": _op(reduce_op, REDUCE_OPS, "activation", "reduce_op"),
                                "reduce_cmd": _cmd(reduce_cmd)}, None, data.shape, dtype or data.dtype, SBUF)

    def activation_reduce(self, op, data, *, reduce_op, reduce_res, bias=None, scale=1.0, mask=None, dtype=None):
        return self.activation(op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
                               reduce_cmd="reset_reduce", mask=mask, dtype=dtype)

    def tensor_tensor(self, data1, data2, op, *, dtype=None, mask=None, engine=None):
        d1, d2 = as_tensor(data1), as_tensor(data2)
        dtype = dtype or (d1.dtype if d1.dtype == d2.dtype else np.float32)
        with self._s.masked(mask, "nisa.tensor_tensor"):
            return self._s.prepare("tensor_tensor", {"data1": d1, "data2": d2}, {"op": _op(op, ALU_OPS, "tensor_tensor")},
                                   engine, d1.shape, dtype, SBUF)

    def tensor_scalar(self, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, *, dtype=None,
                      mask=None, engine=None):
        data = as_tensor(data)
        with self._s.masked(mask, "nisa.tensor_scalar"):
            return self._s.prepare("tensor_scalar", {"data": data, "operand0": operand0, "operand1": operand1},
                                   {"op0": _op(op0, ALU_OPS, "tensor_scalar", "op0"),
                                    "op1": _op(op1, ALU_OPS, "tensor_scalar", "op1"), "reverse0": bool(reverse0),
                                    "reverse1": bool(reverse1)}, engine, data.shape, dtype or data.dtype, SBUF)

    def tensor_reduce(self, op, data, axis, *, dtype=None, negate=False, keepdims=False, mask=None):
        data = as_tensor(data)
        axes = isa.reduce_axes(axis, data.ndim)
        shape = tuple(1 if i in axes else d for i, d in enumerate(data.shape) if keepdims or i not in axes)
        with self._s.masked(mask, "nisa.tensor_reduce"):  # over data: left-out elements do not count
            return self._s.prepare("tensor_reduce", {"data": data}, {"op": _op(op, REDUCE_OPS, "tensor_reduce"),
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
        _unsupported("nisa.dma_copy", dst_rmw_op=dst_rmw_op)
        with self._s.masked(mask, "nisa.dma_copy"):
            self._s.run("dma_copy", {"dst": dst, "src": src}, {})

    def dma_transpose(self, src, *, axes=None, mask=None, dtype=None, dge_mode=None):
        _unsupported("nisa.dma_transpose", mask=mask)
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
                                   {"op0": _op(op0, ALU_OPS, "scalar_tensor_tensor", "op0"),
                                    "op1": _op(op1, ALU_OPS, "scalar_tensor_tensor", "op1"), "reverse0": bool(reverse0),
                                    "reverse1": bool(reverse1)}, None, data.shape, dtype or data.dtype, SBUF)

    def tensor_scalar_reduce(self, *, data, op0, operand0, reduce_op, reduce_res, reverse0=False, dtype=None, mask=None):
        _unsupported("nisa.tensor_scalar_reduce", mask=mask, reverse0=reverse0)
        data = as_tensor(data)
        return self._s.prepare("tensor_scalar_reduce", {"data": data, "operand0": operand0, "reduce_res": reduce_res},
                               {"op0": _op(op0, ALU_OPS, "tensor_scalar_reduce", "op0"),
                                "reduce_op": _op(reduce_op, REDUCE_OPS, "tensor_scalar_reduce", "reduce_op")},
                               None, data.shape, dtype or data.dtype, SBUF)

    def tensor_copy_predicated(self, *, src, dst, predicate, reverse_pred=False, mask=None, dtype=None):
        _unsupported("nisa.tensor_copy_predicated", dtype=dtype)
        with self._s.masked(mask, "nisa.tensor_copy_predicated"):
            self._s.run("tensor_copy_predicated", {"dst": dst, "src": src, "predicate": predicate},
                        {"reverse_pred": bool(reverse_pred)})

    def tensor_partition_reduce(self, op, data, *, mask=None, dtype=None):
        _unsupported("nisa.tensor_partition_reduce", mask=mask)
        data = as_tensor(data)
        return self._s.prepare("tensor_partition_reduce", {"data": data},
                               {"op": _op(op, PARTITION_OPS, "tensor_partition_reduce")}, None, (1, *data.shape[1:]),
                               dtype or data.dtype, SBUF)

    def _fixed(self, name: str, width: int, operand: str, args: tuple, kw: dict, mask: Any, dtype: Any) -> Result:
        """An instruction with a fixed number of results per partition (``bn_stats``: 6, ``max8``: 8 ...)."""
        _unsupported(f"nisa.{name}", mask=mask)
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
        _unsupported("nisa.select_reduce", mask=mask, dtype=dtype)
        self._s.run("select_reduce", {"dst": dst, "predicate": predicate, "on_true": on_true, "on_false": on_false,
                                      "reduce_res": reduce_res},
                    _select_attrs(reduce_cmd, reduce_op, reverse_pred=bool(reverse_pred)))

    def range_select(self, *, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=None, reduce_res=None,
                     reduce_op=None, range_start=0.0, on_false_value=None, mask=None, dtype=None):
        _unsupported("nisa.range_select", mask=mask)
        on_true = as_tensor(on_true_tile)
        return self._s.prepare("range_select", {"on_true_tile": on_true, "bound0": bound0, "bound1": bound1,
                                                "reduce_res": reduce_res},
                               _range_attrs(comp_op0, comp_op1, reduce_cmd, reduce_op, range_start, on_false_value), None,
                               on_true.shape, dtype or on_true.dtype, SBUF)

    def dropout(self, data, prob, *, mask=None, dtype=None):
        _unsupported("nisa.dropout", mask=mask)
        data = as_tensor(data)
        return self._s.prepare("dropout", {"data": data, "prob": prob}, {}, None, data.shape, dtype or data.dtype, SBUF)

    def nc_match_replace8(self, *, data, vals, imm, dst_idx=None, mask=None, dtype=None):
        _unsupported("nisa.nc_match_replace8", mask=mask)
        data = as_tensor(data)
        return self._s.prepare("nc_match_replace8", {"data": data, "vals": vals, "dst_idx": dst_idx}, {"imm": float(imm)}, None,
                               data.shape, dtype or data.dtype, SBUF)

    def tensor_tensor_scan(self, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, *, dtype=None, mask=None):
        _unsupported("nisa.tensor_tensor_scan", mask=mask)
        d0 = as_tensor(data0)
        return self._s.prepare("tensor_tensor_scan", {"data0": d0, "data1": data1, "initial": initial},
                               {"op0": _op(op0, ALU_OPS, "tensor_tensor_scan", "op0"),
                                "op1": _op(op1, ALU_OPS, "tensor_tensor_scan", "op1"), "reverse0": bool(reverse0),
                                "reverse1": bool(reverse1)}, None, d0.shape, dtype or d0.dtype, SBUF)

    def affine_select(self, pred, on_true_tile, on_false_value, *, mask=None, dtype=None):
        _unsupported("nisa.affine_select", mask=mask)
        on_true = as_tensor(on_true_tile)
        return self._s.prepare("affine_select", {"on_true_tile": on_true},
                               {"expr": np.asarray(pred), "on_false_value": float(on_false_value)}, None, on_true.shape,
                               dtype or on_true.dtype, SBUF)
