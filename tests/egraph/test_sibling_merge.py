"""Issue 51, sibling GEMMs merged into one (``merge_matmul``, discovered and proved like every rule): two or three
matmuls that read the same activation (a SwiGLU's gate and up projections, attention's q, k and v) are parts of
one matmul over the stacked weights, ``A @ B_p = squeeze(slice(A @ stack(B_1..B_n), p))``, applied where every
sibling exists (the rule's context). For a Llama-style MLP region the νGraph holds both the merged variant and the
gain-folded one, extraction offers the merged variant, and it computes what the block computes against float64
(random shapes including 1 and odd sizes). A rule with a context runs once, so merges never stack merges."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

import axon_eg as ax
from axon_eg.egraph.nugraph import Limits, NuGraph
from axon_eg.egraph.patterns import PatternError, parse_rule
from axon_eg.egraph.rules import compile_rule
from axon_eg.ir.interpret import interpret
from axon_eg.rules_discovered import enumerate as E
from axon_eg.rules_discovered.instantiate import instantiate
from axon_eg.rules_discovered.store import load_rules, load_stored, rule_text
from axon_eg.semantics.prover import prove_equal

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.models.llama import LlamaRMSNorm  # noqa: E402

FOLDS = ("broadcast_mul_k_through_matmul", "mul_k_through_matmul", "batched_mul_k_through_matmul")


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.norm = LlamaRMSNorm(hidden)
        self.gate = nn.Linear(hidden, ffn, bias=False)
        self.up = nn.Linear(hidden, ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x)
        return self.down(nn.functional.silu(self.gate(y)) * self.up(y))


class QKV(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(hidden, hidden, bias=False) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.q(x) @ self.k(x).transpose(-1, -2), dim=-1) @ self.v(x)


def _stacked(program, parts: int) -> list[int]:
    """The matmuls whose right operand is a stack of ``parts`` weights."""
    return [i for i, n in enumerate(program.nodes) if n.op == "matmul"
            and program.nodes[n.inputs[1]].op == "concat" and len(program.nodes[n.inputs[1]].inputs) == parts]


def _graph(module: nn.Module, x: torch.Tensor) -> NuGraph:
    graph = NuGraph(ax.from_torch(module, (x,)), load_rules())
    graph.saturate(Limits(iterations=12, seconds=20))
    return graph


def _check(program, module: nn.Module, x: torch.Tensor) -> None:
    args = [x.double().numpy()] + [p.detach().double().numpy() for _, p in module.named_parameters()]
    with torch.no_grad():
        want = module.double()(x.double()).numpy()
    got = interpret(program, args)
    np.testing.assert_allclose(got[0] if isinstance(got, tuple) else got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # about 5 s: saturation of a SwiGLU region, six examples
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([1, 3, 7]), st.sampled_from([5, 16]), st.sampled_from([1, 9, 24]), st.integers(0, 2**16))
def test_a_swiglu_region_holds_the_merged_and_the_folded_variants_and_they_compute_the_block(tokens, hidden, ffn, seed):
    torch.manual_seed(seed)
    module = SwiGLU(hidden, ffn).eval()
    x = torch.randn(1, tokens, hidden)
    graph = _graph(module, x)
    matches = graph.report.matches_per_rule
    assert matches.get("broadcast_matmul_sibling_0_of_2", 0) and matches.get("broadcast_matmul_sibling_1_of_2", 0)
    assert sum(matches.get(r, 0) for r in FOLDS) > 0, matches
    variants = graph.extract(8, modulo_commutativity=True, structural=4)
    merged = [v for v in variants if _stacked(v.program, 2)]
    assert len(merged) == 1 and "broadcast_matmul_sibling_0_of_2" in merged[0].rules
    program = merged[0].program
    assert sum(n.op == "matmul" for n in program.nodes) == 2  # gate and up are one GEMM, then down
    _check(program, module, x)
    # merges never stack merges: the rule with a context ran once
    for n in program.nodes:
        if n.op == "concat":
            assert all(program.nodes[i].op == "expand_dims" for i in n.inputs)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([1, 6]), st.sampled_from([3, 8]), st.integers(0, 2**16))
def test_q_k_and_v_projections_become_one_gemm(tokens, hidden, seed):
    torch.manual_seed(seed)
    module = QKV(hidden).eval()
    x = torch.randn(2, tokens, hidden)
    graph = _graph(module, x)
    assert all(graph.report.matches_per_rule.get(f"broadcast_matmul_sibling_{p}_of_3", 0) for p in range(3))
    merged = [v for v in graph.extract(8, modulo_commutativity=True, structural=4) if _stacked(v.program, 3)]
    assert merged, "no variant with q, k and v merged"
    _check(merged[0].program, module, x)


def test_the_merge_rules_are_stored_with_their_context_and_proved():
    stored = {s.rule.name: s for s in load_stored() if s.rule.meta.get("family") == "merge_matmul"}
    for prefix in ("", "batched_", "broadcast_"):
        for n in E.SIBLINGS:
            for p in range(n):
                s = stored[f"{prefix}matmul_sibling_{p}_of_{n}"]
                assert len(s.rule.context) == n - 1
                assert s.entry["context"] == rule_text(s.rule)["context"]
                assert s.entry["proof"]["status"] == "proven"
    assert not any(name.endswith("~rev") for name in stored)  # a merge read back would only undo itself


def test_a_merge_that_reads_the_wrong_part_is_refuted_with_a_counterexample():
    shapes = [("A", ("M", "K")), ("B0", ("K", "N")), ("B1", ("K", "N"))]

    def part(b, A, p, B0, B1):
        stack = b.emit("concat", b.emit("expand_dims", B0, axis=0), b.emit("expand_dims", B1, axis=0), axis=0)
        return b.emit("squeeze", b.emit("slice", b.emit("matmul", A, stack), axis=0, start=p, stop=p + 1, step=1),
                      axes=(0,))
    wrong = E.make("wrong_part", "merge_matmul", shapes, lambda b, A, B0, B1: b.emit("matmul", A, B0),
                   lambda b, A, B0, B1: part(b, A, 1, B0, B1), context=[lambda b, A, B0, B1: b.emit("matmul", A, B1)])
    result = prove_equal(wrong.lhs, wrong.rhs, timeout_ms=5000)
    assert result.status == "refuted" and result.counterexample is not None


def test_a_context_must_bind_what_the_rule_uses_and_compiles_to_distinct_e_classes():
    with pytest.raises(PatternError, match="binds \\?C, which nothing uses"):
        parse_rule("r", "(matmul ?A ?B)", "(matmul ?A ?B)", context=["(matmul ?A ?C)"])
    rule = parse_rule("r", "(matmul ?A ?B)", "(matmul ?A ?C)",
                      ["(= (rank ?A) 2)", "(= (rank ?B) 2)", "(= (rank ?C) 2)", "(= (dim ?B 0) (dim ?A 1))",
                       "(= (shape ?C) (shape ?B))"], context=["(matmul ?A ?C)"])
    assert "(!= matched ctx_0)" in compile_rule(rule, "rs0")
    assert "with (matmul ?A ?C)" in str(rule)
    ob = instantiate(rule)  # the obligation has ?C as an input on both sides
    assert [s.name for s in ob.lhs.inputs] == [s.name for s in ob.rhs.inputs] == ["A", "B", "C"]
