"""Phase 1's first step: a program's νGraph saturated with the discovered rules, within budgets scaled by
the program's size (a count of e-nodes, so the same program saturates the same way on any machine; the
seconds only a safety cap). The pipeline, the Triton-to-Triton flow and the benchmarks call it alike.
"""

from __future__ import annotations

from typing import Any

from axon_eg.ir import ops as O
from axon_eg.ir.program import Program


def saturated(program: Program, seconds: float) -> Any:
    """The program's νGraph saturated with the discovered rules: at most ``saturation_nodes(program)`` e-nodes
    (a count, checked between iterations: the same program saturates the same way on any machine) and
    ``seconds`` as a safety cap on the clock (its report's ``stop_reason`` is ``"time limit"`` when that cap
    cut it short; phase 1 records it, ``phase1.json``)."""
    from axon_eg.egraph.nugraph import Limits, NuGraph  # lazy: loads egglog; the pipeline imports this module for cache hits
    from axon_eg.rules_discovered.store import load_rules  # lazy: loads z3 (a stored rule may need re-proving)

    g = NuGraph(program, load_rules())
    g.saturate(Limits(seconds=seconds, nodes=saturation_nodes(program)))
    return g


def saturation_nodes(program: Program) -> int:
    """The e-node budget of a program's saturation, scaled by its size: ``SATURATION_NODES`` plus
    ``SATURATION_NODES_PER_OP`` per compute op, at most the νGraph's default (``Limits.nodes``)."""
    from axon_eg.egraph.nugraph import Limits  # lazy: loads egglog (as in saturated)

    return min(Limits.nodes, SATURATION_NODES + SATURATION_NODES_PER_OP * compute_ops(program))


SATURATION_NODES = 10_000
SATURATION_NODES_PER_OP = 2_000


def compute_ops(program: Program) -> int:
    return sum(1 for n in program.nodes if not O.is_source(n.op) and not O.is_view(n.op))
