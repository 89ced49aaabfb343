"""The two result tables (schemas, validation, old parts) and the Markdown report with its plots."""

from __future__ import annotations

import json

import polars as pl
import pytest

from axon_eg.measure import part_store, table_schemas, tables
from axon_eg.measure.manifest import ROW_FIELDS
from axon_eg.measure.report import NO_TIMINGS, report


def meas(cid: str, status: str = "ok", median: float | None = None, **kw) -> dict:
    return {"id": cid, "status": status, "median_us": median, "kind": "candidate", "cache_key": "k1",
            "program": "softmax", "hw": "H200", "target": "triton", "timestamp": "2026-01-01T00:00:00", **kw}


def test_worker_rows_are_exactly_the_measurements_schema():
    assert list(ROW_FIELDS) == list(table_schemas.SCHEMA)


def test_candidates_table_validation_nulls_and_json(tmp_path):
    with pytest.raises(ValueError, match="unknown column 'speedup'"):
        tables.append("candidates", [{"cache_key": "k", "id": "a", "speedup": 2.0}], cache=tmp_path)
    with pytest.raises(ValueError, match="'cache_key'"):
        tables.append("candidates", [{"id": "a"}], cache=tmp_path)
    with pytest.raises(ValueError, match="'id'"):
        tables.append("candidates", pl.DataFrame({"cache_key": ["k"], "id": [None]}, schema={"cache_key": pl.Utf8,
                                                                                              "id": pl.Utf8}),
                      cache=tmp_path)
    empty = tables.results(tmp_path, "candidates").collect()
    assert empty.height == 0 and empty.schema == pl.Schema({**table_schemas.CANDIDATES_SCHEMA,
                                                            **table_schemas.DERIVED["candidates"]})
    assert tables.read("candidates", tmp_path).collect().schema == pl.Schema(table_schemas.CANDIDATES_SCHEMA)
    tables.append("candidates", [{"cache_key": "k", "id": "a", "rank": 0, "groups": 2, "rules": ["exp_log", "fuse"],
                                  "tilings": {"g0": [64, 128]}, "lowering": "triton:2 torch:1", "predicted_us": 1.5}],
                  cache=tmp_path)
    tables.append("candidates", pl.DataFrame({"cache_key": ["k"], "id": ["b"], "rank": [1]}), cache=tmp_path)
    df = tables.results(tmp_path, "candidates").sort("id").collect()
    assert df.schema == pl.Schema({**table_schemas.CANDIDATES_SCHEMA, **table_schemas.DERIVED["candidates"]})
    assert json.loads(df["rules"][0]) == ["exp_log", "fuse"] and json.loads(df["tilings"][0]) == {"g0": [64, 128]}
    assert df["rank"].to_list() == [0, 1] and df["plan"].to_list() == [None, None]


def test_parts_written_before_new_columns_still_read(tmp_path):
    d = tmp_path / "tables" / "measurements"
    d.mkdir(parents=True)
    pl.DataFrame({"id": ["old"], "status": ["ok"], "median_us": [2.0]}).write_parquet(d / "part-old.parquet")
    tables.append("measurements", [meas("new", median=1.0)], cache=tmp_path)
    df = tables.results(tmp_path).sort("id").collect()
    assert df.columns == [*table_schemas.SCHEMA, "superseded", "final"]
    assert df.select("id", "kind", "median_us").rows() == [("new", "candidate", 1.0), ("old", None, 2.0)]


def write_gpu_data(cache) -> None:
    rows = [meas(f"v{i}", median=10.0 + i, predicted_us=None) for i in range(5)]
    rows += [meas("bad", "wrong_result"), meas("huge", "structure_error"), meas("typo", "syntax_error")]
    rows += [meas("torch_eager", median=25.0, kind="baseline"), meas("torch_compile", median=15.0, kind="baseline")]
    rows += [meas("v0", median=99.0, timestamp="2025-01-01T00:00:00")]  # an older observation: superseded
    rows += [meas("w0", median=50.0, program="matmul", cache_key="k2"), meas("w1", median=40.0, program="matmul",
                                                                           cache_key="k2")]
    tables.append("measurements", rows, cache=cache)
    cands = [{"cache_key": "k1", "id": f"v{i}", "predicted_us": 5.0 + i} for i in range(5)]
    cands += [{"cache_key": "k2", "id": "w0", "predicted_us": 20.0}, {"cache_key": "k2", "id": "w1", "predicted_us": 30.0}]
    tables.append("candidates", cands, cache=cache)


def test_report_best_candidate_baselines_speedups_and_statuses(tmp_path):
    write_gpu_data(tmp_path)
    text = report(tmp_path)
    matmul, softmax = text.split("### ")[1:]  # sorted by program
    assert softmax.startswith("`softmax` on H200 (cache_key `k1`)")
    assert "| best candidate | v0 | 10.00 | |" in softmax
    assert "| torch eager | torch_eager | 25.00 | 2.50x |" in softmax
    assert "| torch.compile | torch_compile | 15.00 | 1.50x |" in softmax
    assert "| ok | 5 |" in softmax and "| wrong_result | 1 | bad |" in softmax
    assert "| structure_error | 1 | huge |" in softmax and "| syntax_error | 1 | typo |" in softmax
    assert "| best candidate | w1 | 40.00 | |" in matmul and "not measured" in matmul
    only = report(tmp_path, "matmul")
    assert "softmax" not in only and "w1" in only
    assert report(tmp_path, "nope").startswith("No measurements of program 'nope'")


def test_report_on_cpu_data_is_correctness_only(tmp_path):
    tables.append("measurements", [meas("a"), meas("b", "wrong_result"), meas("torch_eager", kind="baseline")],
                  cache=tmp_path)
    text = report(tmp_path, plot_dir=tmp_path / "plots")
    assert NO_TIMINGS in text and "1 of 2 candidates correct" in text and "torch eager: ok" in text
    assert "torch.compile: not measured" in text and "| wrong_result | 1 | b |" in text
    assert "Plots skipped" in text and not (tmp_path / "plots").exists()


def test_report_plots(tmp_path):
    write_gpu_data(tmp_path)
    text = report(tmp_path, plot_dir=tmp_path / "plots")
    # predicted 5..9, 20, 30 vs measured 10..14, 50, 40: ranks agree but for the matmul pair: 1 - 6*2/(7*48)
    assert "Spearman rho, predicted vs measured: 0.964 (n = 7 " in text
    for name in ("predicted_vs_measured.png", "latency_distribution.png"):
        path = tmp_path / "plots" / name
        assert str(path) in text and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_reads_past_a_damaged_part_and_counts_the_newest_rows(tmp_path):
    write_gpu_data(tmp_path)
    bad = tables.append("measurements", [meas("v9", median=1.0)], cache=tmp_path)
    bad.write_bytes(bad.read_bytes()[:20])  # truncated
    with pytest.warns(part_store.DamagedPartWarning, match=str(bad)):
        text = report(tmp_path)
    assert "v9" not in text and "| best candidate | v0 | 10.00 | |" in text
    m = tables.results(tmp_path).collect()
    v0 = m.filter(pl.col("id") == "v0").sort("timestamp")
    assert v0["superseded"].to_list() == [True, False] and v0["median_us"].to_list() == [99.0, 10.0]
    assert (tmp_path / "tables" / "measurements" / "damaged" / bad.name).exists()
