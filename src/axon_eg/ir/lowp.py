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

:class:`Plan` is the same evaluator prepared once for a bound Program that runs many times (the
float-safety test runs each side on many input sets in every format): op lookups, bound attributes
and shapes are computed once, and ``Plan.run(inputs, None)`` is the float64 reference
(:func:`axon_eg.ir.interpret.interpret`) with the same references, so a test can take both the truth
and the rounded results from one plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from axon_eg.errors import ProgramError
from axon_eg.ir import ops as O
from axon_eg.ir.dtypes import as_dtype
from axon_eg.ir.interpret import bind_inputs
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
    with np.errstate(over="ignore", invalid="ignore"):
        return _round(np.asarray(x, dtype=np.float64), FORMATS[precision_name(precision)], via_fp32)


def _round(x: np.ndarray, fmt: Any, via_fp32: bool) -> np.ndarray:
    if via_fp32 and fmt is not np.float32:
        x = x.astype(np.float32)
    return x.astype(fmt).astype(np.float64)


@dataclass(frozen=True)
class _Step:
    """One non-input node of a plan: its reference, operands, bound attributes and concrete shape."""

    op: str
    reference: Callable[..., Any]
    inputs: tuple[int, ...]
    attrs: O.Attrs
    accumulates: bool
    rounds: bool  # layout ops only move values that are already rounded
    shape: tuple[int, ...]


class Plan:
    """A Program with its dims bound, prepared to run many times (see the module docstring).

    ``expand`` replaces composites by their primitives first, as :func:`interpret_lowp` does."""

    def __init__(self, program: Program, *, expand: bool = True) -> None:
        if expand:
            program = program.expand()
        unbound = sorted(program.free_dims - set(program.bindings))
        if unbound:
            raise ProgramError(f"{program.name}: dims {unbound} are not bound; use program.bind(...)")
        self.program = program
        self.inputs = {s.name: program.concrete_shape(i) for s, i in zip(program.inputs, program.input_ids)}
        self._steps: list[_Step | str] = [n.attrs["name"] if n.op == "input" else _step(program, i)
                                          for i, n in enumerate(program.nodes)]

    def run(self, inputs: Mapping[str, np.ndarray], precision: str | None = None, *,
            rounded: bool = False) -> tuple[np.ndarray, ...]:
        """The outputs (float64 arrays) on ``inputs`` (float64 arrays by name) rounded to ``precision``
        as in :func:`interpret_lowp`; with ``precision=None``, the float64 reference's outputs.
        ``rounded``: the inputs already hold values of the format (they are not rounded again)."""
        fmt = None if precision is None else FORMATS[precision_name(precision)]
        values: list[np.ndarray] = []
        with np.errstate(all="ignore"):
            for step in self._steps:
                if isinstance(step, str):
                    x = np.asarray(inputs[step], dtype=np.float64)
                    if x.shape != self.inputs[step]:
                        raise ProgramError(f"{self.program.name}: input {step!r} has shape {list(x.shape)}, "
                                           f"expected {list(self.inputs[step])}")
                    values.append(x if fmt is None or rounded else _round(x, fmt, False))
                    continue
                args = [values[j] for j in step.inputs]
                if fmt is not None and step.accumulates:
                    args = [a.astype(np.float32) for a in args]  # exact: the values are already rounded
                out = np.asarray(step.reference(tuple(args), step.attrs), dtype=np.float64)
                if out.shape != step.shape:  # a registry bug: shape rule and reference disagree
                    raise AssertionError(f"{step.op}: reference gave {list(out.shape)}, shape rule {list(step.shape)}")
                values.append(out if fmt is None or not step.rounds else _round(out, fmt, True))
        return tuple(values[o] for o in self.program.outputs)


def _step(program: Program, i: int) -> _Step:
    node = program.nodes[i]
    op = O.get(node.op)
    bindings = program.bindings
    attrs = node.attrs
    if any(_symbolic(v) for v in attrs.values()):
        attrs = O.Attrs(tuple((k, _bind(v, bindings)) for k, v in attrs.items()))
    return _Step(node.op, op.reference, node.inputs, attrs, op.accumulates, op.kind is not O.OpKind.LAYOUT,
                 program.concrete_shape(i))


def _symbolic(v: Any) -> bool:
    return isinstance(v, O.D.Sym) or (isinstance(v, tuple) and any(_symbolic(x) for x in v))


def _bind(v: Any, bindings: Mapping[str, int]) -> Any:
    if isinstance(v, O.D.Sym):
        return O.D.evaluate(v, bindings)
    return tuple(_bind(x, bindings) for x in v) if isinstance(v, tuple) else v


def interpret_lowp(program: Program, inputs: Mapping[str, Any] | Sequence[Any], precision: Any = "fp32", *,
                   expand: bool = True) -> np.ndarray | tuple[np.ndarray, ...]:
    """Evaluate ``program`` with every value rounded to ``precision`` (see the module docstring);
    returns one float64 array, or a tuple for several outputs, like :func:`interpret`."""
    precision = precision_name(precision)
    plan = Plan(program, expand=expand)
    results = plan.run(bind_inputs(plan.program, inputs), precision)
    return results[0] if len(results) == 1 else results


__all__ = ["FORMATS", "Plan", "interpret_lowp", "precision_name", "round_to"]
