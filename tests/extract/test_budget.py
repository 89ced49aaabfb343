"""The enumeration's budgets (issue 49 item 4): counts, never the clock; the known good shapes kept."""

from __future__ import annotations

import itertools
from collections import Counter

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

import axon_eg as ax
from axon_eg.backends.triton.backend import TRITON
from axon_eg.backends.triton.isa import is_blas
from axon_eg.egraph.nugraph import Limits, NuGraph
from axon_eg.extract.candidates import Budget, compute_ops, enumerate_all, enumerate_candidates, isa_subset
from axon_eg.extract.fusion import MATMUL, node_kind, plans
from axon_eg.hw import load
from axon_eg.rules_discovered.store import load_rules
from axon_eg.testing.strategies import programs

H200 = load("h200")


def _graph(program, iterations: int = 2) -> NuGraph:
    graph = NuGraph(program, load_rules())
    graph.saturate(Limits(iterations=iterations))
    return graph


def _unfused(plan) -> bool:
    """One group per compute op (views ride along; a view that is an output may be a group of its own)."""
    program = plan.program
    return all(sum(node_kind(program.nodes[n].op) is not None for n in g.nodes) <= 1 for g in plan.groups)


def _tileable(plan) -> bool:
    return all(TRITON.templates.space(plan, gi, H200).tilings()[0] for gi in range(len(plan.groups)))


@pytest.mark.slow  # 25 random programs enumerated: 6-12 s (make test-slow, CI)
@settings(max_examples=25, deadline=None)
@given(programs(max_nodes=6, bound=True, allow_library=True), st.integers(1, 6), st.integers(1, 3), st.integers(1, 3))
def test_random_enumeration_stays_within_its_budget_and_keeps_the_one_group_per_op_plan(program, combos, families,
                                                                                       k) -> None:
    budget = Budget(variants=2, structural=1, isa_combos=combos, families=families, tilings_per_group=2)
    graph = _graph(program)
    ranked, summary = enumerate_all(graph, H200, k, budget=budget, backend=TRITON, fallback=TRITON.fallback(H200))
    assert summary.variants <= budget.variants + budget.structural + 1  # + the program as written
    per_plan = Counter((c.variant.program.hash, tuple(g.nodes for g in c.plan.groups)) for c in ranked)
    heads = Counter((c.variant.program.hash, tuple(g.nodes for g in c.plan.groups), c.isa) for c in ranked)
    alternatives = max(budget.tilings_per_group, k) - 1
    for plan, count in per_plan.items():
        isas = {isa for (v, p, isa) in heads if (v, p) == plan}
        assert len(isas) <= combos
        assert count <= combos + families * alternatives
    assert summary.candidates <= summary.plans * (combos + families * alternatives)
    # the program as written, one group per op, is always among the candidates (where it has tilings here)
    original = graph.program.canonical().hash  # (the νGraph's: its dims bound)
    unfused = plans(graph.program)[0]
    assert _unfused(unfused)
    if _tileable(unfused):
        assert any(_unfused(c.plan) and c.variant.program.canonical().hash == original for c in ranked)


@ax.program(M=64, D=96, H=128, O=32)
def _wide_mlp(x: ax.Tensor["M", "D", ax.fp32], w1: ax.Tensor["D", "H", ax.fp32], b1: ax.Tensor["H", ax.fp32],
              g1: ax.Tensor["H", ax.fp32], c1: ax.Tensor["H", ax.fp32], w2: ax.Tensor["H", "H", ax.fp32],
              b2: ax.Tensor["H", ax.fp32], w3: ax.Tensor["H", "O", ax.fp32], b3: ax.Tensor["O", ax.fp32]):
    """Three fp32 Linears with a LayerNorm and ReLUs: on Hopper each matmul has 7 or 8 ISA choices (the
    product is in the hundreds), past the budget's ``isa_combos``."""
    h = ax.relu(ax.layernorm(x @ w1 + b1, g1, c1, eps=1e-5))
    h = ax.relu(h @ w2 + b2)
    return h @ w3 + b3


@pytest.mark.slow  # seconds of interpreted kernels or compiles: make test-slow (CI) runs it
def test_a_wide_program_is_enumerated_within_its_budget_deterministically() -> None:
    runs = []
    for _ in range(2):
        ranked, summary = enumerate_all(_graph(_wide_mlp, 4), H200, 4, backend=TRITON, fallback=TRITON.fallback(H200))
        cands, _ = enumerate_candidates(_graph(_wide_mlp, 4), H200, 4, backend=TRITON, fallback=TRITON.fallback(H200))
        runs.append(([c.key for c in ranked], [c.key for c in cands], summary.counts()))
        assert summary.isa_pruned > 0  # the product was past the budget
        budget = Budget.for_program(_wide_mlp)
        isas = Counter((c.variant.program.hash, tuple(g.nodes for g in c.plan.groups), c.isa) for c in ranked)
        per_plan = Counter(key[:2] for key in isas)
        assert max(per_plan.values()) <= budget.isa_combos
        # the known good shapes are kept: every GEMM as the library call (its epilogue fused into the call where
        # the library can: addmm's bias, _addmm_activation's ReLU), on the plan split around the library
        all_blas = [c for c in ranked if sum(c.plan.groups[gi].kind == MATMUL for gi in range(len(c.plan.groups))) == 3
                    and len(c.isa) == 3 and all(is_blas(i) for _, i in c.isa)]
        assert all_blas
        assert any(_unfused(c.plan) for c in ranked)
    assert runs[0] == runs[1]


def test_isa_subset_keeps_the_cheapest_each_choice_everywhere_and_each_group_alone() -> None:
    options = [(0, ["a", "b", "c"]), (2, ["a", "c"]), (5, ["b", "d"])]
    estimate = {0: {"a": 3.0, "b": 1.0, "c": 2.0}, 2: {"a": 1.0, "c": 5.0}, 5: {"b": 2.0, "d": 1.0}}
    full = list(itertools.product(*[[(gi, o) for o in opts] for gi, opts in options]))
    got = isa_subset(options, estimate, limit=100)
    assert set(got) <= set(full) and len(got) == len(set(got)) < len(full)
    assert got == sorted(got, key=full.index)  # in the product's order
    cheapest = ((0, "b"), (2, "a"), (5, "d"))
    assert cheapest in got
    for name in ("a", "b", "c", "d"):  # each choice on every group that has it, the others at their cheapest
        assert tuple((gi, name if name in opts else dict(cheapest)[gi]) for gi, opts in options) in got
    for gi, opts in options:  # each group's every choice, alone
        for o in opts:
            assert tuple((g, o if g == gi else c) for g, c in cheapest) in got
    # a limit keeps the cheapest first, then the uniform ones
    assert isa_subset(options, estimate, limit=1) == [cheapest]
    small = isa_subset(options, estimate, limit=3)
    assert len(small) == 3 and cheapest in small


@pytest.mark.parametrize("ops", [1, 8, 12, 24])
def test_budget_for_a_program_shrinks_with_its_size(ops: int) -> None:
    @ax.program(M=4, N=4)
    def chain(x: ax.Tensor["M", "N", ax.fp32]):
        for _ in range(ops):
            x = ax.exp(x)
        return x

    assert compute_ops(chain) == ops
    budget, default = Budget.for_program(chain), Budget()
    if ops <= 8:
        assert budget == default
    else:
        assert 2 <= budget.variants < default.variants and 1 <= budget.structural < default.structural
        assert 4 <= budget.families < default.families
        assert 16 <= budget.isa_combos < default.isa_combos
