"""What the simulator's instruction checks work with: NKI dtypes, the errors a kernel gets, operands and
:class:`Rules`, the facts one check (or latency) of a declared instruction sees, with helpers that raise
the right error (:mod:`.isa` runs the checks, :mod:`.isa_numpy` holds each instruction's own)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from axon_eg.errors import AxonError, DtypeError, ShapeError
from axon_eg.hw import HardwareSpec
from axon_eg.semantics.isa.declarations import DECLARATIONS, Declaration

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
FLOAT8 = {n: np.dtype(getattr(ml_dtypes, n)) for n in ("float8_e4m3", "float8_e5m2", "float8_e4m3fn")}
DTYPES: dict[str, np.dtype] = {"float32": np.dtype(np.float32), "bfloat16": BFLOAT16, "float16": np.dtype(np.float16),
                               **{n: np.dtype(n) for n in ("int32", "uint32", "int16", "uint16", "int8", "uint8")},
                               "bool_": np.dtype(np.bool_), **FLOAT8}
FLOAT_DTYPES = frozenset({DTYPES["float32"], BFLOAT16, DTYPES["float16"], *FLOAT8.values()})


def as_dtype(dtype: Any, what: str = "dtype") -> np.dtype:
    """The NumPy dtype of an NKI dtype (``nl.bfloat16``, ``np.float32``, ``"float16"``); DtypeError otherwise."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt not in DTYPES.values():
        raise DtypeError(f"{what}: {dtype!r} is not a supported NKI dtype; use one of {', '.join(DTYPES)}")
    return dt


def dtype_name(dtype: np.dtype) -> str:
    return next(n for n, d in DTYPES.items() if d == dtype)


# ---------------------------------------------------------------------------------------------- errors
class NkiLimitError(AxonError, ValueError):
    """A kernel breaks a Trainium limit or rule. ``instruction`` and ``operand`` name the culprit, ``limit``
    the bound (a number, a set of memory spaces ...), ``value`` what the kernel asked for, ``key`` the
    hardware-file key the limit comes from (None for a rule of the ISA docs)."""

    def __init__(self, instruction: str, operand: str, limit: Any, value: Any, *, what: str = "size",
                 key: str | None = None, target: str | None = None, why: str | None = None, relation: str = ">",
                 message: str | None = None):
        self.instruction, self.operand, self.limit, self.value = instruction, operand, limit, value
        self.key, self.target = key, target
        source = f"{key} on {target}" if key else why
        text = message or f"{instruction}: {f'{operand} {what}'.strip()} {value} {relation} {limit}"
        super().__init__(text + (f" ({source})" if source and not message else ""))


class NkiUninitializedError(AxonError, ValueError):
    """A kernel reads memory no instruction wrote (new buffers hold NaN), or returns such an output."""


class NkiSimulationError(AxonError, ValueError):
    """A kernel uses the NKI API in a way the simulator cannot run (wrong argument, dialect, target)."""


# --------------------------------------------------------------------------------------------- operands
@dataclass(frozen=True)
class Operand:
    """What the checks and the cost model know of one tensor operand."""

    shape: tuple[int, ...]
    dtype: np.dtype
    space: str

    @property
    def partitions(self) -> int:
        return self.shape[0] if self.shape else 1

    @property
    def free_size(self) -> int:
        return math.prod(self.shape[1:])

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


@dataclass
class Rules:
    """The facts one check or cost function sees, with helpers that raise the right error."""

    instruction: str
    ops: Mapping[str, Operand]
    attrs: Mapping[str, Any]
    spec: HardwareSpec
    engine: str

    @property
    def declaration(self) -> Declaration:
        return DECLARATIONS[self.instruction]

    def value(self, key: str) -> Any:
        return self.spec.value(key)

    def key(self, what: str) -> str:
        """The hardware-file key of the instruction's declared limit ``what``."""
        return self.declaration.limit(what)

    def at_most(self, operand: str, what: str, value: int, key: str) -> None:
        limit = self.spec.value(key)
        if value > limit:
            raise NkiLimitError(self.instruction, operand, limit, value, what=what, key=key, target=self.spec.name)

    def rule(self, ok: bool, operand: str, what: str, value: Any, limit: Any, why: str, relation: str = "!=") -> None:
        if not ok:
            raise NkiLimitError(self.instruction, operand, limit, value, what=what, why=why, relation=relation)

    def same_layout(self, a: str, b: str) -> None:
        """Operands ``a`` and ``b`` have the same partitions and the same free size."""
        x, y = self.ops[a], self.ops[b]
        if (x.partitions, x.free_size) != (y.partitions, y.free_size):
            raise ShapeError(f"{self.instruction}: {a} {list(x.shape)} and {b} {list(y.shape)} must have the same "
                             f"partition size and free size ({x.partitions}x{x.free_size} vs {y.partitions}x{y.free_size})")

    def vector(self, operand: str, partitions: int) -> None:
        """A tensor operand that must be a per-partition ``[P, 1]`` vector."""
        if operand in self.ops and (self.ops[operand].partitions, self.ops[operand].free_size) != (partitions, 1):
            raise ShapeError(f"{self.instruction}: {operand} {list(self.ops[operand].shape)} must be a [{partitions}, 1] "
                             f"per-partition vector (or a scalar)")
