"""Issue 51, the norm's weight folded across the GEMM (``*_k_through_matmul``, discovered and proved like every
rule): for a Llama-style RMSNorm feeding a Linear, the νGraph holds the variant whose GEMM reads the weight
scaled by the norm's gain, ``rmsnorm(x, g) @ W^T = (x * rsqrt(mean(x^2) + eps)) @ (g * W^T)``, and that
variant computes what the block computes (against float64, random shapes including 1 and odd sizes); it is among
the 16 cheapest variants where scaling the weight costs less than scaling the activation. The layer norm's
mean subtraction folded as a rank-1 correction, ``(x - mu) @ W = x @ W - mu * (1^T W)``, is proved too but its
forward direction is float-unsafe (cancellation between the two terms), so the νGraph never applies it that
way: a test holds that verdict."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

import axon_eg as ax
from axon_eg.egraph.nugraph import Limits, NuGraph
from axon_eg.ir.interpret import interpret
from axon_eg.rules_discovered.store import load_rules

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.models.llama import LlamaRMSNorm  # noqa: E402

FOLDS = ("mul_k_through_matmul", "broadcast_mul_k_through_matmul", "batched_mul_k_through_matmul")


class NormLinear(nn.Module):
    def __init__(self, hidden: int, out: int):
        super().__init__()
        self.norm = LlamaRMSNorm(hidden)
        self.proj = nn.Linear(hidden, out, bias=False)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.norm(x))


def _gain_folded(program) -> bool:
    """A matmul whose right operand is a product (the weight scaled by the gain), and no product of a
    rank-1 value with the activation's width before it."""
    mms = [n for n in program.nodes if n.op == "matmul"]
    return len(mms) == 1 and program.nodes[mms[0].inputs[1]].op in ("mul", "transpose") and any(
        n.op == "mul" and len(n.shape) == 2 and {program.nodes[i].op for i in n.inputs} & {"expand_dims", "transpose"}
        for n in program.nodes)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([1, 3, 7]), st.sampled_from([5, 16]), st.sampled_from([1, 9]), st.integers(0, 2**16))
def test_the_gain_fold_is_in_the_graph_and_computes_the_block(tokens, hidden, out, seed):
    torch.manual_seed(seed)
    module = NormLinear(hidden, out).eval()
    x = torch.randn(1, tokens, hidden)
    program = ax.from_torch(module, (x,))
    graph = NuGraph(program, load_rules())
    graph.saturate(Limits(iterations=12, seconds=20))
    assert sum(graph.report.matches_per_rule.get(r, 0) for r in FOLDS) > 0, graph.report.matches_per_rule
    variants = [v.program for v in graph.extract(16)]
    folded = [p for p in variants if _gain_folded(p)]
    if tokens > out:  # scaling the weight (hidden x out) costs less than scaling the activation (tokens x hidden)
        assert folded, [str(p) for p in variants[:4]]
    args = [x.double().numpy(), module.norm.weight.detach().double().numpy(), module.proj.weight.detach().double().numpy()]
    with torch.no_grad():
        want = module.double()(x.double()).numpy()
    for p in folded:
        got = interpret(p, args)
        # the interpreter rounds to the program's fp32 at every op
        np.testing.assert_allclose(got[0] if isinstance(got, tuple) else got, want, rtol=1e-5, atol=1e-6)


def test_the_rank1_shift_correction_is_proved_but_never_applied_forward():
    names = {r.name for r in load_rules()}
    for shift in ("sub_row_shift_out_of_matmul_A", "batched_sub_row_shift_out_of_matmul_A"):
        assert shift not in names and f"{shift}~rev" in names, sorted(n for n in names if "shift_out" in n)
