"""Rows measured elsewhere carry their bundle's key: ``axon-eg optimize P --rows ROWS`` takes only rows measured
on P's own bundle. Another program's rows (their baseline ids are the same as P's) are refused in one line
naming both bundles, and nothing is stored under P's key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def axon_eg(*args: object, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRITON_INTERPRET": "1", "AXON_EG_FORCE_CPU": "1"}
    return subprocess.run([sys.executable, "-m", "axon_eg.cli", *map(str, args), "--cache", str(cache)], env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def gelu_rows(tmp_path_factory) -> tuple[Path, Path]:
    """gelu's bundle (as ``--bundle-only`` writes it), measured by the worker as a GPU box would: its rows file."""
    from axon_eg import suite
    from axon_eg.measure.worker import run_bundle
    from axon_eg.pipeline import write_bundle_only

    cache = tmp_path_factory.mktemp("cache")
    bundle = write_bundle_only(suite.get("gelu").bound(small=True), k=1, cache_dir=cache, device="cpu",
                               saturation_s=0.3)
    rows = cache.parent / "gelu_rows.jsonl"
    run_bundle(bundle, rows, gpus=[])
    return cache, rows


def test_rows_carry_their_bundle_key(gelu_rows):
    cache, rows = gelu_rows
    keys = {json.loads(line)["bundle"] for line in rows.read_text().splitlines() if line.strip()}
    assert len(keys) == 1 and (cache / "bundles" / keys.pop()).is_dir()


def test_rows_of_another_programs_bundle_are_refused_and_nothing_is_stored(gelu_rows, tmp_path):
    cache, rows = gelu_rows
    before = sorted(p.relative_to(cache) for p in cache.rglob("*") if p.is_file())
    proc = axon_eg("optimize", "silu", "-k", "1", "--rows", rows, "--out", tmp_path / "out_silu", cache=cache)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("axon-eg: error: ") and str(rows) in lines[0], lines
    assert "program 'gelu'" in lines[0] and "program 'silu'" in lines[0], lines
    after = sorted(p.relative_to(cache) for p in cache.rglob("*") if p.is_file())
    assert not [p for p in after if p not in before and not str(p).startswith("bundles")], after  # no table part


def test_edited_rows_of_another_bundle_are_refused_by_the_api(gelu_rows, tmp_path):
    """A rows file whose key was rewritten by hand into another run's is still refused if even one row keeps
    another key: a file is accepted whole or not at all."""
    from axon_eg import suite
    from axon_eg.pipeline import PipelineError, bundle_path, saturate_and_extract

    cache, rows = gelu_rows
    program = suite.get("silu").bound(small=True)
    mine = bundle_path(program, k=1, cache_dir=cache).name
    got = [json.loads(line) for line in rows.read_text().splitlines() if line.strip()]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("\n".join(json.dumps({**r, "bundle": mine if i else r["bundle"]}) for i, r in enumerate(got)))
    with pytest.raises(PipelineError, match=r"measured on bundle \w+ \(program 'gelu'\), not on this run's bundle"):
        saturate_and_extract(program, k=1, cache_dir=cache, device="cpu", rows=mixed)
