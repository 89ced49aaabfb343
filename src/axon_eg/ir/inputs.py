"""Random inputs for a Program: never zeros, positive where the program needs it.

An input that reaches an op's positive-domain operand (``meta["positive_inputs"]``: log, sqrt, rsqrt,
pow, batchnorm's running variance) through layout ops, casts and additions is drawn from
U(0.5, 2); every other input from N(0, 1) with exact zeros replaced.
"""

from __future__ import annotations

import numpy as np

from axon_eg.ir import ops as O
from axon_eg.ir.program import Program

_TRANSPARENT = {"add", "cast", "reshape", "transpose", "broadcast_to", "expand_dims", "squeeze", "slice", "concat"}


def positive_inputs(program: Program) -> set[str]:
    """Names of the inputs that must be positive for the reference to be finite."""
    need = [False] * len(program.nodes)
    for i in reversed(range(len(program.nodes))):
        node = program.nodes[i]
        positive_slots = O.get(node.op).meta.get("positive_inputs", ())
        for slot, j in enumerate(node.inputs):
            if slot in positive_slots or (need[i] and node.op in _TRANSPARENT):
                need[j] = True
    return {n.attrs["name"] for n, flag in zip(program.nodes, need) if flag and n.op == "input"}


def random_inputs(program: Program, seed: int = 0, *, scale: float = 1.0) -> dict[str, np.ndarray]:
    """float64 arrays keyed by input name, for a program whose dims are bound."""
    rng = np.random.default_rng(seed)
    positive = positive_inputs(program)
    out: dict[str, np.ndarray] = {}
    for spec, node in zip(program.inputs, program.input_ids):
        shape = program.concrete_shape(node)
        if spec.name in positive:
            x = rng.uniform(0.5, 2.0, size=shape)
        else:
            x = rng.standard_normal(size=shape) * scale
            x = np.where(x == 0.0, scale, x)  # also for 0-d inputs, where NumPy returns a scalar
        out[spec.name] = x
    return out
