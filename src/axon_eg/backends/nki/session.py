"""The state of one simulation, :class:`Session`: the target, the kernel's buffers and their on-chip memory
accounting, the Scalar-engine reduce registers, the SPMD program, the random generator and the trace. Its
public methods are what the dialect namespaces (:mod:`.nki_namespaces`) call: ``allocate`` / ``charge`` /
``shared_hbm`` for memory, ``run`` (current dialect: the destination is given) and ``prepare`` / ``commit``
(legacy dialect: a :class:`nki_values.Result` lands at its first use) for instructions, ``masked`` for legacy
``mask=``, ``assign`` / ``accumulate`` for ``t[...] = r`` and ``t[...] += r``, and ``collect`` for the kernel's
outputs. Built on :mod:`.nki_values` and :mod:`.isa` only; the namespaces and the fake modules build on it."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from axon_eg import hw
from axon_eg.errors import DtypeError

from . import isa
from .isa import HBM, ON_CHIP, PSUM, SBUF, NkiLimitError, NkiSimulationError, NkiUninitializedError, Operand
from .nki_values import CURRENT, OUTSIDE, Buffer, NkiTensor, ParDim, Result, TraceEntry, TraceOperand, as_tensor

MASKABLE = frozenset({"load", "store", "dma_copy", "tensor_copy", "tensor_tensor", "tensor_scalar", "activation",
                      "tensor_reduce", "memset", "iota", "reciprocal", "scalar_tensor_tensor", "tensor_copy_predicated"})
"""The instructions a ``mask=`` may restrict: those whose operands index the same iteration space as their
destination (or a reduction of it). Matmuls and transposes refuse a mask."""


class Session:
    """The state of one simulation: target, allocations, Scalar-engine reduce registers, the trace."""

    def __init__(self, spec: hw.HardwareSpec, dialect: str, filename: str):
        self.spec, self.dialect, self.filename = spec, dialect, filename
        self.entries: list[TraceEntry] = []
        self.ids = 0
        self.live = {SBUF: 0, PSUM: 0}  # SBUF bytes per partition, PSUM banks
        lanes = spec.value("limits.partition_max")
        self.regs, self.regs_valid = np.full((lanes, 1), np.nan), np.zeros(lanes, bool)
        self.mask: np.ndarray | None = None  # the ``mask=`` of the instruction being called (see masked)
        self.grid: tuple[int, ...] = ()  # the SPMD launch grid (``simulate(grid=...)``), () for one program
        self.program: tuple[int, ...] = ()  # the running program's index in the grid (nl.program_id)
        self.shared: list[NkiTensor] = []  # the shared_hbm tensors of program 0, in allocation order
        self.shared_next = 0  # the running program's next shared_hbm allocation
        self.rng = np.random.default_rng(0)  # dropout's draws; nl.random_seed reseeds it

    def seed(self, seed: Any, api: str) -> None:
        """Reseed the generator dropout and rng draw from: a number, or a [1, 1] tile on SBUF or PSUM holding it."""
        if isinstance(seed, NkiTensor | Result):
            t = as_tensor(seed)
            if t.size != 1 or t._buf.space == HBM:
                raise NkiSimulationError(f"{api}: the seed must be a [1, 1] tile on SBUF or PSUM, got {t!r}")
            seed = self.read(api, "seed", t).reshape(-1)[0]
        self.rng = np.random.default_rng(int(seed) & 0xFFFFFFFF)

    def shared_hbm(self, shape: Any, dtype: Any, name: str | None) -> NkiTensor:
        """A ``shared_hbm`` tensor in an SPMD launch: every program's k-th one is the same tensor (the programs
        run the same code, so they allocate the same ones), which each program writes its part of."""
        k, self.shared_next = self.shared_next, self.shared_next + 1
        if k == len(self.shared):
            self.shared.append(self.allocate(shape, dtype, HBM, name))
        t = self.shared[k]
        if tuple(int(d) for d in (shape if isinstance(shape, (tuple, list)) else (shape,))) != t.shape:
            raise NkiSimulationError(f"program {self.program}: shared_hbm allocation {k} has shape {list(shape)}, "
                                     f"program 0's has {list(t.shape)}")
        return t

    @contextlib.contextmanager
    def masked(self, mask: Any, api: str) -> Iterator[None]:
        """The instructions ``api`` runs inside execute under ``mask``: a boolean expression of ``nl.arange``
        indices over the instruction's iteration space (``(i_p + k * 128 < n) & (i_f < m)``). An operand element
        the mask leaves out is neither read nor written, so an index expression may reach past its tensor there."""
        if mask is None or mask is False:
            yield
            return
        if self.dialect == CURRENT:
            raise NkiSimulationError(f"{api}: mask= is legacy NKI (neuronxcc.nki); the current nki dialect has no "
                                     f"masks: size the tile to the data (nl.ds, .ap) instead")
        m = np.asarray(mask)
        if m.dtype != bool:
            raise NkiSimulationError(f"{api}: mask must be a boolean expression of nl.arange indices (i_p < n), got "
                                     f"{type(mask).__name__} of dtype {m.dtype}")
        outer, self.mask = self.mask, m
        try:
            yield
        finally:
            self.mask = outer

    def fit_mask(self, instruction: str, key: str, mask: np.ndarray | None, shape: tuple[int, ...],
                 reduced: tuple[tuple[int, ...], Any, bool] | None = None) -> np.ndarray | None:
        """The instruction's mask as it falls on an operand of ``shape``: broadcast to it, or, on an operand with
        size-1 axes where the mask has more (a [P, 1] column), kept where any masked-in element uses it. A
        reduction's result (``reduced``: the data's shape, the axes, keepdims) keeps a row any element of which
        the mask keeps."""
        if mask is None:
            return None
        if reduced is not None:
            data_shape, axis, keepdims = reduced
            data = np.broadcast_to(mask, data_shape)
            return data.any(axis=isa.reduce_axes(axis, data.ndim), keepdims=keepdims).reshape(shape)
        m = mask.reshape((1,) * (len(shape) - mask.ndim) + mask.shape) if mask.ndim < len(shape) else mask
        if m.ndim == len(shape) and all(d in (1, s) or s == 1 for d, s in zip(m.shape, shape)):
            wide = tuple(i for i, (d, s) in enumerate(zip(m.shape, shape)) if s == 1 and d != 1)
            return np.broadcast_to(m.any(axis=wide, keepdims=True) if wide else m, shape)
        raise NkiSimulationError(f"{instruction}: mask of shape {list(mask.shape)} does not fit {key} of shape "
                                 f"{list(shape)}")

    # -- memory
    def allocate(self, shape: Any, dtype: Any, space: str, name: str | None = None, what: str = "nl.ndarray") -> NkiTensor:
        """A new buffer (NaN-filled). On chip it holds its SBUF bytes per partition (PSUM: banks) from its first
        write until the kernel drops its last view: a buffer's live range, as the compiler's allocator sees it
        (charging at ``nl.ndarray`` would count a loop's tile twice, as Python makes the next before the last
        is dropped)."""
        shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        part_axis = next((i for i, d in enumerate(shape) if isinstance(d, ParDim)), 0)
        shape = tuple(int(d) for d in shape)
        self.ids += 1
        line = self.line()
        name = name or f"{space}{self.ids}" + (f"@line{line}" if line else "")
        dtype = isa.as_dtype(dtype, f"{what} {name}")
        buf = Buffer(self, self.ids, name, shape, dtype, space, part_axis)
        if space in ON_CHIP:
            parts = shape[part_axis] if shape else 1
            self._at_most(what, name, "partition size", parts, "limits.partition_max")
            per_partition = math.prod(shape) // max(parts, 1) * dtype.itemsize
            buf.cost = per_partition if space == SBUF else -(-per_partition // self.spec.value("memory.psum.bank"))
            weakref.finalize(buf, _release, self.live, space, buf.charged)
        index = np.int32 if buf.data.size < 2**31 else np.int64
        return NkiTensor(buf, np.arange(buf.data.size, dtype=index).reshape(shape))

    def charge(self, buf: Buffer, instruction: str) -> None:
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
        if buf.space in ON_CHIP and t.ndim and t.size:
            flat = t._flat.reshape(t.shape[0], -1)
            inside = flat != OUTSIDE
            parts = buf.coords(np.where(inside, flat, 0))[0]
            first = np.take_along_axis(parts, np.argmax(inside, axis=1)[:, None], axis=1)  # a row's first element inside
            rows = inside.any(axis=1)
            if (inside & (parts != first)).any() or len(np.unique(first[rows, 0])) != int(rows.sum()):
                raise NkiSimulationError(f"{instruction}: {key} {t!r} does not keep the partition axis of {buf.name} "
                                         f"{list(buf.shape)} on its axis 0 (one distinct partition per row)")
        return Operand(t.shape, buf.dtype, buf.space)

    def elements(self, instruction: str, key: str, t: NkiTensor, mask: np.ndarray | None) -> np.ndarray:
        """The flat buffer indices an instruction touches in ``t``: those the mask keeps (all without one).
        Raises IndexError where one of them lies past the tensor."""
        flat = t._flat if mask is None else t._flat[mask]
        past = flat == OUTSIDE
        if past.any():
            first = np.unravel_index(int(np.argmax(t._flat == OUTSIDE if mask is None else (t._flat == OUTSIDE) & mask)),
                                     t.shape) if t.ndim else ()
            raise IndexError(f"{instruction}: {key} {t!r} indexes {int(past.sum())} elements past {t._buf.name} "
                             f"{list(t._buf.shape)} (first at {tuple(map(int, first))})"
                             + (" that the mask does not leave out" if mask is not None else
                                "; leave them out with mask=, e.g. mask=(i_p + k * 128 < n)"))
        return flat

    def read(self, instruction: str, key: str, t: NkiTensor, mask: np.ndarray | None = None,
             fill: float = 0.0) -> np.ndarray:
        """``t``'s values as float64; where ``mask`` leaves an element out, ``fill``."""
        flat = self.elements(instruction, key, t, mask)
        written = t._buf.written[flat]
        if not written.all():
            where = np.flatnonzero(mask)[int(np.argmin(written))] if mask is not None else int(np.argmin(written))
            first = np.unravel_index(where, t.shape) if t.ndim else ()
            raise NkiUninitializedError(f"{instruction}: {key} reads {int((~written).sum())} of {flat.size} elements that "
                                        f"no instruction wrote ({t!r}, first at {tuple(map(int, first))}); new buffers "
                                        f"hold NaN")
        if mask is None:
            return t._buf.data[flat].astype(np.float64)
        out = np.full(t.shape, fill, np.float64)
        out[mask] = t._buf.data[flat]
        return out

    def write(self, instruction: str, t: NkiTensor, values: np.ndarray, accumulate: bool | None = False,
              mask: np.ndarray | None = None) -> None:
        """Write ``values`` into ``t`` (where ``mask`` keeps an element; elsewhere ``t`` keeps what it held)."""
        buf = t._buf
        flat = self.elements(instruction, "dst", t, mask)
        self.charge(buf, instruction)
        values = np.asarray(values, np.float64).reshape(t.shape).astype(np.float32)  # engines compute in fp32
        if mask is not None:
            values = values[mask]
        if accumulate is not False:  # nc_matmul into PSUM: True adds, None adds where already written
            old = self.read("nc_matmul", "dst (accumulate=True)", t, mask) if accumulate else buf.data[flat]
            old = old[mask] if accumulate and mask is not None else old
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
            value = as_tensor(value)
            if isinstance(value, NkiTensor):
                tensors[key] = value
            elif key in isa.SCALAR_OPERANDS and (value is None or isinstance(value, (int, float, np.number))):
                scalars[key] = None if value is None else float(value)
            elif value is not None:
                raise NkiSimulationError(f"{instruction}: {key} must be an NKI tile, got {type(value).__name__} {value!r}")
        return tensors, scalars

    def engine(self, instruction: str, engine: Any, ops: Mapping[str, Operand]) -> str:
        name = getattr(engine, "name", engine)
        if name not in (None, "unknown"):
            return name
        return isa.default_engine(instruction, ops)

    # -- execution
    def run(self, instruction: str, operands: Mapping[str, Any], attrs: Mapping[str, Any], engine: Any = None) -> None:
        """Current dialect: check, read, compute and write one instruction whose destination is given."""
        pending = self._prepare(instruction, operands, attrs, engine, dst=None)
        dst = pending["tensors"].pop("dst")
        self._finish(instruction, pending, dst, attrs.get("accumulate", False), replace=False)

    def prepare(self, instruction: str, operands: Mapping[str, Any], attrs: Mapping[str, Any], engine: Any,
                shape: tuple[int, ...], dtype: Any, space: str) -> Result:
        """Legacy dialect: compute now against a provisional destination; the result decides where it lands."""
        dst = Operand(tuple(int(d) for d in shape), isa.as_dtype(dtype, instruction), space)
        pending = self._prepare(instruction, operands, attrs, engine, dst=dst)
        return Result(self, instruction, pending, dst.shape, dst.dtype, space)

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
        mask = self.mask
        if mask is not None and (instruction not in MASKABLE or (instruction == "activation" and (
                "reduce_res" in tensors or attrs.get("reduce_op") or attrs["reduce_cmd"] != "idle"))):
            raise NotImplementedError(f"{instruction}: mask= is not supported by the axon_eg NKI simulator on "
                                      f"{'an accumulating activation' if instruction == 'activation' else instruction}")
        fill = isa.REDUCE_OPS[attrs["op"]][1] if instruction == "tensor_reduce" else 0.0
        with np.errstate(all="ignore") if mask is not None else contextlib.nullcontext():  # left-out elements
            ins = {k: self.read(instruction, k, t, self.fit_mask(instruction, k, mask, t.shape), fill)
                   for k, t in tensors.items() if k in instr.reads}
            shapes = {k: op.shape for k, op in ops.items()}
            if instruction == "activation":
                ins["reduce_regs"] = self._registers(attrs, ops["data"].partitions, "reduce_res" in tensors)
            if instruction == "dropout":  # the session's generator (nl.random_seed): one draw per element
                ins["uniform"] = self.rng.random(ops["data"].shape)
            if instruction == "rng":  # integers over dst's dtype, from the same generator
                info = np.iinfo(ops["dst"].dtype) if ops["dst"].dtype.kind in "iu" else np.iinfo(np.int32)
                ins.update(uniform=self.rng.random(ops["dst"].shape), levels=float(info.max) - info.min + 1,
                           low=float(info.min))
            outs = instr.semantics(ins, attrs, shapes)
        for key, t in tensors.items():  # side outputs (reduce_res) land now; dst when the destination is known
            if key in instr.writes and key != "dst":
                self.write(instruction, t, outs[key])
        if "reduce_regs" in outs:
            self.regs[: ops["data"].partitions] = outs["reduce_regs"].astype(np.float32)
        entry = self._record(instruction, rules, tensors, dst) if dst is not None else None
        reduced = (tensors["data"].shape, attrs["axis"], attrs["keepdims"]) if instruction == "tensor_reduce" else None
        return {"tensors": tensors, "attrs": attrs, "engine": engine, "ops": ops, "values": outs["dst"], "entry": entry,
                "mask": mask, "where": outs.get("where"), "reduced": reduced}

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

    def commit(self, result: Result, dst: NkiTensor, accumulate: bool | None) -> None:
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
        mask = self.fit_mask(instruction, "dst", pending["mask"], dst.shape, pending["reduced"])
        if pending["where"] is not None:  # an instruction that writes part of dst (tensor_copy_predicated)
            mask = pending["where"] if mask is None else mask & pending["where"]
        self.write(instruction, dst, pending["values"], accumulate if instruction == "nc_matmul" else False, mask)
        entry = self._record(instruction, rules, {**pending["tensors"], "dst": dst}, None)
        if replace:  # the legacy call recorded a provisional entry in program order: complete it
            self.entries.pop()
            self.entries[pending["entry"]] = dataclasses.replace(entry, index=pending["entry"])

    def _one_bank(self, dst: NkiTensor) -> None:
        key = isa.get("nc_matmul").declaration.limit("psum_bank")
        bank = self.spec.value(key)
        banks = dst._buf.coords(dst._flat[dst._flat != OUTSIDE])[1] * dst.dtype.itemsize // bank
        if banks.size and banks.min() != banks.max():
            raise NkiLimitError("nc_matmul", "dst", bank, int(banks.max() - banks.min() + 1) * bank, message=(
                f"nc_matmul: dst {dst!r} spans PSUM banks {int(banks.min())}..{int(banks.max())} of its buffer; one "
                f"matmul writes within one bank of {bank} B ({key} on {self.spec.name})"))

    def _record(self, instruction: str, rules: isa.Rules, tensors: Mapping[str, NkiTensor], dst: Operand | None) -> Any:
        ops = [TraceOperand(k, op.shape, isa.dtype_name(op.dtype), op.space, op.nbytes,
                            tensors[k]._buf.id if k in tensors else 0) for k, op in rules.ops.items()]
        attrs = tuple((k, v if isinstance(v, (int, float, str, bool, type(None))) else
                       f"<index expression {list(v.shape)}>" if isinstance(v, np.ndarray) else repr(v))
                      for k, v in rules.attrs.items() if k not in isa.SCALAR_OPERANDS or v is not None)
        entry = TraceEntry(len(self.entries), instruction, rules.engine, tuple(ops), attrs, isa.latency(rules),
                           self.line())
        self.entries.append(entry)
        return entry.index if dst is not None else entry

    # -- Python syntax on tiles (legacy): t[...] = value, t[...] += value
    def assign(self, target: NkiTensor, value: Any) -> None:
        if isinstance(value, Result):
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
        if isinstance(value, Result) and value._name == "nc_matmul" and target._buf.space == PSUM:
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
