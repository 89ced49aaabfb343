"""Issue 15: cache semantics users can trust and tables that survive damage.

Final rows (ok, syntax / structure / compile errors, wrong results) are cached; crashes, timeouts, budget skips,
interrupted calls and environment failures are measured again by the next run, and only they; ``force=True``
measures everything again and the newest rows win (no duplicates); ``axon-eg cache ls|rm``; a truncated, zeroed,
garbled or incompatible Parquet part is moved aside with one warning naming it, and the run goes on."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ["AXON_EG_FORCE_CPU"] = "1"

import polars as pl
import pytest
from benchmarks import suite
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import axon_eg as ax
from axon_eg import pipeline
from axon_eg.cli import main
from axon_eg.measure import manifest, part_store, table_schemas, tables, worker

ROOT = Path(__file__).resolve().parents[1]


def silu_run(cache: Path, **kw) -> pipeline.Result:
    return pipeline.saturate_and_extract(suite.get("silu").bound(small=True), k=2, cache_dir=cache, device="cpu",
                                         saturation_s=0.3, **kw)


@pytest.fixture
def planted(monkeypatch):
    """Wraps the worker: ``calls`` lists every id measured; ``plan[prefix] = (status, stage, error)`` makes the next
    measurement of the id starting with ``prefix`` that row (written to the resume file as the worker writes it),
    and ``plan[prefix] = "interrupt"`` raises KeyboardInterrupt there, as Ctrl-C would."""
    real = worker.run_bundle
    calls: list[str] = []
    plan: dict[str, object] = {}

    def run_bundle(bundle, out, gpus=None, ids=None):
        cands = manifest.load_manifest(bundle)
        rows = []
        for cid in (list(ids) if ids is not None else [c["id"] for c in cands]):
            prefix = next((p for p in plan if cid.startswith(p)), None)
            if prefix is None:
                calls.append(cid)
                rows += real(bundle, out, gpus=gpus, ids=[cid])
                continue
            what = plan.pop(prefix)
            if what == "interrupt":
                raise KeyboardInterrupt
            calls.append(cid)
            status, stage, error = what
            row = manifest.make_row(next(c for c in cands if c["id"] == cid), "cpu", status=status, stage=stage,
                                  error=error, elapsed_s=0.01)
            writer = manifest.RowWriter(out)
            writer.write(row)
            writer.close()
            rows.append(row)
        return rows

    monkeypatch.setattr(worker, "run_bundle", run_bundle)
    return calls, plan


def ids_of(result: pipeline.Result) -> dict[str, str]:
    """'eager', 'c00', 'c01' -> the run's ids."""
    ids = result.table["id"].to_list()
    return {"eager": "torch_eager", **{i[:3]: i for i in ids if i.startswith("c")}}


# ------------------------------------------------------------------------------------------------ taxonomy
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 139.8 GiB total capacity)"


@pytest.mark.parametrize("status,error,final", [
    ("ok", None, True), ("syntax_error", "SyntaxError: invalid syntax", True), ("structure_error", "smem", True),
    ("compile_error", "CompilationError: at 3:4", True), ("wrong_result", "output 0: 3 elements over", True),
    ("runtime_error", "IndexError: index 5 is out of bounds", True), ("runtime_error", OOM, False),
    ("runtime_error", "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable", False),
    ("compile_error", "OSError: [Errno 28] No space left on device", False),
    ("crashed", "child killed by signal SIGKILL", False), ("timeout", "killed after 60 s", False),
    ("skipped", "budget", False), ("interrupted", None, False), ("a_new_status", None, False), (None, None, False),
])
def test_status_taxonomy(status, error, final):
    assert table_schemas.is_final(status, error) is final
    df = pl.DataFrame({"status": [status], "error": [error]}, schema={"status": pl.Utf8, "error": pl.Utf8})
    assert df.select(table_schemas.final_expr()).item() is final


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([*table_schemas.FINAL_STATUSES, *table_schemas.TRANSIENT_STATUSES, "other", None]),
                          st.one_of(st.none(), st.text(max_size=30),
                                    st.sampled_from(table_schemas.ENVIRONMENT_ERRORS).map(lambda f: f"x {f.upper()} y"))),
                min_size=1, max_size=20))
def test_is_final_and_final_expr_agree(rows):
    df = pl.DataFrame(rows, schema={"status": pl.Utf8, "error": pl.Utf8}, orient="row")
    assert df.select(table_schemas.final_expr())["status"].to_list() == [table_schemas.is_final(s, e) for s, e in rows]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["k1", "k2"]), st.sampled_from(["a", "b", "c"]), st.integers(0, 5)),
                min_size=1, max_size=25), st.integers(1, 4))
def test_exactly_the_newest_observation_is_not_superseded(obs, n_parts):
    """Whatever the order of the parts and rows: one current row per (cache_key, id), the newest (ties: the last
    stored); for candidates, only the rows of each key's newest phase 1."""
    with tempfile.TemporaryDirectory() as d:
        rows = [{"cache_key": k, "id": i, "status": "ok", "timestamp": f"2026-01-01T00:00:0{t}", "error": str(n)}
                for n, (k, i, t) in enumerate(obs)]
        for j in range(n_parts):
            tables.append("measurements", rows[j::n_parts], d)
            tables.append("candidates", [{k: r[k] for k in ("cache_key", "id", "timestamp")} for r in rows[j::n_parts]], d)
        m = tables.results(d).collect()
        assert m.height == len(rows)
        current = m.filter(~pl.col("superseded"))
        assert sorted(current.select("cache_key", "id").rows()) == sorted({(k, i) for k, i, _ in obs})
        newest = m.group_by("cache_key", "id").agg(pl.col("timestamp").max())
        assert current.join(newest, on=["cache_key", "id"]).filter(pl.col("timestamp") != pl.col("timestamp_right")).is_empty()
        c = tables.results(d, "candidates").collect().filter(~pl.col("superseded"))
        latest = {k: max(f"2026-01-01T00:00:0{t}" for kk, _, t in obs if kk == k) for k, _, _ in obs}
        assert sorted(c.select("cache_key", "id").rows()) == sorted({(k, i) for k, i, t in obs
                                                                      if f"2026-01-01T00:00:0{t}" == latest[k]})


# ------------------------------------------------------------------------------------------------ retries
@pytest.mark.parametrize("transient,final", [
    (("crashed", "run", "child killed by signal SIGSEGV; stderr: "), ("wrong_result", "correctness", "3 over tol")),
    (("timeout", "run", "killed after 60 s"), ("compile_error", "compile", "triton.CompilationError: at 2:8")),
    (("runtime_error", "run", OOM), ("runtime_error", "run", "IndexError: index 9 is out of bounds")),
], ids=["crashed+wrong_result", "timeout+compile_error", "oom+runtime_error"])
def test_a_transient_row_is_retried_next_run_and_a_final_one_is_not(tmp_path, planted, transient, final):
    calls, plan = planted
    plan.update(c00=transient, c01=final)
    first = silu_run(tmp_path)
    ids = ids_of(first)
    status = dict(zip(first.table["id"], first.table["status"]))
    assert status[ids["c00"]] == transient[0] and status[ids["c01"]] == final[0]
    assert first.best.id == "torch_eager" and not first.cache_hit
    assert set(first.measured) == set(ids.values())
    del calls[:]
    second = silu_run(tmp_path)  # the "fixed" environment: the transient failure does not come back
    assert not second.cache_hit and calls == [ids["c00"]]
    assert second.measured == (ids["c00"],) and set(second.reused) == {ids["c01"], "torch_eager"}
    status = dict(zip(second.table["id"], second.table["status"]))
    assert status[ids["c00"]] == "ok" and status[ids["c01"]] == final[0] and second.best.id == ids["c00"]
    assert second.table.height == first.table.height and second.table["id"].n_unique() == second.table.height
    assert "(1 measured, 2 from the cache)" in second.summary()
    third = silu_run(tmp_path)
    assert third.cache_hit and calls == [ids["c00"]] and third.best.id == ids["c00"]
    log = ax.results(tmp_path).filter(pl.col("cache_key") == first.cache_key).collect()
    assert log.height == 4 and log.filter(pl.col("superseded"))["id"].to_list() == [ids["c00"]]
    assert log.filter(pl.col("superseded"))["status"].to_list() == [transient[0]]
    rows = manifest.read_rows(first.bundle / f"rows-{first.cache_key}.jsonl")
    assert sorted(r["id"] for r in rows) == sorted(ids.values())  # the resume file: the final rows, once each


def test_an_interrupted_run_resumes_and_appends_each_row_once(tmp_path, planted):
    calls, plan = planted
    plan["c01"] = "interrupt"
    with pytest.raises(KeyboardInterrupt):
        silu_run(tmp_path)
    assert ax.results(tmp_path).collect().is_empty()  # nothing reached the table, the resume file has two rows
    measured = list(calls)
    assert measured[0] == "torch_eager" and len(measured) == 2
    result = silu_run(tmp_path)
    c01 = ids_of(result)["c01"]
    assert calls == [*measured, c01] and set(result.measured) == {*measured, c01}
    log = ax.results(tmp_path).collect()
    assert sorted(log["id"]) == sorted(result.table["id"]) and not log["superseded"].any()
    assert silu_run(tmp_path).cache_hit


def test_budget_skips_are_measured_by_the_next_run(tmp_path, planted):
    calls, _ = planted
    with pytest.raises(pipeline.PipelineError, match="no candidate and no baseline ran correctly"):
        silu_run(tmp_path, budget_s=1e-3)  # spent before phase 2: every kernel is skipped
    skipped = ax.results(tmp_path).collect()
    assert set(skipped["status"]) == {"skipped"} and set(skipped["stage"]) == {"budget"} and calls == []
    result = silu_run(tmp_path)
    assert sorted(calls) == sorted(result.table["id"]) and set(result.table["status"]) == {"ok"}
    assert set(result.table["verdict"]) == {"selected", "correct"}


def test_force_measures_again_and_the_newest_rows_replace_the_old(tmp_path, planted):
    calls, plan = planted
    plan["c01"] = ("wrong_result", "correctness", "output 0: 5 elements over tolerance")
    first = silu_run(tmp_path)
    ids = ids_of(first)
    assert silu_run(tmp_path).cache_hit  # a wrong result is final: cached
    stamps = set(ax.results(tmp_path).collect()["timestamp"])
    for n in (2, 3):
        del calls[:]
        again = silu_run(tmp_path, force=True)
        assert not again.cache_hit and again.phase2_s > 0 and sorted(calls) == sorted(ids.values())
        assert set(again.measured) == set(ids.values()) and again.reused == ()
        assert again.table.height == first.table.height and again.table["id"].n_unique() == again.table.height
        assert set(again.table["status"]) == {"ok"}  # force cleared the cached failure
        log = ax.results(tmp_path).collect()
        assert log.height == 3 * n and log["timestamp"].n_unique() == 3 * n  # observations, not copies
        current = log.filter(~pl.col("superseded"))
        assert current.height == 3 and not (set(current["timestamp"]) & stamps)
        stamps |= set(current["timestamp"])
        assert len(manifest.read_rows(first.bundle / f"rows-{first.cache_key}.jsonl")) == 3  # started over
        cands = ax.results(tmp_path, "candidates").collect()
        assert cands.filter(~pl.col("superseded")).height == 3 and cands.height == 3 * n
    hit = silu_run(tmp_path)
    assert hit.cache_hit and hit.table.height == 3 and set(hit.table["status"]) == {"ok"}


# ------------------------------------------------------------------------------------------------ damage
def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "zero":
        path.write_bytes(bytes(len(data)))
    elif how == "garble":
        mid = len(data) // 2
        path.write_bytes(data[:mid] + bytes(b ^ 0x5A for b in data[mid:mid + 16]) + data[mid + 16:])
    else:
        raise ValueError(how)


def row(cid: str, key: str = "k1", **kw) -> dict:
    return {"id": cid, "status": "ok", "cache_key": key, "program": "softmax", "timestamp": "2026-01-01T00:00:00", **kw}


@pytest.mark.parametrize("how", ["truncate", "empty", "zero", "garble"])
def test_a_damaged_part_is_moved_aside_with_one_warning_naming_it(tmp_path, how):
    tables.append("measurements", [row("a")], tmp_path)
    bad = tables.append("measurements", [row("b")], tmp_path)
    damage(bad, how)
    with pytest.warns(part_store.DamagedPartWarning) as got:
        df = ax.results(tmp_path).collect()
    assert df["id"].to_list() == ["a"]
    assert len(got) == 1 and str(bad) in str(got[0].message) and "moved to" in str(got[0].message)
    moved = bad.parent / "damaged" / bad.name
    assert moved.exists() and not bad.exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # moved aside: later reads are silent
        tables.append("measurements", [row("c")], tmp_path)
        assert sorted(tables.read("measurements", tmp_path).collect()["id"]) == ["a", "c"]


@pytest.mark.parametrize("frame,why", [
    (pl.DataFrame({"id": ["x"], "status": ["ok"], "median_us": ["fast"]}), "column 'median_us' is String"),
    (pl.DataFrame({"id": ["x"], "median_us": [1.0]}), "no column 'status'"),
    (pl.DataFrame({"id": [["x"]], "status": ["ok"]}), "column 'id' is List"),
])
def test_a_part_of_an_incompatible_schema_is_moved_aside(tmp_path, frame, why):
    tables.append("measurements", [row("a")], tmp_path)
    d = tmp_path / "tables" / "measurements"
    frame.write_parquet(d / "part-foreign.parquet")  # a legacy name: no checksum, the schema check decides
    with pytest.warns(part_store.DamagedPartWarning, match=re.escape(why)):
        assert ax.results(tmp_path).collect()["id"].to_list() == ["a"]
    assert (d / "damaged" / "part-foreign.parquet").exists()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_garbled_part_never_breaks_reading(data):
    """Random byte changes in a checksummed part are always caught; in a legacy part (no checksum) reading never
    raises: the part is either decoded or moved aside."""
    with tempfile.TemporaryDirectory() as d:
        tables.append("measurements", [row("keep")], d)
        part = tables.append("measurements", [row(f"r{i}", median_us=float(i)) for i in range(20)], d)
        legacy = data.draw(st.booleans())
        if legacy:
            part = part.rename(part.with_name("part-legacy.parquet"))
        raw = bytearray(part.read_bytes())
        start = data.draw(st.integers(0, len(raw) - 1))
        chunk = data.draw(st.binary(min_size=1, max_size=64))
        if raw[start:start + len(chunk)] == chunk:
            chunk = bytes(b ^ 0xFF for b in chunk)
        raw[start:start + len(chunk)] = chunk
        part.write_bytes(bytes(raw))
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            ids = tables.results(d).collect()["id"].to_list()
        assert "keep" in ids
        if not legacy:
            assert sorted(ids) == ["keep"] and len(got) == 1 and str(part) in str(got[0].message)


@pytest.mark.parametrize("how,table", [("truncate", "measurements"), ("zero", "candidates"), ("garble", "measurements")])
def test_a_run_survives_a_damaged_part_and_recovers_its_rows(tmp_path, planted, how, table):
    calls, _ = planted
    first = silu_run(tmp_path)
    part = max((tmp_path / "tables" / table).glob("part-*.parquet"), key=lambda p: p.stat().st_mtime_ns)
    damage(part, how)
    del calls[:]
    with pytest.warns(part_store.DamagedPartWarning, match=re.escape(str(part))):
        again = silu_run(tmp_path)
    # the measurements come back from the bundle's resume file, the candidates from phase 1: nothing is measured
    assert calls == [] and again.best.id == first.best.id and not again.cache_hit
    assert sorted(again.table["id"]) == sorted(first.table["id"]) and set(again.table["status"]) == {"ok"}
    assert silu_run(tmp_path).cache_hit
    forced = silu_run(tmp_path, force=True)
    assert forced.phase2_s > 0 and forced.table.height == first.table.height
    assert ax.results(tmp_path).collect().filter(~pl.col("superseded")).height == first.table.height


def test_a_read_only_cache_serves_hits_and_a_miss_names_the_directory(tmp_path, monkeypatch):
    first = silu_run(tmp_path)
    part = next((tmp_path / "tables" / "measurements").glob("part-*.parquet"))
    extra = tables.append("candidates", [{"cache_key": "other", "id": "x"}], tmp_path)
    damage(extra, "truncate")

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / "tables"))

    for target, name in [(os, "replace"), (os, "mkdir"), (tempfile, "mkstemp"), (pl.DataFrame, "write_parquet")]:
        monkeypatch.setattr(target, name, denied)
    with pytest.warns(part_store.DamagedPartWarning, match="left in place") as got:
        hit = silu_run(tmp_path)
        silu_run(tmp_path)
    assert hit.cache_hit and hit.best.id == first.best.id and part.exists()
    assert len([w for w in got if str(extra) in str(w.message)]) == 1  # once per process, not once per read
    with pytest.raises(part_store.CacheError, match=f"the cache directory {re.escape(str(tmp_path))} is not writable"):
        silu_run(tmp_path, force=True)
    with pytest.raises(part_store.CacheError, match="not writable: Permission denied"):
        tables.append("measurements", [row("a")], tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_really_read_only_directory(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(part_store.CacheError, match=re.escape(str(ro))):
            tables.append("measurements", [row("a")], ro)
        with pytest.raises(part_store.CacheError, match=re.escape(str(ro))):
            part_store.ensure_writable(ro)
    finally:
        ro.chmod(0o755)


# ------------------------------------------------------------------------------------------------ cache ls / rm
def plant_run(cache: Path, key: str, program: str, statuses: tuple[str, ...] = ("ok", "ok", "ok"),
              bundle: str | None = None, stamp: str = "2026-01-02T03:04:05+00:00") -> Path:
    """A run's rows and bundle without running anything: torch_eager, c0, c1 with ``statuses``."""
    bdir = cache / "bundles" / (bundle or f"b{key}")
    bdir.mkdir(parents=True, exist_ok=True)
    (bdir / "manifest.json").write_text(json.dumps({"candidates": []}))
    ids = ("torch_eager", "c0", "c1")
    for i in ids:
        (bdir / f"{i}.py").write_text("# kernel\n")
    (bdir / f"rows-{key}.jsonl").write_text("")
    tables.append("candidates", [{"cache_key": key, "id": i, "program": program, "hw": "H200", "target": "triton",
                                  "k": 2, "kind": "baseline" if n == 0 else "candidate", "rank": n or None,
                                  "predicted_us": float(n), "source": str(bdir / f"{i}.py"), "timestamp": stamp}
                                 for n, i in enumerate(ids)], cache)
    tables.append("measurements", [{"cache_key": key, "id": i, "status": s, "program": program, "hw": "H200",
                                    "timestamp": stamp, "error": None if s == "ok" else "boom"}
                                   for i, s in zip(ids, statuses)], cache)
    return bdir


def test_cache_ls_and_rm_through_the_cli(tmp_path, capsys, planted):
    calls, _ = planted
    silu = silu_run(tmp_path)
    plant_run(tmp_path, "aaaa1111bbbb2222cccc3333", "softmax", ("ok", "crashed", "wrong_result"))
    plant_run(tmp_path, "aaaa9999bbbb2222cccc3333", "softmax")
    capsys.readouterr()
    assert main(["cache", "ls", "--cache", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "3 cached runs in" in out and str(tmp_path) in out and silu.cache_key in out
    line = next(ln for ln in out.splitlines() if "aaaa1111" in ln)
    assert "softmax" in line and "H200" in line and "triton" in line and "2026-01-02 03:04" in line
    assert "ok 1, wrong_result 1, crashed 1" in line and "1 to retry" in line and "torch_eager" in line
    silu_line = next(ln for ln in out.splitlines() if silu.cache_key in ln)
    assert "ok 3" in silu_line and "yes" in silu_line and silu.best.id in silu_line and " kB" in silu_line
    assert "total on disk:" in out
    assert main(["cache", "ls", "--program", "silu", "--cache", str(tmp_path)]) == 0
    assert "1 cached run in" in capsys.readouterr().out

    assert main(["cache", "rm", "--cache", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == ("axon-eg: error: cache rm: name the runs to remove: KEY [KEY ...], "
                                               "--program NAME or --all")
    assert main(["cache", "rm", "aaaa", "--cache", str(tmp_path)]) == 2
    assert "is ambiguous" in capsys.readouterr().err
    assert main(["cache", "rm", "aa", "--cache", str(tmp_path)]) == 2
    assert "too short" in capsys.readouterr().err
    assert main(["cache", "rm", "ffff0000", "--cache", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err == f"axon-eg: no cached run matches ffff0000 in {tmp_path}; nothing removed\n"
    assert main(["cache", "rm", "--program", "nope", "--cache", str(tmp_path)]) == 1
    capsys.readouterr()

    assert main(["cache", "rm", "--program", "softmax", "-n", "--cache", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("would remove 2 runs (softmax aaaa") and out.count("\n") == 1
    assert ax.results(tmp_path).collect().height == 9  # a dry run removes nothing

    assert main(["cache", "rm", "aaaa1111", "--cache", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("removed 1 run (softmax aaaa1111): 3 measurement rows, 3 candidate rows, 1 bundle, ")
    assert out.count("\n") == 1 and not (tmp_path / "bundles" / "baaaa1111bbbb2222cccc3333").exists()
    assert set(ax.results(tmp_path).collect()["cache_key"]) == {silu.cache_key, "aaaa9999bbbb2222cccc3333"}

    assert main(["cache", "rm", silu.cache_key[:8], "--cache", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith(f"removed 1 run (silu {silu.cache_key[:8]}): 3 measurement rows")
    assert not silu.bundle.exists()
    del calls[:]
    again = silu_run(tmp_path)  # removed: measured again
    assert not again.cache_hit and sorted(calls) == sorted(again.table["id"])

    assert main(["cache", "rm", "--all", "--cache", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("removed 2 runs (")
    assert ax.results(tmp_path).collect().is_empty() and list((tmp_path / "bundles").iterdir()) == []
    assert main(["cache", "rm", "--all", "--cache", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"nothing to remove in {tmp_path}\n"
    assert main(["cache", "ls", "--cache", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"no cached runs in {tmp_path}\n"


def test_cache_dir_from_the_environment(tmp_path, monkeypatch, capsys):
    plant_run(tmp_path, "cafe0000cafe0000cafe0000", "gelu")
    monkeypatch.setenv("AXON_EG_CACHE", str(tmp_path))
    assert main(["cache", "ls"]) == 0 and "cafe0000cafe0000cafe0000" in capsys.readouterr().out
    assert main(["cache", "rm", "cafe"]) == 0 and "removed 1 run (gelu cafe0000)" in capsys.readouterr().out


def test_rm_keeps_a_bundle_another_run_uses_and_rewrites_shared_parts(tmp_path):
    plant_run(tmp_path, "k1", "softmax", bundle="shared")
    plant_run(tmp_path, "k2", "softmax", bundle="shared")
    tables.append("measurements", [row("c0", "k1"), row("c0", "k2"), row("z", "k3", program="relu")], tmp_path)  # mixed
    shared = tmp_path / "bundles" / "shared"
    removal = tables.remove({"k1"}, tmp_path, delete=[shared / "rows-k1.jsonl"])
    assert removal.rows == {"measurements": 4, "candidates": 3} and removal.parts_rewritten == 1
    assert shared.is_dir() and not (shared / "rows-k1.jsonl").exists() and (shared / "rows-k2.jsonl").exists()
    left = tables.results(tmp_path).collect()
    assert sorted(left.select("cache_key", "id").rows()) == [("k2", "c0"), ("k2", "c0"), ("k2", "c1"),
                                                             ("k2", "torch_eager"), ("k3", "z")]
    assert main(["cache", "rm", "--program", "softmax", "--cache", str(tmp_path)]) == 0
    assert not shared.exists() and tables.results(tmp_path).collect()["cache_key"].to_list() == ["k3"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.sampled_from(["k1", "k2", "k3"]), min_size=1, max_size=6), min_size=1, max_size=5),
       st.sets(st.sampled_from(["k1", "k2", "k3"])))
def test_remove_leaves_exactly_the_other_rows(parts, gone):
    with tempfile.TemporaryDirectory() as d:
        for n, keys in enumerate(parts):
            tables.append("measurements", [row(f"r{n}_{i}", k) for i, k in enumerate(keys)], d)
        before = tables.read("measurements", d).collect().select("cache_key", "id").rows()
        removal = tables.remove(gone, d)
        after = tables.read("measurements", d).collect().select("cache_key", "id").rows()
        assert sorted(after) == sorted(r for r in before if r[0] not in gone)
        assert removal.rows["measurements"] == len(before) - len(after)
        assert not list((Path(d) / "tables").glob(".*"))  # no journal, no staged part left behind


def test_an_interrupted_removal_is_completed_by_the_next_reader(tmp_path, monkeypatch):
    bdir = plant_run(tmp_path, "k1", "softmax")
    plant_run(tmp_path, "k2", "softmax")
    tables.append("measurements", [row("c9", "k1"), row("c9", "k2"), row("z", "k3")], tmp_path)
    real = tables._apply

    def killed(root, journal):
        raise KeyboardInterrupt  # after the commit point, before anything was applied

    monkeypatch.setattr(tables, "_apply", killed)
    with pytest.raises(KeyboardInterrupt):
        tables.remove({"k1"}, tmp_path, delete=[bdir])
    assert len(list((tmp_path / "tables").glob(".rm-*.json"))) == 1
    monkeypatch.setattr(tables, "_apply", real)
    left = tables.results(tmp_path).collect()  # any reader completes the removal first
    assert sorted(left.select("cache_key", "id").rows()) == [("k2", "c0"), ("k2", "c1"), ("k2", "c9"),
                                                             ("k2", "torch_eager"), ("k3", "z")]
    assert not bdir.exists() and not list((tmp_path / "tables").glob(".rm-*.json"))

    def failing_stage(d, df):
        raise OSError(28, "No space left on device", str(d))

    monkeypatch.setattr(tables, "stage_part", failing_stage)  # before the commit point: nothing changes
    with pytest.raises(part_store.CacheError, match="No space left on device"):
        tables.remove({"k2"}, tmp_path)
    assert tables.results(tmp_path).collect().height == left.height


def test_the_cli_prints_a_damage_warning_once_on_one_line(tmp_path):
    plant_run(tmp_path, "beef0000beef0000beef0000", "gelu")
    bad = tables.append("measurements", [row("c5", "beef0000beef0000beef0000")], tmp_path)
    damage(bad, "zero")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    cmd = [sys.executable, "-m", "axon_eg.cli", "cache", "ls", "--cache", str(tmp_path)]
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert first.returncode == 0 and "beef0000beef0000beef0000" in first.stdout
    lines = [ln for ln in first.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"axon_eg: warning: damaged Parquet part {bad} ")
    assert "1 damaged part kept in" in first.stdout
    second = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert second.returncode == 0 and second.stderr == ""
