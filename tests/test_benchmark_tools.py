"""The benchmark tools that set the ranking and write the suite's run file under ``benchmarks/results/runs/``:
``benchmarks/tile_sweep.py`` (bundles of one group's tilings, the report that compares the current tie-break with
measured times) and the helpers of ``benchmarks/run_suite.py`` that read other runs (fastest torch.compile, date of
the newest row)."""

from __future__ import annotations

import json
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from benchmarks import run_suite, tile_sweep  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    assert tile_sweep.main(["bundle", str(out), "--program", "log_softmax", "--limit", "4", "--small"]) == 0
    return out / "log_softmax-g0"


def test_sweep_bundle_holds_one_kernel_per_tiling(sweep_dir):
    manifest = json.loads((sweep_dir / "manifest.json").read_text())["candidates"]
    info = json.loads((sweep_dir / "sweep.json").read_text())
    assert info["program"] == "log_softmax" and info["kind"] == "reduction" and info["bytes"] > 0
    assert 1 <= len(manifest) <= 4 and all(c["kind"] == "candidate" for c in manifest)
    tilings = [json.dumps(c["meta"]["tiling"], sort_keys=True) for c in manifest]
    assert len(set(tilings)) == len(tilings)  # distinct tilings, nothing else differs
    assert sorted(c["meta"]["sweep_rank"] for c in manifest) == list(range(len(manifest)))
    for c in manifest:
        assert (sweep_dir / c["source"]).read_text().startswith("# axon_eg kernel")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(times=st.lists(st.floats(1.0, 1e3), min_size=4, max_size=4, unique=True))
def test_sweep_report_compares_the_tie_break_with_measured_times(sweep_dir, times, capsys):
    manifest = json.loads((sweep_dir / "manifest.json").read_text())["candidates"]
    rows = [{"id": c["id"], "status": "ok", "median_us": t} for c, t in zip(manifest, times)]
    rows.append({"id": "not_in_manifest", "status": "ok", "median_us": 0.5})
    (sweep_dir / "rows.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n{truncated")
    assert tile_sweep.main(["report", str(sweep_dir.parent)]) == 0
    text = capsys.readouterr().out
    measured = [r for r in rows[:-1]]
    if len(measured) >= 3:
        assert "current tie-break vs measured: Spearman" in text
        assert f"the fastest {min(r['median_us'] for r in measured):.1f} us" in text
    else:
        assert "too few measured tilings" in text
    assert text.count("| ok |") == len(rows)


def test_compile_history_takes_torch_compile_rows_of_other_runs(tmp_path):
    (tmp_path / "a.jsonl").write_text("\n".join([
        json.dumps({"id": "torch_compile", "status": "ok", "median_us": 120.0, "program": "softmax"}),
        json.dumps({"id": "torch_eager", "status": "ok", "median_us": 90.0, "program": "softmax"}),
        json.dumps({"id": "torch_compile", "status": "timeout", "median_us": None, "program": "softmax"}),
        "{not json"]))
    (tmp_path / "gqa.prewarm.json").write_text(json.dumps({"id": "torch_compile", "status": "ok", "median_us": 500.0}))
    got = run_suite._compile_history([str(tmp_path / "*.jsonl"), str(tmp_path / "*.json")])
    assert got == {"softmax": [120.0], "gqa": [500.0]}  # the program from the row, else from the file name


def test_last_measured_is_the_newest_row(tmp_path):
    rows = tmp_path / "rows"
    rows.mkdir()
    (rows / "a.jsonl").write_text(json.dumps({"timestamp": "2026-11-30T01:00:00+00:00"}) + "\n")
    (rows / "b.jsonl").write_text(json.dumps({"timestamp": "2026-12-01T09:00:00+00:00"}) + "\n")
    assert run_suite._last_measured(tmp_path) == "2026-12-01"
    assert run_suite._last_measured(tmp_path / "nothing") is None


def test_archive_packs_what_a_resumed_run_needs(tmp_path):
    import tarfile

    out = tmp_path / "run"
    (out / "rows").mkdir(parents=True)
    (out / "rows" / "softmax.jsonl").write_text(json.dumps({"id": "c00", "status": "ok"}) + "\n")
    (out / "index.json").write_text(json.dumps({"softmax": {"bundle": "cache/bundles/x"}}))
    (out / "cache").mkdir()
    (out / "cache" / "big.bin").write_bytes(b"x" * 1000)  # bundles stay behind
    path = run_suite.archive(out, tmp_path / "suite.tgz")
    with tarfile.open(path) as tar:
        names = sorted(tar.getnames())
        tar.extractall(tmp_path / "back", filter="data")
    assert names == ["index.json", "rows", "rows/softmax.jsonl"]
    assert (tmp_path / "back" / "rows" / "softmax.jsonl").read_text() == (out / "rows" / "softmax.jsonl").read_text()
    assert not (tmp_path / "suite.tgz.tmp").exists()
