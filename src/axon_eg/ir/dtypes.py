"""Element types of tensors, their promotion and accumulation rules.

Four float dtypes, ``bf16``, ``fp16``, ``fp32``, ``fp64``, and the integer and boolean ones values are
indexed and masked with, ``int32``, ``int64``, ``bool`` (``ax.bf16``, ..., ``ax.int64``, ``ax.bool_``). Their
names and the torch/NumPy spellings (``"bfloat16"``, ``"float32"``, ``"half"``, ``"long"``, ...;
``DTYPE_NAMES``) are accepted wherever a dtype is (``as_dtype``); in an ``ax.Tensor[...]`` annotation such a
string is the dtype, so no dim can be named like one. Promotion follows torch: bool < integers < floats (an
integer with a float gives the float), the wider of two integers or two floats, bf16 with fp16 fp32. The
float64 reference carries integer and boolean values as float64 numbers (exact below 2**53: indices, counts,
0 and 1), so every stage compares one kind of array.
"""

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
    rank: int  # promotion order within its kind
    kind: str = "float"  # "float", "int" or "bool"

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return "ax.bool_" if self.kind == "bool" else f"ax.{self.name}"

    @property
    def itemsize(self) -> int:
        return self.bits // 8

    @property
    def is_float(self) -> bool:
        return self.kind == "float"


bf16 = DType("bf16", 16, "bfloat16", "bfloat16", 1)
fp16 = DType("fp16", 16, "float16", "float16", 1)
fp32 = DType("fp32", 32, "float32", "float32", 2)
fp64 = DType("fp64", 64, "float64", "float64", 3)

bool_ = DType("bool", 8, "bool", "bool", 0, "bool")
int32 = DType("int32", 32, "int32", "int32", 1, "int")
int64 = DType("int64", 64, "int64", "int64", 2, "int")

FLOAT_DTYPES: dict[str, DType] = {d.name: d for d in (bf16, fp16, fp32, fp64)}
DTYPES: dict[str, DType] = {**FLOAT_DTYPES, **{d.name: d for d in (int32, int64, bool_)}}
ALIASES = {"bfloat16": bf16, "float16": fp16, "half": fp16, "float32": fp32, "float": fp32, "f32": fp32,
            "float64": fp64, "double": fp64, "f64": fp64, "f16": fp16, "int": int32, "i32": int32, "long": int64,
            "i64": int64, "bool_": bool_}
"""Other names of the dtypes (``"bfloat16"``, ``"half"``, ``"long"``): what ``as_dtype`` also accepts."""
_KIND_ORDER = {"bool": 0, "int": 1, "float": 2}


DTYPE_NAMES: frozenset[str] = frozenset(DTYPES) | frozenset(ALIASES)
"""Every string that names a dtype (``"bf16"``, ``"bfloat16"``, ``"float"``, ...): in an annotation such a
string is the dtype, never a dim name."""

_OTHER_DTYPE = re.compile(r"uint(8|16|32|64)|int(8|16)|complex(32|64|128)|(float|fp)8\w*|u(8|16|32|64)|i(8|16)|tf32")


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
    found = DTYPES.get(name) or ALIASES.get(name)
    if found is None:
        raise DtypeError(f"unsupported dtype {x!r}; axon_eg handles {', '.join(DTYPES)}")
    return found


def promote(*dtypes: DType) -> DType:
    """Result dtype of an element-wise op, as torch promotes tensors: the higher kind (bool < int < float),
    within a kind the widest; bf16 with fp16 gives fp32."""
    best = dtypes[0]
    for d in dtypes[1:]:
        if _KIND_ORDER[d.kind] != _KIND_ORDER[best.kind]:
            best = d if _KIND_ORDER[d.kind] > _KIND_ORDER[best.kind] else best
        elif d.rank > best.rank:
            best = d
        elif d.rank == best.rank and d != best:
            best = fp32
    return best


def accumulator(d: DType) -> DType:
    """Dtype in which reductions and matmuls accumulate: fp32 for 16-bit floats, int64 for integers and
    booleans (torch sums them so)."""
    if not d.is_float:
        return int64
    return fp32 if d.bits < 32 else d
