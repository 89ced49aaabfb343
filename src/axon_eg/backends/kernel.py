"""``Kernel``: what a backend emits for one Candidate (or baseline): a readable source file, its entry
point and calling convention, the harness input specs, and static facts for the verification cascade."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from axon_eg.ir.inputs import positive_inputs
from axon_eg.ir.program import Program


@dataclass(frozen=True)
class Kernel:
    name: str  # unique within a bundle; the resume key of the measurement worker
    source: str
    entry: str = "kernel"
    mode: str = "dps"  # harness calling convention: dps (outputs passed in) or return
    kind: str = "candidate"  # candidate or baseline
    resources: dict[str, Any] = field(default_factory=dict)  # the worst launch's static resource use
    meta: dict[str, Any] = field(default_factory=dict)  # lowering per group, tilings, predicted cost


def input_specs(program: Program) -> list[dict[str, Any]]:
    """The harness's input specs (name, concrete shape, dtype, positive) for a bound program."""
    positive = positive_inputs(program)
    return [{"name": spec.name, "shape": list(program.concrete_shape(node)), "dtype": spec.dtype.name,
             "positive": spec.name in positive} for spec, node in zip(program.inputs, program.input_ids)]


def output_dtypes(program: Program) -> list[str]:
    return [program.nodes[o].dtype.name for o in program.outputs]


def identifier(name: str, taken: set[str]) -> str:
    """A Python identifier for a program input name that collides with nothing in generated code."""
    import keyword
    import re

    ident = re.sub(r"\W", "_", name) or "x"
    if ident[0].isdigit():
        ident = "x_" + ident
    reserved = {"torch", "triton", "tl", "F", "math", "kernel", "eager", "compiled", "reference"}
    while keyword.iskeyword(ident) or ident in reserved or ident in taken or ident.startswith(("out", "t_", "v_")):
        ident = "in_" + ident
    taken.add(ident)
    return ident
