"""Element types of tensors, their promotion and accumulation rules."""

from __future__ import annotations

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


def as_dtype(x: object) -> DType:
    """Accept a DType, its name, a numpy dtype or a torch dtype."""
    if isinstance(x, DType):
        return x
    name = str(x).replace("torch.", "")
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
