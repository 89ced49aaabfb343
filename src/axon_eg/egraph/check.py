"""Numeric consistency of a νGraph: every e-node of an e-class must compute the class's value.

The original program's values (float64 reference on random inputs) seed the e-classes that hold an
original node; every other e-class gets the value of its first computable member. Each e-node is
then evaluated on its children's class values; one that disagrees with its class was made by an
unsound rule, and the provenance egglog recorded (``made_T_*`` relations) names it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from axon_eg.ir.inputs import random_inputs
from axon_eg.ir.interpret import apply_op, interpret

from . import schema as S
from .convert import SerializedGraph, attr_to_egg
from .views import enode_text

if TYPE_CHECKING:
    from .nugraph import NuGraph


@dataclass(frozen=True)
class Inconsistency:
    eclass: str
    enode: str  # readable e-node
    rules: tuple[str, ...]  # rules that created the disagreeing e-node
    max_error: float


def _original_classes(nu: NuGraph, g: SerializedGraph) -> dict[int, str]:
    """Original program node index -> the e-class that holds it."""
    index = {}
    for cls, members in g.classes.items():
        for nid in members:
            if g.nodes[nid]["op"].startswith("root__"):
                continue
            index.setdefault((g.nodes[nid]["op"], tuple(g.tensor_children(nid)), _attr_key(g, nid)), cls)
    out: dict[int, str] = {}
    for i, node in enumerate(nu.program.nodes):
        c = S.constructor_for(node.op, len(node.inputs))
        attrs = tuple(attr_to_egg(a.kind, node.attrs[a.name]) for a in c.op.attrs)
        key = (c.name, tuple(out[j] for j in node.inputs), attrs)
        if key in index:
            out[i] = index[key]
    return out


def _attr_key(g: SerializedGraph, nid: str) -> tuple[str, ...]:
    c = S.constructor_by_name()[g.nodes[nid]["op"]]
    attrs = g.attrs(nid)
    return tuple(attr_to_egg(a.kind, attrs[a.name]) for a in c.op.attrs)


def inconsistencies(nu: NuGraph, seed: int = 0, rtol: float = 1e-7, atol: float = 1e-9) -> list[Inconsistency]:
    g = nu.serialized()
    inputs = random_inputs(nu.program, seed)
    bindings = nu.program.bindings
    values: dict[str, np.ndarray] = {}
    originals = _original_classes(nu, g)
    program_values = _all_values(nu, inputs)
    for i, cls in originals.items():
        values.setdefault(cls, program_values[i])

    def evaluate(nid: str) -> np.ndarray | None:
        kids = g.tensor_children(nid)
        if any(k not in values for k in kids):
            return None
        op = g.op_name(nid)
        attrs = g.attrs(nid)
        if op == "input":
            return inputs[attrs["name"]]
        return apply_op(op, [values[k] for k in kids], attrs, bindings)

    tensor_classes = [c for c in g.classes if c in g.shape]
    changed = True
    while changed:  # classes created by rules: value of their first computable member
        changed = False
        for cls in tensor_classes:
            if cls in values:
                continue
            for nid in g.classes[cls]:
                v = evaluate(nid)
                if v is not None:
                    values[cls] = v
                    changed = True
                    break
    out = []
    for cls in tensor_classes:
        if cls not in values:
            continue
        for nid in g.classes[cls]:
            v = evaluate(nid)
            if v is None:
                continue
            want = values[cls]
            same = v.shape == want.shape and np.allclose(v, want, rtol=rtol, atol=atol, equal_nan=True)
            if not same:
                err = float(np.nanmax(np.abs(v - want))) if v.shape == want.shape else float("inf")
                out.append(Inconsistency(cls, enode_text(g, nid), tuple(sorted(g.made_by.get(nid, ()))), err))
    return out


def _all_values(nu: NuGraph, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The reference value of every node of the (expanded) program, in one interpreter run."""
    program = nu.program
    every = replace(program, outputs=tuple(range(len(program.nodes))))
    result = interpret(every, inputs)
    return list(result) if isinstance(result, tuple) else [result]
