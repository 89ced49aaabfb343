"""The simulator's values: trace records, on-chip and HBM buffers, tensors and views, legacy results, memory
tokens and loop indices. The bottom of the simulator: a buffer knows its :class:`session.Session` only through the
few calls of :class:`Owner` (the session module builds on this one)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from . import isa
from .isa import HBM, PSUM, SBUF

CURRENT, LEGACY = "current", "legacy"
ROOTS = {CURRENT: "nki", LEGACY: "neuronxcc"}
"""Each dialect's top-level package."""


class Owner(Protocol):
    """What the values ask of the session that owns their buffers (:class:`session.Session`)."""

    def allocate(self, shape: Any, dtype: Any, space: str, name: str | None = None,
                 what: str = "nl.ndarray") -> NkiTensor: ...

    def commit(self, result: Result, dst: NkiTensor, accumulate: bool | None) -> None: ...

    def assign(self, target: NkiTensor, value: Any) -> None: ...

    def accumulate(self, target: NkiTensor, value: Any) -> None: ...


# ----------------------------------------------------------------------------------------------- trace
@dataclass(frozen=True)
class TraceOperand:
    name: str
    shape: tuple[int, ...]
    dtype: str
    space: str
    nbytes: int
    buffer: int  # allocation id: operands sharing it touch the same buffer (dependences for a replay)


@dataclass(frozen=True)
class TraceEntry:
    index: int
    instruction: str
    engine: str
    operands: tuple[TraceOperand, ...]
    attrs: tuple[tuple[str, Any], ...]
    seconds: float  # isa.latency: how long the instruction keeps its engine busy
    line: int | None  # kernel source line


@dataclass(frozen=True)
class Trace:
    target: str
    dialect: str
    entries: tuple[TraceEntry, ...]

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[TraceEntry]:
        return iter(self.entries)

    def busy_seconds(self) -> dict[str, float]:
        """Seconds each engine is busy (no overlap modelled: a replay schedules the entries)."""
        out: dict[str, float] = {}
        for e in self.entries:
            out[e.engine] = out.get(e.engine, 0.0) + e.seconds
        return out

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for e in self.entries:
            out[e.instruction] = out.get(e.instruction, 0) + 1
        return out

    def rows(self) -> list[dict[str, Any]]:
        """One flat row per instruction (``pl.DataFrame(trace.rows())``): bytes read and written by memory."""
        rows = []
        for e in self.entries:
            row = {"index": e.index, "instruction": e.instruction, "engine": e.engine, "seconds": e.seconds,
                   "line": e.line, **{f"{s}_bytes": 0 for s in (HBM, SBUF, PSUM)}}
            for o in e.operands:
                row[f"{o.space}_bytes"] += o.nbytes
            rows.append(row)
        return rows


# ------------------------------------------------------------------------------------------ memory tokens
class Token:
    """An NKI token (``nisa.engine.vector``, ``nl.add`` ...): a kind and a name."""

    def __init__(self, kind: str, name: str):
        self.kind, self.name = kind, name

    def __repr__(self) -> str:
        return f"{self.kind}.{self.name}"


class BufferKind(Token):
    """``nl.sbuf``, ``nl.psum``, ``nl.hbm`` / ``nl.shared_hbm`` / ``nl.private_hbm``: equal when the memory is."""

    def __init__(self, name: str, space: str):
        super().__init__("nl", name)
        self.space = space

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BufferKind) and other.space == self.space

    def __hash__(self) -> int:
        return hash(self.space)


BUFFER_KINDS = {HBM: BufferKind("hbm", HBM), SBUF: BufferKind("sbuf", SBUF), PSUM: BufferKind("psum", PSUM)}
"""The token of each memory (what ``tensor.buffer`` gives)."""


# --------------------------------------------------------------------------------------- buffers, views
class ParDim(int):
    """``nl.par_dim(n)``: marks the partition axis of a buffer shape (leading axes are block axes)."""


class Buffer:
    __slots__ = ("__weakref__", "id", "name", "shape", "dtype", "space", "part_axis", "data", "written", "session",
                 "cost", "charged")

    def __init__(self, session: Owner, id: int, name: str, shape: tuple[int, ...], dtype: np.dtype, space: str,
                 part_axis: int):
        self.session, self.id, self.name, self.shape, self.dtype, self.space = session, id, name, shape, dtype, space
        self.part_axis = part_axis
        self.cost, self.charged = 0, [0]  # SBUF bytes per partition or PSUM banks; what is held now (shared with
        size = math.prod(shape)           # the finalizer that gives it back)
        self.data = np.full(size, np.nan, dtype) if dtype in isa.FLOAT_DTYPES else np.zeros(size, dtype)
        self.written = np.zeros(size, bool)

    def coords(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(partition, element offset within the partition) of flat element indices."""
        inner = math.prod(self.shape[self.part_axis + 1:])
        parts = self.shape[self.part_axis] if self.shape else 1
        return (flat // inner) % parts, (flat // (inner * parts)) * inner + flat % inner


class NkiTensor:
    """What a kernel holds: a view of a simulated buffer, kept as the flat element indices it covers (so any
    NKI indexing of a view is NumPy indexing of that index array). Axis 0 of an on-chip view must be its
    partition axis."""

    __slots__ = ("_buf", "_flat")

    def __init__(self, buf: Buffer, flat: np.ndarray):
        self._buf, self._flat = buf, flat

    shape = property(lambda self: tuple(int(d) for d in self._flat.shape))
    dtype = property(lambda self: self._buf.dtype)
    ndim = property(lambda self: self._flat.ndim)
    size = property(lambda self: int(self._flat.size))
    buffer = property(lambda self: BUFFER_KINDS[self._buf.space])
    name = property(lambda self: self._buf.name)

    def __getitem__(self, index: Any) -> NkiTensor:
        items, outside = _subscript(self, index)
        flat = self._flat[items]
        if outside is not None:  # an index expression past the tensor: those elements exist only under a mask
            flat = np.where(np.broadcast_to(outside, flat.shape), OUTSIDE, flat)
        return NkiTensor(self._buf, flat)

    def __setitem__(self, index: Any, value: Any) -> None:
        self._buf.session.assign(self[index], value)

    def __iadd__(self, value: Any) -> NkiTensor:
        self._buf.session.accumulate(self, value)
        return self

    def reshape(self, *shape: Any) -> NkiTensor:
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return NkiTensor(self._buf, self._flat.reshape(tuple(int(s) for s in shape)))

    def ap(self, pattern: Any, offset: int = 0, scalar_offset: Any = None, vector_offset: Any = None,
           indirect_dim: int = 0, dtype: Any = None) -> NkiTensor:
        """An access pattern (NKI 2.x, ``nl.ndarray.ap``): the tensor flattened, element ``offset + sum(i_d *
        step_d)`` at index ``(i_0, i_1, ...)`` of a view shaped by the pattern's ``[step, num]`` pairs. Only on
        a whole ``nl.ndarray`` (not a view of one); on SBUF / PSUM the first pair walks whole partitions (its
        step is the tensor's elements per partition). ``scalar_offset`` / ``vector_offset`` (indirect access)
        and ``dtype`` (a reinterpreting cast) are not modelled."""
        if scalar_offset is not None or vector_offset is not None or dtype is not None:
            what = "scalar_offset" if scalar_offset is not None else "vector_offset" if vector_offset is not None else "dtype"
            raise NotImplementedError(f"tensor.ap: {what} is not supported by the axon_eg NKI simulator")
        size = self._buf.data.size
        if self._flat.size != size or not np.array_equal(self._flat.ravel(), np.arange(size)):
            raise isa.NkiSimulationError(f"{self._buf.name}.ap: an access pattern is only allowed on an nl.ndarray, "
                                         "not on a view or tile of one")
        try:
            pairs = [(int(step), int(num)) for step, num in pattern]
        except (TypeError, ValueError):
            raise isa.NkiSimulationError(f"{self._buf.name}.ap: pattern must be [[step, num], ...], got {pattern!r}") from None
        if not pairs or any(num < 1 for _, num in pairs):
            raise isa.NkiSimulationError(f"{self._buf.name}.ap: every [step, num] needs num >= 1, got {pattern!r}")
        if self._buf.space != HBM:
            per_partition = size // max(1, self.shape[0] if self.shape else 1)
            if pairs[0][0] != per_partition:
                raise isa.NkiSimulationError(
                    f"{self._buf.name}.ap: on {self._buf.space} the first [step, num] walks whole partitions, its step "
                    f"must be {per_partition} (the elements per partition), got {pairs[0][0]}")
        index = np.full([num for _, num in pairs], int(offset), dtype=np.int64)
        for axis, (step, num) in enumerate(pairs):
            shape = [1] * len(pairs)
            shape[axis] = num
            index = index + step * np.arange(num).reshape(shape)
        if index.min() < 0 or index.max() >= size:
            raise isa.NkiSimulationError(f"{self._buf.name}.ap: pattern {pairs} at offset {offset} reaches elements "
                                         f"{int(index.min())}..{int(index.max())} of a tensor of {size}")
        return NkiTensor(self._buf, index)

    def __repr__(self) -> str:
        return f"<{self._buf.space} tensor {self._buf.name} view {list(self.shape)} {isa.dtype_name(self.dtype)}>"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise NotImplementedError(f"tensor.{name} is not supported by the axon_eg NKI simulator")

    def _arith(self, *_: Any) -> Any:
        raise NotImplementedError("arithmetic operators on NKI tensors are not supported by the simulator; use "
                                  "nisa.tensor_tensor / nisa.tensor_scalar / nisa.activation")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = __neg__ = _arith


OUTSIDE = -1
"""The flat index of a view element that an index expression put past its tensor (``a[i_p + k * 128, i_f]`` on
the last partial tile): such a view may be used only by an instruction whose ``mask`` leaves those elements
out; reading or writing one raises IndexError (:meth:`session.Session.elements`)."""


def _subscript(t: NkiTensor, index: Any) -> tuple[tuple, np.ndarray | None]:
    """Check an NKI subscript against the view's shape; slices mixed with nl.arange index arrays become
    index arrays along their own axis (``t[i_p, 0:512]`` with ``i_p`` of shape [128, 1]). Ints and slices must
    lie inside the view; index expressions may reach past it (a masked partial tile): their values are clipped
    and the second result marks the elements past the view (None when there are none)."""
    items = [plain(x) for x in (index if isinstance(index, tuple) else (index,))]
    if any(x is Ellipsis for x in items):
        at = items.index(Ellipsis)
        items[at:at + 1] = [slice(None)] * (t.ndim - len(items) + 1)
    if len(items) > t.ndim:
        raise IndexError(f"{len(items)} indices for {t!r}")
    items += [slice(None)] * (t.ndim - len(items))
    for axis, (x, dim) in enumerate(zip(items, t.shape)):
        where = f"axis {axis} of {t!r}"
        if isinstance(x, (int, np.integer)):
            if not 0 <= x < dim:
                raise IndexError(f"index {x} out of range [0, {dim}) on {where}")
            items[axis] = int(x)
        elif isinstance(x, slice):
            start, stop, step = x.start or 0, dim if x.stop is None else x.stop, x.step or 1
            if not (0 <= start <= stop <= dim and step > 0):
                raise IndexError(f"slice {start}:{stop}:{step} out of range [0, {dim}] on {where}")
            items[axis] = slice(int(start), int(stop), int(step))
        else:
            a = np.asarray(x)
            if a.dtype.kind not in "iu":
                raise IndexError(f"index {x!r} on {where} is not an integer index expression")
            items[axis] = a
    arrays = [x for x in items if isinstance(x, np.ndarray)]
    if arrays and any(isinstance(x, slice) for x in items):
        free = [axis for axis, x in enumerate(items) if not isinstance(x, int)]
        if any(a.ndim != len(free) for a in arrays):
            raise NotImplementedError(f"mixing slices with index expressions of other ranks on {t!r}: give every axis "
                                      f"an nl.arange expression or a slice")
        for k, axis in enumerate(free):
            if isinstance(items[axis], slice):
                s = items[axis]
                items[axis] = np.arange(s.start, s.stop, s.step).reshape([-1 if q == k else 1 for q in range(len(free))])
    outside = None
    for axis, (x, dim) in enumerate(zip(items, t.shape)):
        if isinstance(x, np.ndarray) and x.size and (x.min() < 0 or x.max() >= dim):
            past = (x < 0) | (x >= dim)
            outside = past if outside is None else outside | past
            items[axis] = np.clip(x, 0, dim - 1)
    return tuple(items), outside


# ---------------------------------------------------------------------------------------- legacy results
class Result:
    """What a legacy-dialect instruction returns. Its values are computed at the call; where they land is
    decided by the first use: ``t[...] = r`` writes them into ``t``, ``psum[...] += r`` accumulates a matmul in
    PSUM, and using ``r`` as an operand first writes it to a new tile in the instruction's default memory."""

    def __init__(self, session: Owner, name: str, pending: dict[str, Any], shape: tuple[int, ...],
                 dtype: np.dtype, space: str):
        self._session, self._name, self._pending = session, name, pending
        self.shape, self.dtype, self._space, self._tile_cache = shape, dtype, space, None

    def _tile(self) -> NkiTensor:
        if self._tile_cache is None:
            dst = self._session.allocate(self.shape, self.dtype, self._space, what=self._name)
            self._session.commit(self, dst, accumulate=False)
            self._tile_cache = dst
        return self._tile_cache

    def __getitem__(self, index: Any) -> NkiTensor:
        return self._tile()[index]

    def __setitem__(self, index: Any, value: Any) -> None:
        self._tile()[index] = value

    def __iadd__(self, value: Any) -> NkiTensor:
        tile = self._tile()
        tile += value
        return tile

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._tile(), name)


def as_tensor(x: Any) -> Any:
    """A legacy result as the tile it lands in (written now if it has not landed); anything else as is."""
    return x._tile() if isinstance(x, Result) else x


# ------------------------------------------------------------------------------------------ loop indices
class NkiLoopIndexError(isa.NkiSimulationError, TypeError):
    """Python-level control flow on a symbolic loop index (what the NKI tracer rejects)."""


class LoopIndex(int):
    """An index of ``nl.affine_range`` / ``nl.sequential_range``: symbolic on a NeuronCore, so the simulator
    lets it take part in integer arithmetic, subscripts, slices and ``nl.arange`` expressions only. Python
    comparisons, ``bool()`` and hence ``if``, ``min()`` and ``max()`` raise :class:`NkiLoopIndexError`."""

    kind: str

    def __new__(cls, value: int, kind: str) -> LoopIndex:
        self = super().__new__(cls, value)
        self.kind = kind
        return self

    def _wrap(self, value: Any) -> Any:
        return LoopIndex(value, self.kind) if isinstance(value, int) and not isinstance(value, bool) else value

    def _refuse(self, *_: Any) -> Any:
        raise NkiLoopIndexError(
            f"Python comparison, bool(), if, min() or max() on an nl.{self.kind} loop index (or a value computed from "
            f"one, {int(self)} here): "
            f"on a NeuronCore it is symbolic, not a Python int; loop with nl.static_range for trace-time ints, "
            f"or keep the tile size constant and use a mask")

    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = __bool__ = _refuse
    __hash__ = int.__hash__

    def __repr__(self) -> str:
        return f"<nl.{self.kind} index {int(self)}>"

    __str__ = __repr__


def _arith(name: str) -> Any:
    op = getattr(int, name)

    def method(self: LoopIndex, *other: Any) -> Any:
        if other and (not isinstance(other[0], int) or isinstance(other[0], bool)):
            return NotImplemented
        return self._wrap(op(int(self), *(int(o) for o in other)))
    method.__name__ = name
    return method


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__floordiv__",
              "__rfloordiv__", "__mod__", "__rmod__", "__neg__", "__pos__"):
    setattr(LoopIndex, _name, _arith(_name))


def loop_range(kind: str) -> Any:
    """``nl.affine_range`` / ``nl.sequential_range``: yields :class:`LoopIndex` values."""

    def loop(*args: Any) -> Iterator[LoopIndex]:
        for i in range(*(int(a) for a in args)):
            yield LoopIndex(i, kind)
    loop.__name__ = kind
    return loop


def plain(x: Any) -> Any:
    """A loop index as the plain int it stands for (the simulator's own bookkeeping); anything else as is."""
    if isinstance(x, LoopIndex):
        return int(x)
    if isinstance(x, slice):
        return slice(plain(x.start), plain(x.stop), plain(x.step))
    return x
