"""Issue 51, parameters in the whole-model paths: a region's weights are inputs of role ``parameter`` of its
program (drawn at their initialization scale by the harness) whether the module is exported whole
(``ax.optimize``: its parameters are ``get_attr`` nodes) or captured by dynamo (``torch.compile``: they are
``nn.Parameter`` arguments); with ``freeze=True`` they are frozen (``Program.frozen``), so what depends on them
alone (sibling weights stacked, a gain folded in, a transpose) is built once. The activation is data either way.
The bundles are written by the remote flow's phase 1 (no GPU)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import polars as pl
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import axon_eg as ax

sys.path.insert(0, str(Path(__file__).resolve().parent / "egraph"))
from test_sibling_merge import SwiGLU  # noqa: E402


def _headers(root: Path) -> list[str]:
    """Each region bundle's program line (``# program NAME(in0: bf16[...] (frozen), ...)``)."""
    return [next(line for line in (b / "torch_eager.py").read_text().splitlines() if line.startswith("# program "))
            for b in sorted((root / "bundles").iterdir())]


@pytest.mark.parametrize("how", ["optimize", "dynamo"])
@pytest.mark.parametrize("freeze", [True, False])
def test_a_regions_weights_are_frozen_exactly_when_asked(how: str, freeze: bool, tmp_path: Path) -> None:
    torch.manual_seed(0)
    module = SwiGLU(16, 24).eval()
    x = torch.randn(1, 5, 16)
    opts = {"remote": str(tmp_path), "k": 2, "freeze": freeze}
    with torch.no_grad():
        if how == "optimize":
            ax.optimize(module, (x,), **opts)
        else:
            torch.compile(module, backend="axon_eg", options=opts)(x)
    headers = _headers(tmp_path)
    assert headers
    for header in headers:
        marks = re.findall(r"(in\d+): (\w+)\[([^\]]*)\]( \((\w+)\))?", header)
        role = {shape: r or "input" for _, _, shape, _, r in marks}
        weights = [s for s in role if s in ("16", "24, 16", "16, 24")]
        assert weights, header
        assert all(role[s] == ("frozen" if freeze else "parameter") for s in weights), header
        assert role.get("1, 5, 16", "input") == "input", header  # the activation is data


def test_a_frozen_swiglu_region_measures_the_merged_gemm(tmp_path: Path) -> None:
    """The stacked-weights variant (gate and up as one GEMM) is among the candidates phase 1 bundles."""
    torch.manual_seed(0)
    module = SwiGLU(16, 24).eval()
    with torch.no_grad():
        ax.optimize(module, (torch.randn(1, 5, 16),), remote=str(tmp_path), k=4, freeze=True)
    rules = [r for b in (tmp_path / "bundles").iterdir()
             for c in json.loads((b / "candidates.json").read_text()) for r in json.loads(c.get("rules") or "[]")]
    assert any(r.startswith("broadcast_matmul_sibling_") for r in rules), sorted(set(rules))


@pytest.mark.slow  # seconds of interpreted kernels or compiles: make test-slow (CI) runs it
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sampled_from([1, 3, 7]), st.sampled_from([5, 16]), st.sampled_from([9, 24]), st.integers(0, 2**16))
def test_the_merged_gemm_kernels_match_float64(tmp_path: Path, tokens: int, hidden: int, ffn: int, seed: int) -> None:
    """Every candidate built on the merged variant, emitted for the Triton backend and run under the interpreter,
    is judged correct against float64 by the fixed harness (odd sizes and rows of 1 included)."""
    torch.manual_seed(seed)
    module = SwiGLU(hidden, ffn).eval()
    program = ax.from_torch(module, (torch.randn(1, tokens, hidden),)).frozen()
    result = ax.saturate_and_extract(program, k=4, device="cpu", cache_dir=tmp_path / f"c{seed}_{tokens}_{hidden}_{ffn}")
    merged = result.table.filter(pl.col("rules").str.contains("matmul_sibling_"))
    assert merged.height >= 1
    assert merged["status"].to_list() == ["ok"] * merged.height, merged.select("id", "status", "error").rows()
