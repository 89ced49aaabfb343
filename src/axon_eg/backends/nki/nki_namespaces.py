"""The fake ``nki.language`` / ``nki.isa`` (and legacy ``neuronxcc.nki``) namespaces the simulator installs, one
class per namespace over a :class:`session.Session`: :class:`Language` here (``nl``: allocation, load/store,
indexing, dtypes, op tokens, the high-level tile functions), the ``nisa`` classes in :mod:`.nki_isa_namespaces`.
A namespace's public attributes are exactly its NKI names (:func:`members`); its helpers are private. The
argument checks both share (``unsupported``, ``op_of``, ``cmd_of``, ``free_size``, ``enum_namespace``) live
there."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import ml_dtypes
import numpy as np

from . import isa
from .isa import ACTIVATIONS, ALU_OPS, HBM, PSUM, SBUF
from .nki_isa_namespaces import LegacyIsa, Namespace, unsupported
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
        self.tile_size = Namespace("nl.tile_size", {"pmax": limits("limits.partition_max"),
                                                     "gemm_stationary_fmax": limits("limits.matmul.stationary_free_max"),
                                                     "gemm_moving_fmax": limits("limits.matmul.moving_free_max"),
                                                     "bn_stats_fmax": limits("limits.vector.bn_stats_free_max")})
        if session.dialect == LEGACY:  # the legacy module's float constants (min: the most negative finite value)
            self.fp32 = Namespace("nl.fp32", {"min": float(np.finfo(np.float32).min)})
            self.bfp16 = Namespace("nl.bfp16", {"min": float(ml_dtypes.finfo(ml_dtypes.bfloat16).min)})

    # -- allocation, load / store
    @staticmethod
    def _space(buffer: Any) -> str:
        if buffer is None:
            return SBUF
        if not isinstance(buffer, BufferKind):
            raise NotImplementedError(f"buffer={buffer!r} is not supported; use nl.sbuf, nl.psum or nl.shared_hbm")
        return buffer.space

    def ndarray(self, shape: Any, dtype: Any, buffer: Any = None, name: str | None = None, **kw: Any) -> NkiTensor:
        unsupported("nl.ndarray", **kw)
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
        unsupported("nl.load", **kw)
        src = as_tensor(src)
        with self._s.masked(mask, "nl.load"):
            return self._s.prepare("load", {"src": src}, {}, None, src.shape, dtype or src.dtype, SBUF)

    def store(self, dst: Any, value: Any, *, mask: Any = None, **kw: Any) -> None:
        unsupported("nl.store", **kw)
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
        unsupported("nl.shared_identity_matrix", dst=dst)
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
        unsupported("nl.copy", **kw)
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
        unsupported("nl.transpose", mask=mask)
        return self._isa.nc_transpose(x, dtype=dtype)

    def matmul(self, x: Any, y: Any, transpose_x: bool = False, *, mask: Any = None) -> Result:
        """``x @ y`` on the Tensor engine into PSUM: ``x`` is [M, K] (``transpose_x``: given as [K, M], the
        stationary operand as the engine takes it), ``y`` is [K, N]; an untransposed ``x`` is transposed first."""
        unsupported("nl.matmul", mask=mask)
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
        unsupported("nl.device_print", mask=mask)
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
        unsupported("nl.var", mask=mask)
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
        unsupported("nl.softmax", mask=mask)
        legacy, x = self._isa, as_tensor(x)
        top = legacy.tensor_reduce("maximum", x, axis, dtype=np.float32, keepdims=True)
        e = legacy.activation("exp", self._with_column(x, "subtract", top, np.float32), dtype=np.float32)
        total = legacy.tensor_reduce("add", e, axis, dtype=np.float32, keepdims=True)
        return self._with_column(e, "divide", total, dtype or x.dtype)

    def rms_norm(self, x: Any, w: Any, axis: Any, n: int, epsilon: float = 1e-6, dtype: Any = None,
                 compute_dtype: Any = None, *, mask: Any = None) -> Result:
        """x / sqrt(sum(x^2, axis) / n + epsilon) * w."""
        unsupported("nl.rms_norm", mask=mask)
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
        unsupported("nl.random_seed", mask=mask)
        self._s.seed(seed, "nl.random_seed")

    def rand(self, shape: Any, dtype: Any = np.float32, buffer: Any = None, name: str | None = None) -> Result:
        """Uniform values in [0, 1): 16 random bits per element (nisa.rng into a uint16 tile) times 2**-16."""
        bits = self.ndarray(shape, np.uint16, buffer, name)
        self._s.run("rng", {"dst": bits}, {}, isa.VECTOR)
        return self._isa.tensor_scalar(bits, "multiply", 2.0 ** -16, dtype=dtype)

    def dropout(self, x: Any, rate: Any, dtype: Any = None, *, mask: Any = None) -> Result:
        return self._isa.dropout(x, rate, dtype=dtype, mask=mask)


# ------------------------------------------------------------------------------------------------ nki.isa
