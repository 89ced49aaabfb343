"""Phase 1's cost on model regions (issue 49 item 4): identical regions share one phase 1, the νGraph's
analysis of dim vectors stays linear, and where phase 1's time went is recorded."""

from __future__ import annotations

import json
import time

import pytest

import axon_eg as ax
from axon_eg import pipeline, saturation
from axon_eg.egraph.nugraph import NuGraph
from axon_eg.ir.program import canonical_inputs


@ax.program(M=32, K=48, N=64)
def _layer_a(x: ax.Tensor["M", "K", ax.fp32], blocks_0_w: ax.Tensor["K", "N", ax.fp32],
             blocks_0_b: ax.Tensor["N", ax.fp32]):
    return ax.relu(x @ blocks_0_w + blocks_0_b)


@ax.program(M=32, K=48, N=64)
def _layer_b(h: ax.Tensor["M", "K", ax.fp32], blocks_7_w: ax.Tensor["K", "N", ax.fp32],
             blocks_7_b: ax.Tensor["N", ax.fp32]):
    return ax.relu(h @ blocks_7_w + blocks_7_b)


def _rows(bundle):
    """The bundle's candidates without what names them (ids and sources follow the program's names)."""
    rows = json.loads((bundle / "candidates.json").read_text())
    return [(r["kind"], r.get("plan"), r.get("tilings"), r.get("isa"), r.get("predicted_us")) for r in rows]


def test_identical_regions_share_one_phase_1_whatever_came_first(tmp_path) -> None:
    """Two layers' regions differ in their inputs' names only: the second is served by the first's phase 1
    (recorded as reused), with its own names in its kernels; and the same candidates come out of a phase 1 of
    the second alone (another cache directory, nothing to reuse): the result does not depend on the order."""
    assert _layer_a.hash != _layer_b.hash
    assert canonical_inputs(_layer_a)[0].hash == canonical_inputs(_layer_b)[0].hash
    first = pipeline.write_bundle_only(_layer_a, k=3, cache_dir=tmp_path / "one", saturation_s=5.0)
    second = pipeline.write_bundle_only(_layer_b, k=3, cache_dir=tmp_path / "one", saturation_s=5.0)
    alone = pipeline.write_bundle_only(_layer_b, k=3, cache_dir=tmp_path / "two", saturation_s=5.0)
    assert not pipeline.phase1_stages(first)["reused"] and pipeline.phase1_stages(second)["reused"]
    assert not pipeline.phase1_stages(alone)["reused"]
    assert _rows(first) == _rows(second) == _rows(alone)
    ids = lambda b: [r["id"] for r in json.loads((b / "candidates.json").read_text())]  # noqa: E731
    assert ids(second) == ids(alone) != ids(first)  # ids digest the program's own variant (its names)
    kernels = [p.read_text() for p in second.glob("c*.py")]
    assert kernels and all("blocks_0" not in k for k in kernels)
    assert any("blocks_7_w" in k for k in kernels)


def test_phase_1_records_its_stages_and_how_saturation_stopped(tmp_path) -> None:
    result = pipeline.saturate_and_extract(_layer_a, k=2, cache_dir=tmp_path, device="cpu", saturation_s=5.0)
    stages = result.stages
    assert {"saturation_s", "extraction_s", "emission_s", "enumeration", "saturation"} <= set(stages)
    assert stages["saturation"]["stop_reason"] == "saturated" and not stages["saturation"]["clock_limited"]
    assert stages["saturation"]["node_budget"] == saturation.saturation_nodes(_layer_a)
    assert stages["enumeration"]["candidates"] >= stages["enumeration"]["kept"] > 0
    assert "saturation" in result.summary() and "extraction" in result.summary()
    again = pipeline.saturate_and_extract(_layer_a, k=2, cache_dir=tmp_path, device="cpu", saturation_s=5.0)
    assert again.cache_hit and again.stages == stages


def test_a_wide_reshape_among_many_sizes_analyses_in_linear_time() -> None:
    """A rank-5 reshape in a program with a dozen distinct sizes: egglog's join over every entry's ``dval``
    took minutes (40 s at 8 sizes); entries read one per rule (``schema._dim_entries``) take milliseconds."""
    sizes = range(101, 113)
    params = ", ".join(f"y{k}: ax.Tensor[{n}, ax.fp32]" for k, n in enumerate(sizes))
    body = " + ".join(f"ax.sum(y{k})" for k in range(len(sizes)))
    source = (f"@ax.program()\ndef shuffle(x: ax.Tensor[4, 6, 5, 5, ax.fp32], {params}):\n"
              f"    r = ax.reshape(x, (4, 2, 3, 5, 5))\n    return ax.sum(ax.transpose(r, (0, 2, 1, 3, 4))) + {body}\n")
    scope = {"ax": ax}
    exec(source, scope)  # noqa: S102 - a program with many inputs, written out
    started = time.monotonic()
    graph = NuGraph(scope["shuffle"], [])
    assert time.monotonic() - started < 10.0
    assert graph.enode_count() > 0


def test_phase_1_computes_no_reference_whose_values_are_large_even_from_small_inputs(tmp_path, monkeypatch) -> None:
    """NetVLAD's residuals: small inputs, one value of 157M elements on the way to a small output. The float64
    reference runs on the measuring device (``reference.py``), not in phase 1's interpreter (21 s there)."""
    from axon_eg import bundle
    from axon_eg.hw import load
    from axon_eg.ir.builder import Builder
    from axon_eg.ir.dtypes import fp32

    b = Builder("residuals")
    x, c = b.input("x", (8, 256), fp32), b.input("c", (16, 256), fp32)
    xs = b.emit("broadcast_to", b.emit("expand_dims", x, axis=0), shape=(16, 8, 256))
    cs = b.emit("broadcast_to", b.emit("expand_dims", c, axis=1), shape=(16, 8, 256))
    wide = b.emit("broadcast_to", b.emit("expand_dims", b.emit("sub", xs, cs), axis=0), shape=(256, 16, 8, 256))
    program = b.build([b.emit("sum", b.emit("square", wide), axes=(0, 3))])
    assert bundle.NPZ_MAX_INPUT_ELEMS < 256 * 16 * 8 * 256 and not bundle.reference_fits_npz(program)
    monkeypatch.setattr(bundle, "reference_arrays", lambda *a: pytest.fail("phase 1 computed a reference"))
    root = bundle.write_bundle(tmp_path / "b", program, [], load("h200"))
    assert (root / "reference.py").exists() and not (root / "ref.npz").exists()


def test_a_bundle_whose_phase_1_is_complete_is_not_written_again(tmp_path) -> None:
    """The remote flow rebuilds a model before its bundles are measured: each region's bundle is kept as it is
    (phase 1 would write the same), unless it was made for another device (other baselines)."""
    first = pipeline.write_bundle_only(_layer_a, k=2, cache_dir=tmp_path, device="cuda", saturation_s=5.0)
    record = first / pipeline.PHASE1_FILE
    written = record.stat().st_mtime_ns
    assert pipeline.write_bundle_only(_layer_a, k=2, cache_dir=tmp_path, device="cuda", saturation_s=5.0) == first
    assert record.stat().st_mtime_ns == written
    assert pipeline.write_bundle_only(_layer_a, k=2, cache_dir=tmp_path, device="cpu", saturation_s=5.0) == first
    assert record.stat().st_mtime_ns != written and pipeline.phase1_stages(first)["device"] == "cpu"
    from axon_eg.cache import manifest

    assert "torch_compile" not in {c["id"] for c in manifest(first)}  # the CPU's bundle: eager only
