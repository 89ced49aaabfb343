"""Run NKI kernel source with NumPy, in either NKI dialect, enforcing the Trainium limits of :mod:`.isa`.

    outputs = simulate(source, a, b, target="trn2")                 # source text, a Path or a function
    outputs, trace = simulate(source, a, b, target="trn2", trace=True)

The kernel runs against fake ``nki`` / ``nki.language`` / ``nki.isa`` modules (current dialect: instructions
write a destination, ``nisa.nc_matmul(dst, stationary, moving)``) or ``neuronxcc.nki...`` (legacy dialect:
instructions return tiles, ``res[...] += nisa.nc_matmul(stationary, moving)``), resolved by the kernel's own
imports and placed in ``sys.modules`` only while it runs (never over a real installed package).

Semantics: one instruction at a time, in program order. Every new buffer holds NaN and reading an element
no instruction wrote raises NkiUninitializedError, as does returning one. Engines compute in fp32; values
stored to bf16/fp16 tiles are rounded to nearest even; PSUM holds fp32 and ``nc_matmul`` accumulates there.
Memory spaces, tile limits, live PSUM banks and live SBUF bytes per partition are checked against the
hardware file; an on-chip buffer holds its memory from its first write until the kernel drops its last
reference (CPython reference counting), a stand-in for the compiler's liveness. Legacy ``nl.zeros(...,
buffer=nl.psum)`` declares an empty accumulation bank (no instruction); ``+=`` of anything but a matmul into
PSUM is a Vector-engine add. The trace lists each instruction with its engine, operands (shape, dtype,
memory, bytes, buffer id), source line and latency from :func:`isa.latency`, for a cost model to replay.

Supported surface (anything else raises NotImplementedError naming the API): ``nki.jit``/``baremetal``;
``nl.ndarray/zeros/ones/load/store/copy``, ``nl.arange/mgrid/ds/par_dim``, ``nl.affine_range/sequential_range/
static_range``, ``nl.tile_size.{pmax, gemm_stationary_fmax, gemm_moving_fmax}``, dtypes, buffers and op tokens;
the ``nisa`` instructions of :data:`isa.INSTRUCTIONS` (plus ``activation_reduce``) in the dialect's
signature, ``nisa.engine/reduce_cmd/dge_mode/oob_mode/nc_version``; views by ints, slices and ``nl.arange``
index expressions, ``.reshape``, ``.shape``, ``.dtype``, ``.buffer``; ``t[...] = r`` and ``t[...] += r``.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import importlib.util
import inspect
import linecache
import math
import sys
import textwrap
import threading
import types
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from axon_eg import hw
from axon_eg.errors import AxonError, DtypeError

from . import isa
from .isa import HBM, ON_CHIP, PSUM, SBUF, NkiLimitError, NkiSimulationError, NkiUninitializedError, Operand

CURRENT, LEGACY = "current", "legacy"
_ROOTS = {CURRENT: "nki", LEGACY: "neuronxcc"}
_SCALAR_OPERANDS = {"bias", "scale", "operand0", "operand1"}
_LOCK = threading.RLock()
_MISSING = object()


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


# --------------------------------------------------------------------------------------- buffers, views
class _ParDim(int):
    """``nl.par_dim(n)``: marks the partition axis of a buffer shape (leading axes are block axes)."""


class _Buffer:
    __slots__ = ("__weakref__", "id", "name", "shape", "dtype", "space", "part_axis", "data", "written", "session",
                 "cost", "charged")

    def __init__(self, session: _Session, id: int, name: str, shape: tuple[int, ...], dtype: np.dtype, space: str,
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

    def __init__(self, buf: _Buffer, flat: np.ndarray):
        self._buf, self._flat = buf, flat

    shape = property(lambda self: tuple(int(d) for d in self._flat.shape))
    dtype = property(lambda self: self._buf.dtype)
    ndim = property(lambda self: self._flat.ndim)
    size = property(lambda self: int(self._flat.size))
    buffer = property(lambda self: _BUFFER_KINDS[self._buf.space])
    name = property(lambda self: self._buf.name)

    def __getitem__(self, index: Any) -> NkiTensor:
        return NkiTensor(self._buf, self._flat[_subscript(self, index)])

    def __setitem__(self, index: Any, value: Any) -> None:
        self._buf.session.assign(self[index], value)

    def __iadd__(self, value: Any) -> NkiTensor:
        self._buf.session.accumulate(self, value)
        return self

    def reshape(self, *shape: Any) -> NkiTensor:
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return NkiTensor(self._buf, self._flat.reshape(tuple(int(s) for s in shape)))

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


def _subscript(t: NkiTensor, index: Any) -> tuple:
    """Check an NKI subscript against the view's shape; slices mixed with nl.arange index arrays become
    index arrays along their own axis (``t[i_p, 0:512]`` with ``i_p`` of shape [128, 1])."""
    items = list(index) if isinstance(index, tuple) else [index]
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
            if a.size and (a.min() < 0 or a.max() >= dim):
                raise IndexError(f"index expression with values {a.min()}..{a.max()} out of range [0, {dim}) on {where}")
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
    return tuple(items)


# ---------------------------------------------------------------------------------------- legacy results
class _Result:
    """What a legacy-dialect instruction returns. Its values are computed at the call; where they land is
    decided by the first use: ``t[...] = r`` writes them into ``t``, ``psum[...] += r`` accumulates a matmul in
    PSUM, and using ``r`` as an operand first writes it to a new tile in the instruction's default memory."""

    def __init__(self, session: _Session, name: str, pending: dict[str, Any], shape: tuple[int, ...],
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


def _tensor(x: Any) -> Any:
    return x._tile() if isinstance(x, _Result) else x


# ---------------------------------------------------------------------------------------------- session
class _Session:
    """The state of one simulation: target, allocations, Scalar-engine reduce registers, the trace."""

    def __init__(self, spec: hw.HardwareSpec, dialect: str, filename: str):
        self.spec, self.dialect, self.filename = spec, dialect, filename
        self.entries: list[TraceEntry] = []
        self.ids = 0
        self.live = {SBUF: 0, PSUM: 0}  # SBUF bytes per partition, PSUM banks
        lanes = spec.value("limits.partition_max")
        self.regs, self.regs_valid = np.full((lanes, 1), np.nan), np.zeros(lanes, bool)

    # -- memory
    def allocate(self, shape: Any, dtype: Any, space: str, name: str | None = None, what: str = "nl.ndarray") -> NkiTensor:
        """A new buffer (NaN-filled). On chip it holds its SBUF bytes per partition (PSUM: banks) from its first
        write until the kernel drops its last view: a buffer's live range, as the compiler's allocator sees it
        (charging at ``nl.ndarray`` would count a loop's tile twice, as Python makes the next before the last
        is dropped)."""
        shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        part_axis = next((i for i, d in enumerate(shape) if isinstance(d, _ParDim)), 0)
        shape = tuple(int(d) for d in shape)
        self.ids += 1
        line = self.line()
        name = name or f"{space}{self.ids}" + (f"@line{line}" if line else "")
        dtype = isa.as_dtype(dtype, f"{what} {name}")
        buf = _Buffer(self, self.ids, name, shape, dtype, space, part_axis)
        if space in ON_CHIP:
            parts = shape[part_axis] if shape else 1
            self._at_most(what, name, "partition size", parts, "limits.partition_max")
            per_partition = math.prod(shape) // max(parts, 1) * dtype.itemsize
            buf.cost = per_partition if space == SBUF else -(-per_partition // self.spec.value("memory.psum.bank"))
            weakref.finalize(buf, _release, self.live, space, buf.charged)
        index = np.int32 if buf.data.size < 2**31 else np.int64
        return NkiTensor(buf, np.arange(buf.data.size, dtype=index).reshape(shape))

    def charge(self, buf: _Buffer, instruction: str) -> None:
        """Hold ``buf``'s on-chip memory from its first write (see allocate)."""
        if buf.space not in ON_CHIP or buf.charged[0]:
            return
        key, what = ("memory.sbuf.per_partition", "SBUF bytes per partition live") if buf.space == SBUF else \
            ("memory.psum.banks", "PSUM banks live")
        self._at_most(instruction, buf.name, what, self.live[buf.space] + buf.cost, key)
        self.live[buf.space] += buf.cost
        buf.charged[0] = buf.cost

    def _at_most(self, what: str, operand: str, quantity: str, value: int, key: str) -> None:
        limit = self.spec.value(key)
        if value > limit:
            raise NkiLimitError(what, operand, limit, value, what=quantity, key=key, target=self.spec.name)

    def hbm_input(self, array: Any, position: int) -> Any:
        if not isinstance(array, np.ndarray):
            return array  # meta-parameters pass through
        try:
            isa.as_dtype(array.dtype)
        except DtypeError:
            raise DtypeError(f"kernel input {position}: {array.dtype} is not an NKI dtype; pass one of "
                             f"{', '.join(isa.DTYPES)} (Trainium has no float64)") from None
        t = self.allocate(array.shape, array.dtype, HBM, name=f"input{position}")
        t._buf.data[:] = array.reshape(-1)
        t._buf.written[:] = True
        return t

    def line(self) -> int | None:
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename == self.filename:
                return frame.f_lineno
            frame = frame.f_back
        return None

    # -- operands
    def operand(self, instruction: str, key: str, t: NkiTensor) -> Operand:
        buf = t._buf
        if buf.space in ON_CHIP and t.ndim:
            parts = buf.coords(t._flat)[0].reshape(t.shape[0], -1)
            if (parts != parts[:, :1]).any() or len(np.unique(parts[:, 0])) != t.shape[0]:
                raise NkiSimulationError(f"{instruction}: {key} {t!r} does not keep the partition axis of {buf.name} "
                                         f"{list(buf.shape)} on its axis 0 (one distinct partition per row)")
        return Operand(t.shape, buf.dtype, buf.space)

    def read(self, instruction: str, key: str, t: NkiTensor) -> np.ndarray:
        written = t._buf.written[t._flat]
        if not written.all():
            first = np.unravel_index(int(np.argmin(written)), t.shape) if t.ndim else ()
            raise NkiUninitializedError(f"{instruction}: {key} reads {int((~written).sum())} of {t.size} elements that "
                                        f"no instruction wrote ({t!r}, first at {tuple(map(int, first))}); new buffers "
                                        f"hold NaN")
        return t._buf.data[t._flat].astype(np.float64)

    def write(self, instruction: str, t: NkiTensor, values: np.ndarray, accumulate: bool | None = False) -> None:
        buf, flat = t._buf, t._flat
        self.charge(buf, instruction)
        values = np.asarray(values, np.float64).reshape(t.shape).astype(np.float32)  # engines compute in fp32
        if accumulate is not False:  # nc_matmul into PSUM: True adds, None adds where already written
            old = self.read("nc_matmul", "dst (accumulate=True)", t) if accumulate else buf.data[flat].astype(np.float32)
            values = np.where(buf.written[flat], old.astype(np.float32) + values, values) if accumulate is None \
                else old.astype(np.float32) + values
        if buf.dtype.kind in "iu":
            values = np.rint(values)
        buf.data[flat] = values.astype(buf.dtype)
        buf.written[flat] = True

    def split(self, instruction: str, operands: Mapping[str, Any]) -> tuple[dict[str, NkiTensor], dict[str, Any]]:
        """NkiTensor operands, and scalar operands (bias, scale, operand0/1) as attributes."""
        tensors, scalars = {}, {}
        for key, value in operands.items():
            value = _tensor(value)
            if isinstance(value, NkiTensor):
                tensors[key] = value
            elif key in _SCALAR_OPERANDS and (value is None or isinstance(value, (int, float, np.number))):
                scalars[key] = None if value is None else float(value)
            elif value is not None:
                raise NkiSimulationError(f"{instruction}: {key} must be an NKI tile, got {type(value).__name__} {value!r}")
        return tensors, scalars

    def engine(self, instruction: str, engine: Any, ops: Mapping[str, Operand]) -> str:
        name = getattr(engine, "name", engine)
        if name not in (None, "unknown"):
            return name
        if instruction == "nc_transpose":  # the legacy frontend picks by shape before the destination exists
            return isa.TENSOR if ops["data"].space == SBUF and ops["dst"].space == PSUM else isa.VECTOR
        return isa.get(instruction).engines[0]

    # -- execution
    def run(self, instruction: str, operands: Mapping[str, Any], attrs: Mapping[str, Any], engine: Any = None) -> None:
        """Current dialect: check, read, compute and write one instruction whose destination is given."""
        pending = self._prepare(instruction, operands, attrs, engine, dst=None)
        dst = pending["tensors"].pop("dst")
        self._finish(instruction, pending, dst, attrs.get("accumulate", False), replace=False)

    def prepare(self, instruction: str, operands: Mapping[str, Any], attrs: Mapping[str, Any], engine: Any,
                shape: tuple[int, ...], dtype: Any, space: str) -> _Result:
        """Legacy dialect: compute now against a provisional destination; the result decides where it lands."""
        dst = Operand(tuple(int(d) for d in shape), isa.as_dtype(dtype, instruction), space)
        pending = self._prepare(instruction, operands, attrs, engine, dst=dst)
        return _Result(self, instruction, pending, dst.shape, dst.dtype, space)

    def _prepare(self, instruction: str, operands: Mapping[str, Any], attrs: Mapping[str, Any], engine: Any,
                 dst: Operand | None) -> dict[str, Any]:
        instr = isa.get(instruction)
        tensors, scalars = self.split(instruction, operands)
        attrs = {**{k: v for k, v in instr.attributes.items() if v is not isa.REQUIRED}, **scalars, **attrs}
        ops = {k: self.operand(instruction, k, t) for k, t in tensors.items()}
        if dst is not None:
            ops["dst"] = dst
        engine = self.engine(instruction, engine, ops)
        rules = isa.check(instruction, ops, attrs, self.spec, engine)
        ins = {k: self.read(instruction, k, t) for k, t in tensors.items() if k in instr.reads}
        shapes = {k: op.shape for k, op in ops.items()}
        if instruction == "activation":
            ins["reduce_regs"] = self._registers(attrs, ops["data"].partitions, "reduce_res" in tensors)
        outs = instr.semantics(ins, attrs, shapes)
        for key, t in tensors.items():  # side outputs (reduce_res) land now; dst when the destination is known
            if key in instr.writes and key != "dst":
                self.write(instruction, t, outs[key])
        if "reduce_regs" in outs:
            self.regs[: ops["data"].partitions] = outs["reduce_regs"].astype(np.float32)
        entry = self._record(instruction, rules, tensors, dst) if dst is not None else None
        return {"tensors": tensors, "attrs": attrs, "engine": engine, "ops": ops, "values": outs["dst"], "entry": entry}

    def _registers(self, attrs: Mapping[str, Any], lanes: int, read_out: bool) -> np.ndarray:
        cmd = attrs["reduce_cmd"]
        resets = cmd in ("reset", "reset_reduce")
        if not resets and (read_out or (cmd == "reduce" and attrs["reduce_op"])) and not self.regs_valid[:lanes].all():
            raise NkiUninitializedError(
                f"activation: reduce_cmd={cmd} uses the Scalar engine reduce registers of partitions 0..{lanes - 1}, "
                f"which no activation has reset (reduce_res reads the registers; pass reduce_cmd=reset_reduce to "
                f"start a row reduction)")
        if resets:
            self.regs_valid[:lanes] = True
        return self.regs[:lanes].astype(np.float64)

    def commit(self, result: _Result, dst: NkiTensor, accumulate: bool | None) -> None:
        pending = result._pending
        replace = pending["entry"] is not None and not pending.get("committed")
        pending["committed"] = True
        self._finish(result._name, pending, dst, accumulate, replace)

    def _finish(self, instruction: str, pending: dict[str, Any], dst: NkiTensor, accumulate: bool | None,
                replace: bool) -> None:
        ops = {**pending["ops"], "dst": self.operand(instruction, "dst", dst)}
        attrs = {**pending["attrs"], "accumulate": accumulate} if instruction == "nc_matmul" else pending["attrs"]
        rules = isa.check(instruction, ops, attrs, self.spec, pending["engine"])
        if instruction == "nc_matmul":
            self._one_bank(dst)
        self.write(instruction, dst, pending["values"], accumulate if instruction == "nc_matmul" else False)
        entry = self._record(instruction, rules, {**pending["tensors"], "dst": dst}, None)
        if replace:  # the legacy call recorded a provisional entry in program order: complete it
            self.entries.pop()
            self.entries[pending["entry"]] = dataclasses.replace(entry, index=pending["entry"])

    def _one_bank(self, dst: NkiTensor) -> None:
        bank = self.spec.value("memory.psum.bank")
        banks = dst._buf.coords(dst._flat)[1] * dst.dtype.itemsize // bank
        if banks.size and banks.min() != banks.max():
            raise NkiLimitError("nc_matmul", "dst", bank, int(banks.max() - banks.min() + 1) * bank, message=(
                f"nc_matmul: dst {dst!r} spans PSUM banks {int(banks.min())}..{int(banks.max())} of its buffer; one "
                f"matmul writes within one bank of {bank} B (memory.psum.bank on {self.spec.name})"))

    def _record(self, instruction: str, rules: isa.Rules, tensors: Mapping[str, NkiTensor], dst: Operand | None) -> Any:
        ops = [TraceOperand(k, op.shape, isa.dtype_name(op.dtype), op.space, op.nbytes,
                            tensors[k]._buf.id if k in tensors else 0) for k, op in rules.ops.items()]
        attrs = tuple((k, v if isinstance(v, (int, float, str, bool, type(None))) else
                       f"<index expression {list(v.shape)}>" if isinstance(v, np.ndarray) else repr(v))
                      for k, v in rules.attrs.items() if k not in _SCALAR_OPERANDS or v is not None)
        entry = TraceEntry(len(self.entries), instruction, rules.engine, tuple(ops), attrs, isa.latency(rules),
                           self.line())
        self.entries.append(entry)
        return entry.index if dst is not None else entry

    # -- Python syntax on tiles (legacy): t[...] = value, t[...] += value
    def assign(self, target: NkiTensor, value: Any) -> None:
        if isinstance(value, _Result):
            self.commit(value, target, accumulate=False)
        elif isinstance(value, NkiTensor):
            if value._buf is target._buf and np.array_equal(value._flat, target._flat):
                return  # the store half of ``t[...] += v``
            if HBM in (value._buf.space, target._buf.space):
                raise NkiSimulationError(f"assigning {value!r} to {target!r}: HBM is written and read by DMA only "
                                         f"(nl.store / nl.load / nisa.dma_copy)")
            self.run("tensor_copy", {"dst": target, "src": value}, {})
        elif isinstance(value, (int, float, np.number)):
            self.run("memset", {"dst": target}, {"value": float(value)})
        else:
            raise NotImplementedError(f"assigning {type(value).__name__} to an NKI tile is not supported")

    def accumulate(self, target: NkiTensor, value: Any) -> None:
        if isinstance(value, _Result) and value._name == "nc_matmul" and target._buf.space == PSUM:
            self.commit(value, target, accumulate=True)
        else:  # any other += is an extra Vector-engine add (NKI docs)
            self.run("tensor_tensor", {"dst": target, "data1": target, "data2": value}, {"op": "add"})

    def collect(self, result: Any, position: int | None = None) -> Any:
        if result is None:
            return None
        if isinstance(result, (tuple, list)):
            return tuple(self.collect(r, i) for i, r in enumerate(result))
        where = "output" if position is None else f"output {position}"
        if not isinstance(result, NkiTensor) or result._buf.space != HBM:
            raise NkiSimulationError(f"the kernel returned {result!r} as {where}; return HBM tensors "
                                     f"(nl.ndarray(shape, dtype, buffer=nl.shared_hbm))")
        written = result._buf.written[result._flat]
        if not written.all():
            first = np.unravel_index(int(np.argmin(written)), result.shape) if result.ndim else ()
            raise NkiUninitializedError(f"{where} {result!r}: {int((~written).sum())} of {result.size} elements were "
                                        f"never written (NaN), first at {tuple(map(int, first))}")
        return result._buf.data[result._flat].copy()


def _release(live: dict[str, int], space: str, charged: list[int]) -> None:
    live[space] -= charged[0]


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
        _unsupported("nl.load", mask=mask, **kw)
        src = _tensor(src)
        return s.prepare("load", {"src": src}, {}, None, src.shape, dtype or src.dtype, SBUF)

    def store(dst: Any, value: Any, *, mask: Any = None, **kw: Any) -> None:
        _unsupported("nl.store", mask=mask, **kw)
        s.run("store", {"dst": dst, "src": value}, {})

    class Op(_Token):
        """``nl.add``, ``nl.exp`` ...: what instructions take as ``op``; ``nl.copy(x, dtype)`` also copies."""

        def __init__(self, name: str):
            super().__init__("nl", name)
            self.nki_op = name

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            if self.name == "copy":
                return copy(*args, **kwargs)
            raise NotImplementedError(f"nl.{self.name}(...) as a function is not supported by the simulator; pass "
                                      f"nl.{self.name} as the op of nisa.activation / tensor_tensor / tensor_scalar")

    def copy(x: Any, dtype: Any = None, *, mask: Any = None, **kw: Any) -> _Result:
        _unsupported("nl.copy", mask=mask, **kw)
        x = _tensor(x)
        return s.prepare("tensor_copy", {"src": x}, {}, None, x.shape, dtype or x.dtype, SBUF)

    limits = s.spec.value
    tile_size = _Namespace("nl.tile_size", {"pmax": limits("limits.partition_max"),
                                            "gemm_stationary_fmax": limits("limits.matmul.stationary_free_max"),
                                            "gemm_moving_fmax": limits("limits.matmul.moving_free_max")})
    ops = {n: Op(n) for n in (*isa.ALU_OPS, *isa.ACTIVATIONS, "identity")}
    dtypes = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "int32": np.int32,
              "uint32": np.uint32, "int16": np.int16, "uint16": np.uint16, "int8": np.int8, "uint8": np.uint8}
    return {**ops, **dtypes, "ndarray": ndarray, "zeros": filled(0.0), "ones": filled(1.0), "load": load,
            "store": store, "arange": np.arange, "mgrid": _MGrid(), "ds": lambda start, size: slice(start, start + size),
            "par_dim": _ParDim, "affine_range": range, "sequential_range": range, "static_range": range,
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
        _unsupported("nisa.activation", mask=mask)
        data = _tensor(data)
        return s.prepare("activation", {"data": data, "bias": bias, "scale": scale, "reduce_res": reduce_res},
                         {"op": _op(op, A, "activation"), "reduce_op": _op(reduce_op, R, "activation", "reduce_op"),
                          "reduce_cmd": _cmd(reduce_cmd)}, None, data.shape, dtype or data.dtype, SBUF)

    def activation_reduce(op, data, *, reduce_op, reduce_res, bias=None, scale=1.0, mask=None, dtype=None):
        return activation(op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
                          reduce_cmd="reset_reduce", mask=mask, dtype=dtype)

    def tensor_tensor(data1, data2, op, *, dtype=None, mask=None, engine=None):
        _unsupported("nisa.tensor_tensor", mask=mask)
        d1, d2 = _tensor(data1), _tensor(data2)
        dtype = dtype or (d1.dtype if d1.dtype == d2.dtype else np.float32)
        return s.prepare("tensor_tensor", {"data1": d1, "data2": d2}, {"op": _op(op, ALU, "tensor_tensor")}, engine,
                         d1.shape, dtype, SBUF)

    def tensor_scalar(data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, *, dtype=None,
                      mask=None, engine=None):
        _unsupported("nisa.tensor_scalar", mask=mask)
        data = _tensor(data)
        return s.prepare("tensor_scalar", {"data": data, "operand0": operand0, "operand1": operand1},
                         {"op0": _op(op0, ALU, "tensor_scalar", "op0"), "op1": _op(op1, ALU, "tensor_scalar", "op1"),
                          "reverse0": bool(reverse0), "reverse1": bool(reverse1)}, engine, data.shape,
                         dtype or data.dtype, SBUF)

    def tensor_reduce(op, data, axis, *, dtype=None, negate=False, keepdims=False, mask=None):
        _unsupported("nisa.tensor_reduce", mask=mask)
        data = _tensor(data)
        axes = isa.reduce_axes(axis, data.ndim)
        shape = tuple(1 if i in axes else d for i, d in enumerate(data.shape) if keepdims or i not in axes)
        return s.prepare("tensor_reduce", {"data": data}, {"op": _op(op, R, "tensor_reduce"), "axis": axis,
                         "negate": bool(negate), "keepdims": bool(keepdims)}, None, shape, dtype or data.dtype, SBUF)

    def tensor_copy(src, *, mask=None, dtype=None, engine=None):
        _unsupported("nisa.tensor_copy", mask=mask)
        src = _tensor(src)
        return s.prepare("tensor_copy", {"src": src}, {}, engine, src.shape, dtype or src.dtype, SBUF)

    def memset(shape, value, dtype, *, mask=None, engine=None):
        _unsupported("nisa.memset", mask=mask)
        return s.prepare("memset", {}, {"value": float(value)}, engine, tuple(shape), dtype, SBUF)

    def iota(expr, dtype, *, mask=None):
        _unsupported("nisa.iota", mask=mask)
        expr = np.asarray(expr)
        return s.prepare("iota", {}, {"expr": expr}, None, expr.shape, dtype, SBUF)

    def dma_copy(*, dst, src, mask=None, dst_rmw_op=None, oob_mode=None, dge_mode=None):
        _unsupported("nisa.dma_copy", mask=mask, dst_rmw_op=dst_rmw_op)
        s.run("dma_copy", {"dst": dst, "src": src}, {})

    def dma_transpose(src, *, axes=None, mask=None, dtype=None, dge_mode=None):
        _unsupported("nisa.dma_transpose", mask=mask)
        src = _tensor(src)
        return s.prepare("dma_transpose", {"src": src}, {"axes": None if axes is None else tuple(axes)}, None,
                         src.shape[::-1], dtype or src.dtype, SBUF)

    return {**_isa_common(s), **{f.__name__: f for f in (
        nc_matmul, nc_transpose, activation, activation_reduce, tensor_tensor, tensor_scalar, tensor_reduce,
        tensor_copy, memset, iota, dma_copy, dma_transpose)}}


# ------------------------------------------------------------------------------- modules, jit, simulate
class _Kernel:
    """What ``@nki.jit`` makes of a kernel function in the simulator: the function itself, callable."""

    def __init__(self, fn: Callable[..., Any], options: Mapping[str, Any]):
        self.fn, self.options, self.__name__ = fn, dict(options), fn.__name__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def _jit(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    return (lambda f: _Kernel(f, options)) if fn is None else _Kernel(fn, options)


def _module(name: str, attrs: Mapping[str, Any]) -> types.ModuleType:
    module = types.ModuleType(name, f"axon_eg NKI simulator stand-in for {name}")
    module.__dict__.update(attrs)
    module.__axon_nki_fake__ = True

    def __getattr__(attr: str) -> Any:  # noqa: N807 - module-level __getattr__ (PEP 562)
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise NotImplementedError(f"{name}.{attr} is not supported by the axon_eg NKI simulator")

    module.__getattr__ = __getattr__
    return module


def _modules(s: _Session) -> dict[str, types.ModuleType]:
    prefix = "nki" if s.dialect == CURRENT else "neuronxcc.nki"
    lang = _module(f"{prefix}.language", _language(s))
    isa_module = _module(f"{prefix}.isa", _current_isa(s) if s.dialect == CURRENT else _legacy_isa(s))
    top = {"jit": _jit, "baremetal": _jit, "language": lang, "isa": isa_module}
    if s.dialect == CURRENT:
        return {"nki": _module("nki", top), "nki.language": lang, "nki.isa": isa_module}
    annotation = type("tensor", (), {"__class_getitem__": classmethod(lambda cls, item: cls)})  # tensor[128, 512]
    typing = _module("neuronxcc.nki.typing", {"tensor": annotation})
    nki = _module("neuronxcc.nki", {**top, "typing": typing})
    return {"neuronxcc": _module("neuronxcc", {"nki": nki}), "neuronxcc.nki": nki, "neuronxcc.nki.language": lang,
            "neuronxcc.nki.isa": isa_module, "neuronxcc.nki.typing": typing}


def _importer(modules: Mapping[str, types.ModuleType], dialect: str) -> Callable[..., Any]:
    real = builtins.__import__

    def __import__(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002, N807
        root = name.partition(".")[0]
        if level == 0 and root in _ROOTS.values():
            if name not in modules:
                other = next(d for d, r in _ROOTS.items() if r == root)
                raise NkiSimulationError(f"the kernel imports {name}, which the simulator does not provide"
                                         + (f" in the {dialect} dialect (its modules are {other}'s)" if other != dialect
                                            else ""))
            return modules[name] if fromlist else modules[root]
        return real(name, globals, locals, fromlist, level)

    return __import__


def _really_installed(root: str) -> bool:
    module = sys.modules.get(root)
    if module is not None:
        return not getattr(module, "__axon_nki_fake__", False)
    try:
        return importlib.util.find_spec(root) is not None
    except (ImportError, ValueError):
        return False


@contextlib.contextmanager
def _installed(modules: Mapping[str, types.ModuleType]) -> Iterator[None]:
    """Our modules in ``sys.modules`` while the kernel runs, except over a real installed nki/neuronxcc."""
    with _LOCK:
        saved: dict[str, Any] = {}
        real = {root for root in {n.partition(".")[0] for n in modules} if _really_installed(root)}
        for name, module in modules.items():
            if name.partition(".")[0] not in real:
                saved[name] = sys.modules.get(name, _MISSING)
                sys.modules[name] = module
        try:
            yield
        finally:
            for name, old in saved.items():
                if old is _MISSING:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = old


def _source(kernel: Any) -> tuple[str, str, str | None]:
    """(source text, file name for tracebacks, kernel name) of source text, a Path or a function."""
    if isinstance(kernel, Path):
        return kernel.read_text(encoding="utf-8"), str(kernel.resolve()), None
    if isinstance(kernel, str):
        filename = f"<nki-kernel-{abs(hash(kernel)):x}>"
        linecache.cache[filename] = (len(kernel), None, kernel.splitlines(True), filename)
        return kernel, filename, None
    fn = getattr(kernel, "fn", kernel)
    if not inspect.isfunction(fn):
        raise NkiSimulationError(f"simulate() takes kernel source text, a Path or a function, got {type(kernel).__name__}")
    lines, first = inspect.getsourcelines(fn)
    return "\n" * (first - 1) + textwrap.dedent("".join(lines)), inspect.getsourcefile(fn) or "<kernel>", fn.__name__


def _pick(namespace: Mapping[str, Any], name: str | None) -> Callable[..., Any]:
    kernels = sorted(k for k, v in namespace.items() if isinstance(v, _Kernel))
    if name is not None:
        if not callable(namespace.get(name)):
            raise NkiSimulationError(f"no kernel named {name!r} in the source; @nki.jit kernels: {kernels or 'none'}")
        obj = namespace[name]
    elif len(kernels) == 1:
        obj = namespace[kernels[0]]
    else:
        raise NkiSimulationError(f"{'several' if kernels else 'no'} @nki.jit kernels in the source ({kernels}); "
                                 f"pass kernel_name=")
    return obj.fn if isinstance(obj, _Kernel) else obj


def _kernel_line(error: BaseException, filename: str) -> int | None:
    tb, line = error.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def simulate(kernel: str | Path | Callable[..., Any], *inputs: Any, target: str = "trn2", dialect: str | None = None,
             trace: bool = False, kernel_name: str | None = None, kernel_kwargs: Mapping[str, Any] | None = None) -> Any:
    """Run an NKI kernel on NumPy ``inputs`` (HBM tensors; other arguments pass through) for ``target``.

    ``kernel``: source text (the ``@nki.jit`` function in it is run, or ``kernel_name``), a Path to a file, or a
    Python function (its source is run again against the simulated modules). ``dialect``: ``"current"``
    (``import nki``) or ``"legacy"`` (``import neuronxcc.nki``); by default read off the source. Returns what the
    kernel returns (NumPy arrays in the kernel's dtypes), and with ``trace=True`` ``(outputs, Trace)``.
    Raises NkiLimitError, NkiUninitializedError, NkiSimulationError, ShapeError, DtypeError or
    NotImplementedError (an NKI API outside the simulated surface), each naming the kernel line in a note.
    """
    spec = hw.load(target)
    if spec.kind != "trainium":
        raise NkiSimulationError(f"target {target!r} is a {spec.kind}, not a Trainium")
    source, filename, name = _source(kernel)
    dialect = dialect or (LEGACY if "neuronxcc" in source else CURRENT)
    if dialect not in _ROOTS:
        raise NkiSimulationError(f"unknown NKI dialect {dialect!r}; use {CURRENT!r} or {LEGACY!r}")
    if dialect == CURRENT and spec.get("features.nki_dialect") == LEGACY:
        raise NkiSimulationError(f"{spec.name} runs only the legacy dialect (features.nki_dialect in {spec.name}.yaml): "
                                 f"write the kernel against neuronxcc.nki")
    session = _Session(spec, dialect, filename)
    modules = _modules(session)
    root = modules[_ROOTS[dialect]] if dialect == CURRENT else modules["neuronxcc.nki"]
    namespace = dict(kernel.__globals__) if inspect.isfunction(kernel) else {}
    namespace.update({"__name__": "__nki_kernel__", "__file__": filename, "nki": root, "nl": root.language,
                      "nisa": root.isa, "__builtins__": {**builtins.__dict__, "__import__": _importer(modules, dialect)}})
    try:
        with _installed(modules):
            exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - running the kernel is the point
            fn = _pick(namespace, kernel_name or name)
            args = [session.hbm_input(a, i) for i, a in enumerate(inputs)]
            outputs = session.collect(fn(*args, **dict(kernel_kwargs or {})))
    except (AxonError, NotImplementedError, IndexError) as error:
        line = _kernel_line(error, filename)
        if line is not None:
            error.add_note(f"at {filename} line {line}")
        raise
    if filename.startswith("<nki-kernel-"):  # kept only while a traceback may need the source lines
        linecache.cache.pop(filename, None)
    return (outputs, Trace(spec.name, dialect, tuple(session.entries))) if trace else outputs
