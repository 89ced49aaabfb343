"""Run a Program the way a real low-precision kernel would: every value rounded after every op.

``interpret_lowp(program, inputs, "fp32" | "bf16" | "fp16")`` models an unfused kernel that stores
each intermediate in the given format and computes each op with fp32 arithmetic:

- inputs and constants are rounded to the format first;
- an op that does not accumulate (element-wise maps, max/min, layout) runs the registry's float64
  reference (:func:`axon_eg.ir.interpret.apply_op`) on the rounded operands; its result is rounded
  to float32 and then to the format. For +, -, *, / and sqrt the float64 result rounded once to
  float32 is exactly the correctly rounded fp32 result (float64 has more than 2*24+2 bits), and for
  exp, log, tanh, ... it is within an ulp of what a GPU's fp32 math library gives;
- an op whose registry entry says ``accumulates`` (sum, mean, logsumexp, cumsum, matmul) runs the same
  reference on float32 operands, so NumPy accumulates in float32 (pairwise sums, sequential cumsum,
  sgemm), which is what the backends emit for every format; its result is then rounded to the format.
  Library ops (conv) are the exception: their torch reference converts to float64 and accumulates there;
- rounding overflows like the hardware does: a value beyond the format's range becomes +-inf
  (``exp(100)`` is inf in fp32, bf16 and fp16; ``300 * 300`` is inf in fp16), and inf - inf is nan.

Composite ops (softmax, layernorm, ...) run as their primitives by default (``expand=True``), so
their intermediates are rounded too; ``expand=False`` rounds only the composite's final value.
The dtypes the program declares (and ``cast``) are ignored: ``precision`` applies to every value.
The results are float64 arrays holding the rounded values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from axon_eg.ir import ops as O
from axon_eg.ir.dtypes import as_dtype
from axon_eg.ir.interpret import apply_op, run
from axon_eg.ir.program import Program

FORMATS: dict[str, Any] = {"fp32": np.float32, "bf16": ml_dtypes.bfloat16, "fp16": np.float16}


def precision_name(precision: Any) -> str:
    """``"fp32"``, ``"bf16"`` or ``"fp16"`` for any spelling :func:`as_dtype` accepts."""
    name = as_dtype(precision).name
    if name not in FORMATS:
        raise ValueError(f"precision must be one of {sorted(FORMATS)}, got {precision!r}")
    return name


def round_to(x: Any, precision: str, *, via_fp32: bool = False) -> np.ndarray:
    """``x`` rounded to the format (round to nearest even, overflow to +-inf), as float64.

    ``via_fp32`` rounds to float32 first: the value an fp32 computation stores in a 16-bit format."""
    fmt = FORMATS[precision_name(precision)]
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if via_fp32 and fmt is not np.float32:
            x = x.astype(np.float32)
        return x.astype(fmt).astype(np.float64)


def interpret_lowp(program: Program, inputs: Mapping[str, Any] | Sequence[Any], precision: Any = "fp32", *,
                   expand: bool = True) -> np.ndarray | tuple[np.ndarray, ...]:
    """Evaluate ``program`` with every value rounded to ``precision`` (see the module docstring);
    returns one float64 array, or a tuple for several outputs, like :func:`interpret`."""
    precision = precision_name(precision)

    def step(node: Any, args: list[np.ndarray], prog: Program) -> np.ndarray:
        op = O.get(node.op)
        if op.accumulates:
            args = [a.astype(np.float32) for a in args]  # exact: the values are already rounded
        out = apply_op(node.op, args, node.attrs, prog.bindings)
        if op.kind is not O.OpKind.LAYOUT:  # layout ops only move values that are already rounded
            out = round_to(out, precision, via_fp32=True)
        return out

    return run(program, inputs, expand=expand, prepare=lambda v: round_to(v, precision), step=step)


__all__ = ["FORMATS", "interpret_lowp", "precision_name", "round_to"]
