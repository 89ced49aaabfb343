"""Element types of tensors, their promotion and accumulation rules.

Four dtypes: ``bf16``, ``fp16``, ``fp32``, ``fp64`` (``ax.bf16``, ...). Their names and the torch/NumPy
spellings (``"bfloat16"``, ``"float32"``, ``"half"``, ``"double"``, ...; ``DTYPE_NAMES``) are accepted
wherever a dtype is (``as_dtype``); in an ``ax.Tensor[...]`` annotation such a string is the dtype,
so no dim can be named like one."""

from __future__ import annotations

import re
from dataclasses import dataclass

from axon_eg.errors import DtypeError


@dataclass(frozen=True)
class DType:
    name: str  # short name used in programs and JSON: "bf16"
    bits: int
    torch_name: str  # attribute of the torch module: "bfloat16"
    numpy_name: str  # numpy / ml_dtypes name: "bfloat16"
    rank: int  # promotion order among floats

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"ax.{self.name}"

    @property
    def itemsize(self) -> int:
        return self.bits // 8


bf16 = DType("bf16", 16, "bfloat16", "bfloat16", 1)
fp16 = DType("fp16", 16, "float16", "float16", 1)
fp32 = DType("fp32", 32, "float32", "float32", 2)
fp64 = DType("fp64", 64, "float64", "float64", 3)

DTYPES: dict[str, DType] = {d.name: d for d in (bf16, fp16, fp32, fp64)}
_ALIASES = {"bfloat16": bf16, "float16": fp16, "half": fp16, "float32": fp32, "float": fp32, "f32": fp32,
            "float64": fp64, "double": fp64, "f64": fp64, "f16": fp16}


DTYPE_NAMES: frozenset[str] = frozenset(DTYPES) | frozenset(_ALIASES)
"""Every string that names a dtype (``"bf16"``, ``"bfloat16"``, ``"float"``, ...): in an annotation such a
string is the dtype, never a dim name."""

_OTHER_DTYPE = re.compile(r"u?int(8|16|32|64)|bool|complex(32|64|128)|(float|fp)8\w*|[iu](8|16|32|64)|tf32")


def _name_of(x: object) -> str:
    """``torch.bfloat16`` -> "bfloat16", ``np.float32`` (the type) or ``np.dtype("float32")`` -> "float32"."""
    if isinstance(x, type):
        try:
            import numpy as np

            return np.dtype(x).name
        except TypeError:
            return x.__name__
    return str(x).replace("torch.", "")


def names_other_dtype(text: str) -> bool:
    """Whether ``text`` names a dtype axon_eg does not handle (``"int32"``, ``"bool"``, ``"float8_e4m3fn"``)."""
    return _OTHER_DTYPE.fullmatch(text.replace("torch.", "")) is not None


def as_dtype(x: object) -> DType:
    """Accept a DType, its name, a numpy dtype (or scalar type) or a torch dtype."""
    if isinstance(x, DType):
        return x
    name = _name_of(x)
    found = DTYPES.get(name) or _ALIASES.get(name)
    if found is None:
        raise DtypeError(f"unsupported dtype {x!r}; axon_eg handles {', '.join(DTYPES)}")
    return found


def promote(*dtypes: DType) -> DType:
    """Result dtype of an element-wise op: the widest; bf16 with fp16 gives fp32 (as in torch)."""
    best = dtypes[0]
    for d in dtypes[1:]:
        if d.rank > best.rank:
            best = d
        elif d.rank == best.rank and d != best:
            best = fp32
    return best


def accumulator(d: DType) -> DType:
    """Dtype in which reductions and matmuls accumulate: fp32 for 16-bit inputs."""
    return fp32 if d.bits < 32 else d
