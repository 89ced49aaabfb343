"""The transformer-block corpus (``benchmarks/blocks``, issue 51): every block comes at a prefill and a
decode-like size; at its small config it builds, runs in bfloat16 with finite outputs that agree with the
block in float64, and ``torch.export`` takes it; its real inputs have the token counts the corpus promises.
The slow tier runs one block through ``benchmarks/models.py --corpus blocks`` end to end on the CPU."""

from __future__ import annotations

import json
import math

import pytest
import torch
from benchmarks.blocks import BLOCKS

NAMES = sorted(BLOCKS)


def test_every_block_has_a_prefill_and_a_decode_size():
    blocks = {n.rsplit("_", 1)[0] for n in BLOCKS}
    assert {"llama7b", "llama1b", "gpt2", "bert", "vit_b", "mixtral_expert"} <= blocks
    assert set(BLOCKS) == {f"{b}_{s}" for b in blocks for s in ("prefill", "decode")}
    assert all(s.dtype == torch.bfloat16 and s.description for s in BLOCKS.values())


@pytest.mark.parametrize("name", NAMES)
def test_real_sizes_have_the_promised_token_counts(name):
    x = BLOCKS[name].inputs("real", 0)[0]
    tokens = math.prod(x.shape[:-1])
    if name.endswith("_prefill"):
        assert 500 <= tokens <= 2048, (name, tuple(x.shape))
    elif name.startswith("vit_b"):
        assert tokens == 197, (name, tuple(x.shape))  # one image
    else:
        assert 1 <= tokens <= 16, (name, tuple(x.shape))


@pytest.mark.parametrize("name", NAMES)
def test_a_block_builds_runs_and_exports(name):
    spec = BLOCKS[name]
    model = spec.build("small")
    args = spec.inputs("small", 0)
    assert all(not a.is_floating_point() or a.abs().max() > 0 for a in args)
    with torch.no_grad():
        got = model(*args)
        want = model.double()(*(a.double() if a.is_floating_point() else a for a in args))
    assert got.dtype == torch.bfloat16 and torch.isfinite(got.float()).all()
    err = ((got.double() - want).abs().max() / want.abs().max()).item()
    assert err < 5e-2, (name, err)
    torch.export.export(spec.build("small"), args)


@pytest.mark.slow
def test_the_runner_takes_the_block_corpus(tmp_path):
    from tests.test_models_benchmark import _run

    name, out = "mixtral_expert_decode", tmp_path / "run"
    _run("--corpus", "blocks", "build", str(out), name, "--config", "small", "--k", "2")
    _run("--corpus", "blocks", "measure", str(out), name, "--cpu")
    _run("--corpus", "blocks", "build", str(out), name, "--config", "small", "--k", "2")
    built = json.loads((out / "models" / name / "build.json").read_text())
    assert built["saved"], built
    _run("--corpus", "blocks", "measure", str(out), name, "--cpu")
    rows = {r["variant"]: r for r in json.loads((out / "models" / name / "timings.json").read_text())["rows"]}
    assert set(rows) == {"eager", "compile", "axon_eg"} and all(r["correct"] for r in rows.values()), rows


def test_the_gemm_benchmark_lists_every_projection_of_the_blocks():
    """``benchmarks/gemm_core_bench.py --block-shapes`` times the GEMMs the blocks run: every Linear of each
    block's real config, at its prefill and decode token counts, is in ``BLOCK_GEMMS``."""
    from benchmarks.gemm_core_bench import BLOCK_GEMMS

    for block, ((m_prefill, m_decode), nks) in BLOCK_GEMMS.items():
        for size, m in (("prefill", m_prefill), ("decode", m_decode)):
            spec = BLOCKS[f"{block}_{size}"]
            assert math.prod(spec.inputs("real", 0)[0].shape[:-1]) == m, (block, size)
            with torch.device("meta"):
                model = spec.build("real")
            linears = {(mod.out_features, mod.in_features) for mod in model.modules() if isinstance(mod, torch.nn.Linear)}
            assert linears == set(nks), (block, sorted(linears), nks)
