"""The float64 reference: run a Program with NumPy. Every later stage is checked against this."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from axon_eg.errors import ProgramError
from axon_eg.ir import ops as O
from axon_eg.ir.program import Program


def _as_float64(name: str, value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # torch tensor, any device or dtype
        value = value.detach().to("cpu").double().numpy()
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ProgramError(f"input {name!r}: cannot convert {type(value).__name__} to a float64 array") from None


def bind_inputs(program: Program, inputs: Mapping[str, Any] | Sequence[Any]) -> dict[str, np.ndarray]:
    """Match inputs (by name, or positionally in the program's input order) and check their shapes."""
    specs = program.inputs
    if isinstance(inputs, Mapping):
        missing = [s.name for s in specs if s.name not in inputs]
        extra = sorted(set(inputs) - {s.name for s in specs})
        if missing or extra:
            raise ProgramError(f"{program.name}: missing inputs {missing}, unexpected inputs {extra}")
        values = [inputs[s.name] for s in specs]
    else:
        values = list(inputs)
        if len(values) != len(specs):
            raise ProgramError(f"{program.name}: takes {len(specs)} inputs "
                               f"({', '.join(s.name for s in specs)}), got {len(values)}")
    out: dict[str, np.ndarray] = {}
    for spec, value, node in zip(specs, values, program.input_ids):
        arr = _as_float64(spec.name, value)
        want = program.concrete_shape(node)
        if arr.shape != want:
            raise ProgramError(f"{program.name}: input {spec.name!r} has shape {list(arr.shape)}, "
                               f"expected {list(want)}")
        out[spec.name] = arr
    return out


def interpret(program: Program, inputs: Mapping[str, Any] | Sequence[Any], *,
              expand: bool = False) -> np.ndarray | tuple[np.ndarray, ...]:
    """Evaluate ``program`` in float64; returns one array, or a tuple for several outputs.

    Composite ops use their direct reference unless ``expand`` is set (then their primitives run)."""
    return run(program, inputs, expand=expand)


def run(program: Program, inputs: Mapping[str, Any] | Sequence[Any], *, expand: bool = False,
        prepare: Callable[[np.ndarray], np.ndarray] | None = None,
        step: Callable[[Any, list[np.ndarray], Program], np.ndarray] | None = None) -> np.ndarray | tuple[np.ndarray, ...]:
    """The interpreter loop shared by the float64 reference and the low-precision one (``lowp``):
    ``prepare`` maps each input value, ``step(node, args, program)`` computes one node (default:
    the registry reference through ``apply_op``)."""
    if expand:
        program = program.expand()
    if program.free_dims - set(program.bindings):
        unbound = sorted(program.free_dims - set(program.bindings))
        raise ProgramError(f"{program.name}: dims {unbound} are not bound; use program.bind(...)")
    bound = bind_inputs(program, inputs)
    if prepare is not None:
        bound = {name: prepare(v) for name, v in bound.items()}
    values: list[np.ndarray] = []
    with np.errstate(all="ignore"):
        for i, node in enumerate(program.nodes):
            if node.op == "input":
                values.append(bound[node.attrs["name"]])
                continue
            args = [values[j] for j in node.inputs]
            out = step(node, args, program) if step else apply_op(node.op, args, node.attrs, program.bindings)
            want = program.concrete_shape(i)
            if out.shape != want:  # a registry bug: shape rule and reference disagree
                raise AssertionError(f"{node.op}: reference gave {list(out.shape)}, shape rule {list(want)}")
            values.append(out)
    results = tuple(values[o] for o in program.outputs)
    return results[0] if len(results) == 1 else results


def apply_op(op_name: str, inputs: Sequence[np.ndarray], attrs: Mapping[str, Any],
             bindings: Mapping[str, int]) -> np.ndarray:
    """Run one op's float64 reference; symbolic attributes are evaluated with ``bindings``."""
    op = O.get(op_name)
    a = attrs if isinstance(attrs, O.Attrs) else op.make_attrs(attrs)
    if any(isinstance(v, O.D.Sym) or (isinstance(v, tuple) and any(isinstance(x, O.D.Sym) for x in v))
           for v in a.values()):
        a = O.Attrs(tuple((k, _bind(v, bindings)) for k, v in a.items()))
    with np.errstate(over="ignore", under="ignore"):
        return np.asarray(op.reference(tuple(inputs), a), dtype=np.float64)


def _bind(v: Any, bindings: Mapping[str, int]) -> Any:
    if isinstance(v, O.D.Sym):
        return O.D.evaluate(v, bindings)
    if isinstance(v, tuple):
        return tuple(_bind(x, bindings) for x in v)
    return v
