"""Rules hold wherever the νGraph applies them: the issue's reproducers through the public front end,
symbolic (not size-coincidence) conditions, size-1 dims, empty dims, mixed precision, and random
programs over the full discovered rule set with named dims bound to 1."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

import axon_eg as ax
from axon_eg.egraph.nugraph import Limits, NuGraph
from axon_eg.egraph.patterns import parse_rule
from axon_eg.errors import AxonError, ShapeError
from axon_eg.ir.builder import Builder
from axon_eg.ir.inputs import random_inputs
from axon_eg.ir.interpret import interpret
from axon_eg.rules_discovered.store import load_rules
from axon_eg.semantics.prover import ScalarSymbol, prove_equal
from axon_eg.testing.strategies import programs

RULES = load_rules()


def _variants_match(program, k=6, seconds=10.0):
    graph = NuGraph(program, RULES)
    graph.saturate(Limits(iterations=10, seconds=seconds))
    inputs = random_inputs(program, 3)
    want = interpret(program, inputs)
    variants = graph.extract(k)
    for v in variants:
        got = interpret(v.program, inputs)
        for a, b in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-9, err_msg=f"variant {v.rank}: rules {v.rules}")
    return graph, variants


def _per_row_batchnorm(n: int, k: int):
    @ax.program(N=n, K=k)
    def f(x: ax.Tensor["N", "K"], W: ax.Tensor["K", "N"], m: ax.Tensor["N"], v: ax.Tensor["N"], g: ax.Tensor["N"],
          b: ax.Tensor["N"]):
        return (x @ W - m.reshape("N", 1)) * ax.rsqrt(v.reshape("N", 1) + 1e-5) * g.reshape("N", 1) + b.reshape("N", 1)
    return f


@pytest.mark.parametrize("n, k", [(16, 16), (16, 17), (1, 3), (5, 1)])
def test_fold_rule_never_matches_per_row_statistics(n, k) -> None:
    graph, variants = _variants_match(_per_row_batchnorm(n, k))
    assert not any("batchnorm_folded_into_matmul" in v.rules for v in variants)


def test_fold_rule_still_folds_per_column_statistics() -> None:
    @ax.program(M=8, K=6, N=5)
    def f(x: ax.Tensor["M", "K"], W: ax.Tensor["K", "N"], m: ax.Tensor["N"], v: ax.Tensor["N"], g: ax.Tensor["N"],
          b: ax.Tensor["N"]):
        return ax.batchnorm(x @ W, m, v, g, b, axis=1)

    _, variants = _variants_match(f, k=32)
    assert any(r.startswith("batchnorm_folded_into_matmul") for v in variants for r in v.rules)


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min", "logsumexp"])
def test_named_dims_bound_to_one_extract_consistently(op) -> None:
    @ax.program(B=4, S=1)
    def f(x: ax.Tensor["B", "S"]):
        return getattr(ax, op)(x, axis=1) if op == "logsumexp" else getattr(x, op)(axis=1)

    graph, variants = _variants_match(f)
    assert any(n.op == "squeeze" for v in variants for n in v.program.nodes)  # the size-1 rule fired
    assert graph.report.unbuildable == []


def test_decode_step_attention_row_ops_extract() -> None:
    @ax.program(B=2, H=3, S=1, D=8)
    def f(q: ax.Tensor["B", "H", "S", "D"], k: ax.Tensor["B", "H", "S", "D"]):
        return ax.softmax(q @ k.mT, axis=-1)

    _variants_match(f)


def test_conditions_are_symbolic_not_size_coincidences() -> None:
    """A rule proved for square matrices must not fire on [M, N] just because M and N are both 4."""
    square = parse_rule("square_only", "(exp ?x)", "(exp (transpose :perm [1 0] ?x))",
                        ["(= (rank ?x) 2)", "(= (dim ?x 0) (dim ?x 1))"], family="test")
    b = Builder("t")
    symbolic = b.build(b.emit("exp", b.input("x", ("M", "N"), "fp32"))).bind(M=4, N=4)
    graph = NuGraph(symbolic, [square])
    graph.saturate(Limits(iterations=3))
    assert graph.report.matches_per_rule.get("square_only", 0) == 0
    b = Builder("t")
    literal = b.build(b.emit("exp", b.input("x", ("M", "M"), "fp32"))).bind(M=4)
    graph = NuGraph(literal, [square])
    graph.saturate(Limits(iterations=3))
    assert graph.report.matches_per_rule.get("square_only", 0) > 0


def test_empty_dims_are_refused_at_the_ir_boundary() -> None:
    with pytest.raises(ShapeError, match="input x has size 0 on axis 1"):
        @ax.program()
        def f(x: ax.Tensor[4, 0]):
            return x.mean(axis=1)
    b = Builder("t")
    x = b.input("x", ("N", "K"), "fp32")
    p = b.build(b.emit("mean", x, axes=(1,), keepdims=False))
    with pytest.raises(AxonError, match="dim K must be bound to an int >= 1, got 0"):
        p.bind(N=3, K=0)
    with pytest.raises(ShapeError, match=r"empty slice \[2:2\] of axis 1"):
        b.emit("slice", b.input("y", (3, 4), "fp32"), axis=1, start=2, stop=2, step=1)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_mixed_precision_programs_saturate(dtype) -> None:
    b = Builder("mixed")
    x = b.input("x", ("M", "N"), dtype)
    y = b.emit("add", x, b.constant(0.0, "fp32"))  # widens x: add_by_0 must not apply
    z = b.emit("mul", b.emit("add", x, b.constant(0.0, dtype)), b.constant(1.0, "fp32"))
    program = b.build([b.emit("sum", y, axes=(1,), keepdims=False), z]).bind(M=4, N=8)
    graph, variants = _variants_match(program)
    assert all(v.program.nodes[v.program.outputs[0]].dtype.name == "fp32" for v in variants)
    adds = [sum(n.op == "add" for n in v.program.nodes) for v in variants]
    assert min(adds) < sum(n.op == "add" for n in program.nodes)  # the same-dtype zero is dropped


def test_a_symbolic_scalar_is_never_the_literal_with_its_sample_value() -> None:
    lhs_b, rhs_b = Builder("l"), Builder("r")
    lhs = lhs_b.build(lhs_b.emit("mul", lhs_b.input("a", ("N",), "fp32"), lhs_b.input("c", (), "fp32")))
    a = rhs_b.input("a", ("N",), "fp32")
    rhs_b.input("c", (), "fp32")
    rhs = rhs_b.build(rhs_b.emit("mul", a, rhs_b.constant(2.0, "fp32")))
    result = prove_equal(lhs, rhs, symbols=[ScalarSymbol("c", ">0")])
    assert result.status != "proven"


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(programs(bound=True, sizes=(1, 2, 3, 7, 16), max_nodes=6))
def test_random_programs_with_unit_dims_saturate_and_extract_correct_variants(program) -> None:
    graph = NuGraph(program, RULES)
    graph.saturate(Limits(iterations=5, nodes=4000, seconds=2))
    graph.check(seeds=(0,))
    inputs = random_inputs(program, 1)
    want = interpret(program, inputs)
    want = want if isinstance(want, tuple) else (want,)
    for v in graph.extract(4):
        got = interpret(v.program, inputs)
        for x, y in zip(got if isinstance(got, tuple) else (got,), want, strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-8, equal_nan=True, err_msg=str(v.rules))
