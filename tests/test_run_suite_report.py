"""The honest-baselines report of ``benchmarks/run_suite.py`` (issue 17), on synthetic rows and no GPU: both
timings of each baseline, the best candidate beside the selection, the geomeans of both, and the 5%
reproduction gate in front of ``--write``."""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from benchmarks import run_suite  # noqa: E402

PROBE = {"gpu": "NVIDIA H200", "torch": "2.11.0", "triton": "3.6.0", "python": "3.12.3",
         "copy_bytes_per_s": 4.15e12, "matmul_flops_per_s": 7.94e14, "date": "2026-12-02"}


def worker_rows(times: dict[str, float | None], program: str) -> list[dict]:
    """Rows as the measurement worker writes them (one JSON object per kernel)."""
    return [{"id": i, "status": "ok" if t else "wrong_result", "median_us": t, "program": program,
             "kind": "baseline" if i in run_suite.BASELINE_IDS else "candidate",
             "timestamp": "2026-12-02T10:00:00+00:00"} for i, t in times.items()]


def table(times: dict[str, float | None]) -> list[dict]:
    """``Result.table`` as dicts: the worker's rows plus the selection's verdict (fastest ok kernel)."""
    rows = worker_rows(times, "p")
    best = min((r for r in rows if r["status"] == "ok"), key=lambda r: r["median_us"])["id"]
    return [{**r, "verdict": "selected" if r["id"] == best else "slower"} for r in rows]


def row(name: str, times: dict[str, float | None], second: dict[str, float] | None = None, bound: str = "memory",
        floor_us: float = 50.0) -> dict:
    return run_suite.program_row(name, "single", table(times), floor_us, bound,
                                 {"phase1_s": 1.0, "phase2_wall_s": 2.0, "compile": "alone"}, second)


def test_read_medians_takes_ok_rows_of_the_worker_format(tmp_path):
    path = tmp_path / "p.baselines2.jsonl"
    lines = [json.dumps(r) for r in worker_rows({"torch_eager": 101.0, "torch_compile": None}, "p")]
    path.write_text("\n".join(lines) + "\n{truncated")
    assert run_suite.read_medians(path) == {"torch_eager": 101.0}
    assert run_suite.read_medians(tmp_path / "missing.jsonl") == {}


def test_both_baseline_timings_and_their_drift():
    r = row("softmax", {"torch_eager": 100.0, "torch_compile": 80.0, "c00": 70.0},
            {"torch_eager": 104.0, "torch_compile": 88.0})
    assert (r["eager_us"], r["eager2_us"], r["compile_us"], r["compile2_us"]) == (100.0, 104.0, 80.0, 88.0)
    assert r["baseline_drift"] == "compile +10.0%"  # eager's 4% is within 5%
    steady = row("softmax", {"torch_eager": 100.0, "torch_compile": 80.0, "c00": 70.0},
                 {"torch_eager": 96.0, "torch_compile": 81.0})
    assert steady["baseline_drift"] is None


def test_best_candidate_and_selection_both_appear():
    # torch.compile wins: the selection is the baseline, the best candidate is still reported alone
    r = row("matmul", {"torch_eager": 120.0, "torch_compile": 90.0, "c00": 100.0, "c01": 95.0, "c02": None},
            bound="matmul")
    assert r["selected"] == "torch_compile" and r["axon_eg_us"] == 90.0 and r["vs_compile"] == pytest.approx(1.0)
    assert r["best_candidate"] == "c01" and r["candidate_us"] == 95.0
    assert r["cand_vs_compile"] == pytest.approx(90 / 95) and r["cand_vs_eager"] == pytest.approx(120 / 95)
    assert r["ok"] == 2 and r["candidates"] == 3
    text = run_suite.render([r], PROBE, 8, "2026-12-02")
    head = next(line for line in text.splitlines() if line.startswith("| program"))
    cols = [c.strip() for c in head.strip("|").split("|")]
    for c in ("eager_us", "eager2_us", "compile_us", "compile2_us", "baseline_drift", "selected", "axon_eg_us",
              "best_candidate", "candidate_us", "cand_vs_eager", "cand_vs_compile"):
        assert c in cols
    line = next(line for line in text.splitlines() if line.startswith("| matmul"))
    cells = dict(zip(cols, (c.strip() for c in line.strip("|").split("|"))))
    assert cells["selected"] == "torch_compile" and cells["best_candidate"] == "c01" and cells["candidate_us"] == "95"


def test_summary_gives_geomeans_of_selection_and_candidate_over_all_and_matmul_bound():
    rows = [row("softmax", {"torch_eager": 100.0, "torch_compile": 80.0, "c00": 40.0}),
            row("matmul", {"torch_eager": 100.0, "torch_compile": 90.0, "c00": 100.0}, bound="matmul"),
            row("gated_mlp", {"torch_eager": 100.0, "torch_compile": 100.0, "c00": 50.0}, bound="matmul")]
    text = "\n".join(run_suite.summary_lines(rows))
    # selection: softmax 2.5x / 2x, matmul 1.11x / 1x (compile selected), gated_mlp 2x / 2x
    assert f"selection: {(2.5 * 100 / 90 * 2) ** (1 / 3):.2f}x over eager" in text
    # best candidate alone over torch.compile: 2x, 0.9x, 2x
    assert f"{(2 * 0.9 * 2) ** (1 / 3):.2f}x over torch.compile; below 0.97x of torch.compile: matmul (0.90x)" in text
    assert (f"matmul-bound programs (2): selection {(100 / 90 * 2) ** 0.5:.2f}x over eager, {2 ** 0.5:.2f}x over "
            f"torch.compile; best candidate alone {(1 * 2) ** 0.5:.2f}x over eager, {(0.9 * 2) ** 0.5:.2f}x") in text


def _rows(eager=100.0, comp=80.0, cand=70.0, name="softmax"):
    return [row(name, {"torch_eager": eager, "torch_compile": comp, "c00": cand},
                {"torch_eager": eager, "torch_compile": comp})]


def test_reproduction_gate_is_five_percent():
    base = _rows()
    assert run_suite.compare_runs(base, _rows(comp=80.0 * 1.04, cand=70.0 * 0.96)) == {"softmax": []}
    bad = run_suite.compare_runs(base, _rows(comp=80.0 * 1.06))
    assert len(bad["softmax"]) == 1 and "compile_us" in bad["softmax"][0] and "+6.0%" in bad["softmax"][0]
    # the selection changes: torch.compile (66 us) beats the candidate in the second run
    moved = run_suite.compare_runs(base, _rows(comp=66.0))["softmax"]
    assert any(d.startswith("selected c00 / torch_compile") for d in moved)
    assert run_suite.compare_runs(base, []) == {"softmax": ["not in the second run"]}
    assert run_suite.write_refusal(True, {"softmax": []}, False) is None
    assert "softmax" in run_suite.write_refusal(True, bad, False)
    assert run_suite.write_refusal(False, None, False) is not None
    assert run_suite.write_refusal(True, bad, True) is None and run_suite.write_refusal(False, None, True) is None


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """Two fake run directories (index.json, probe.json, rows in the worker's format) and a report whose
    rows come from the rows files (``collect_rows`` without the saturation: it reads the same files)."""

    def make(name: str, times: dict[str, float], second: dict[str, float]):
        out = tmp_path / name
        (out / "rows").mkdir(parents=True)
        (out / "index.json").write_text(json.dumps({"softmax": {"bundle": "cache/bundles/x", "phase1_s": 1.0,
                                                                "k": 8, "hw": "h200"}}))
        (out / "probe.json").write_text(json.dumps(PROBE))
        (out / "rows" / "softmax.jsonl").write_text("\n".join(json.dumps(r) for r in worker_rows(times, "softmax")))
        (out / "rows" / "softmax.baselines2.jsonl").write_text(
            "\n".join(json.dumps(r) for r in worker_rows(second, "softmax")))
        return out

    def collect(out, programs, history=None):
        got = []
        for path in sorted((out / "rows").glob("*.jsonl")):
            name = path.name.split(".")[0]
            if path.name.endswith(".baselines2.jsonl") or (programs and name not in programs.split(",")):
                continue
            times = {r["id"]: r["median_us"] for r in map(json.loads, path.read_text().splitlines())}
            got.append(run_suite.program_row(name, "single", table(times), 50.0, "memory", {"phase1_s": 1.0},
                                             run_suite.read_medians(out / "rows" / f"{name}.baselines2.jsonl")))
        return got

    monkeypatch.setattr(run_suite, "collect_rows", collect)
    return make


def _report(*argv) -> int:
    return run_suite.main(["report", *map(str, argv)])


def test_write_refused_without_reproduction_leaves_the_file_untouched(runs, tmp_path, capsys):
    a = runs("a", {"torch_eager": 100.0, "torch_compile": 80.0, "c00": 70.0}, {"torch_eager": 101.0,
                                                                               "torch_compile": 81.0})
    b = runs("b", {"torch_eager": 100.0, "torch_compile": 80.0, "c00": 70.0 * 1.06},
             {"torch_eager": 100.0, "torch_compile": 80.0})
    bench = tmp_path / "BENCHMARKS.md"
    bench.write_text("# the published table\n")
    before = bench.stat().st_mtime_ns
    assert _report(a, "--write", bench) == 1  # no --against
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "refusing --write" in err[0] and "--against" in err[0]
    assert _report(a, "--against", b, "--write", bench) == 1  # the candidate is 6% slower in b
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "1 of 1 rows did not reproduce" in err[0] and "softmax" in err[0]
    assert bench.read_text() == "# the published table\n" and bench.stat().st_mtime_ns == before
    assert "candidate_us 70 / 74.2 us (+6.0%)" in (a / "suite.md").read_text()  # the run's own report is written


def test_write_with_reproduced_rows_or_unreproduced_ok(runs, tmp_path, capsys):
    a = runs("a", {"torch_eager": 100.0, "torch_compile": 80.0, "c00": 70.0}, {"torch_eager": 101.0,
                                                                               "torch_compile": 81.0})
    b = runs("b", {"torch_eager": 104.0, "torch_compile": 80.0 * 0.96, "c00": 70.0 * 1.04},
             {"torch_eager": 100.0, "torch_compile": 80.0})
    c = runs("c", {"torch_eager": 100.0, "torch_compile": 80.0 * 1.06, "c00": 70.0},
             {"torch_eager": 100.0, "torch_compile": 80.0})
    bench = tmp_path / "BENCHMARKS.md"
    assert _report(a, "--against", b, "--write", bench) == 0  # everything within 4%
    text = bench.read_text()
    assert "1 of 1 rows within 5%" in text and "| yes |" in text
    assert "| eager_us | eager2_us | compile_us | compile2_us |" in text
    assert _report(a, "--against", c, "--write", bench, "--unreproduced-ok") == 0
    text = bench.read_text()
    assert "0 of 1 rows within 5%" in text and "  - softmax: compile_us 80 / 84.8 us (+6.0%)" in text
    assert _report(a, "--write", bench, "--unreproduced-ok") == 0
    assert "reproduction: not checked against a second run" in bench.read_text()
    capsys.readouterr()


def test_write_into_the_history_folder_adds_a_run_file_and_never_overwrites_one(runs, tmp_path, capsys):
    a = runs("a", {"torch_eager": 100.0, "torch_compile": 80.0, "c00": 70.0}, {"torch_eager": 101.0,
                                                                               "torch_compile": 81.0})
    b = runs("b", {"torch_eager": 100.0, "torch_compile": 80.0, "c00": 70.0}, {"torch_eager": 100.0,
                                                                               "torch_compile": 80.0})
    history = tmp_path / "results" / "runs"
    assert _report(a, "--against", b, "--write", f"{history}/") == 0  # the folder is made
    first = history / "2026-12-02-suite.md"  # the date of the newest row
    assert first.read_text().startswith("# axon_eg suite benchmark (2026-12-02)")
    first.write_text("an earlier run of the same day\n")
    assert _report(a, "--against", b, "--write", history) == 0  # an existing folder, no trailing slash
    assert first.read_text() == "an earlier run of the same day\n"
    assert "1 of 1 rows within 5%" in (history / "2026-12-02-suite-2.md").read_text()
    assert sorted(p.name for p in history.iterdir()) == ["2026-12-02-suite-2.md", "2026-12-02-suite.md"]
    assert "wrote" in capsys.readouterr().err


def test_write_never_targets_the_benchmark_page(tmp_path):
    assert run_suite.write_target(str(run_suite.ROOT / "BENCHMARKS.md"), "2026-12-02") is None
    assert run_suite.write_target(str(tmp_path / "BENCHMARKS.md"), "2026-12-02") == tmp_path / "BENCHMARKS.md"
    assert run_suite.write_target(str(tmp_path), "2026-12-02") == tmp_path / "2026-12-02-suite.md"


def test_programs_filter_for_report_and_measure(runs, tmp_path, capsys):
    a = runs("a", {"torch_eager": 100.0, "torch_compile": 80.0, "c00": 70.0}, {})
    (a / "rows" / "gelu.jsonl").write_text(json.dumps(worker_rows({"c00": 5.0}, "gelu")[0]))
    assert _report(a, "--programs", "softmax") == 0
    md = (a / "suite.md").read_text()
    assert "| softmax |" in md and "| gelu |" not in md
    capsys.readouterr()
    # measure refuses a program without a bundle before touching the GPU
    assert run_suite.main(["measure", str(a), "--programs", "softmax,nope"]) == 2
    assert "no bundle" in capsys.readouterr().err


def test_no_path_outside_the_repository_in_the_report(runs, tmp_path):
    a = runs("a", {"torch_eager": 100.0, "torch_compile": 80.0, "c00": 70.0}, {})
    b = runs("b", {"torch_eager": 100.0, "torch_compile": 80.0, "c00": 70.0}, {})
    bench = tmp_path / "BENCHMARKS.md"
    assert _report(a, "--against", b, "--write", bench) == 0
    assert str(tmp_path) not in bench.read_text()


def test_the_reproduction_run_measures_the_fastest_correct_candidate_of_the_first(tmp_path):
    rows = tmp_path / "rows.jsonl"
    assert run_suite.fastest_candidate(rows) is None
    lines = [{"id": "torch_eager", "status": "ok", "median_us": 1.0},
             {"id": "c00", "status": "ok", "median_us": 30.0},
             {"id": "c01", "status": "wrong_result", "median_us": 5.0},
             {"id": "c02", "status": "ok", "median_us": 20.0},
             {"id": "c03", "status": "ok", "median_us": None}]
    rows.write_text("\n".join(json.dumps(r) for r in lines) + "\n{truncated")
    assert run_suite.fastest_candidate(rows) == "c02"
    rows.write_text(json.dumps(lines[0]) + "\n" + json.dumps(lines[2]) + "\n")
    assert run_suite.fastest_candidate(rows) is None


BAD_PROBLEM = '''"""median, which axon_eg does not take yet."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.median(a, dim=1)[0] @ b


M = 8
SMALL_SIZES = {"M": 3}


def get_inputs():
    return [torch.randn(M, M), torch.randn(M, M)]


def get_init_inputs():
    return []
'''


def test_bundle_skips_a_problem_it_cannot_take_with_one_line_and_goes_on(tmp_path, capsys):
    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "x01_Median.py").write_text(BAD_PROBLEM)
    (problems / "x02_Relu.py").write_text(BAD_PROBLEM.replace("torch.median(a, dim=1)[0] @ b", "torch.relu(a + b)")
                                          .replace("median, which axon_eg does not take yet.", "relu of a sum."))
    out = tmp_path / "runs"
    assert run_suite.main(["bundle", str(out), "-k", "1", "--saturation-s", "0.2", "--programs", str(problems)]) == 1
    err = capsys.readouterr().err
    line = next(ln for ln in err.splitlines() if ln.startswith("x01_Median"))
    assert "skipped: UnsupportedOperation: aten.median" in line and "Traceback" not in err
    index = json.loads((out / "index.json").read_text())
    assert "skipped" in index["x01_Median"] and "bundle" in index["x02_Relu"]


def test_quick_measure_times_only_the_baselines_asked_for_and_once(tmp_path, monkeypatch):
    """``--no-max-autotune --once`` (kernelbench ``--quick``): the candidates, eager and default-mode compile,
    each baseline timed once; without them every baseline of the bundle is timed twice."""
    from axon_eg.measure import manifest, worker

    out = tmp_path / "run"
    (out / "b").mkdir(parents=True)
    (out / "index.json").write_text(json.dumps({"p": {"bundle": "b"}}))
    (out / "probe.json").write_text(json.dumps(PROBE))
    ids = ["c00", "c01", "torch_eager", "torch_compile", run_suite.COMPILE_DEFAULT]
    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(manifest, "load_manifest", lambda bundle: [{"id": i} for i in ids])
    monkeypatch.setattr(worker, "run_bundle", lambda bundle, path, gpus=None, ids=None:
                        calls.append((path.name, list(ids))) or [])
    assert run_suite.main(["measure", str(out), "--compile-default", "--no-max-autotune", "--once"]) == 0
    assert calls == [("p.jsonl", ["c00", "c01"]), ("p.jsonl", ["torch_eager", run_suite.COMPILE_DEFAULT])]
    calls.clear()
    assert run_suite.main(["measure", str(out)]) == 0
    assert calls == [("p.jsonl", ["c00", "c01"]), ("p.jsonl", ["torch_eager", "torch_compile"]),
                     ("p.baselines2.jsonl", ["torch_eager", "torch_compile"])]


def test_prewarm_runs_the_baselines_measured_and_the_candidates_once_each(tmp_path, monkeypatch, capsys):
    """``--prewarm J --prewarm-candidates`` (kernelbench ``--prewarm``) runs each kernel the measurement will
    compile once beforehand, in a throw-away Inductor cache that is removed afterwards: the default-mode
    compile when it is measured, max-autotune only when it is, every candidate; never eager."""
    import subprocess

    from axon_eg.measure import manifest, worker

    out = tmp_path / "run"
    (out / "b").mkdir(parents=True)
    ids = ["c00", "c01", "torch_eager", "torch_compile", run_suite.COMPILE_DEFAULT]
    (out / "b" / "manifest.json").write_text(json.dumps({"candidates": [{"id": i} for i in ids]}))
    (out / "index.json").write_text(json.dumps({"p": {"bundle": "b"}}))
    (out / "probe.json").write_text(json.dumps(PROBE))
    started: list[tuple[str, str]] = []
    real = subprocess.Popen

    class Done:
        returncode, stderr = 0, None

        def poll(self):
            return 0

    def popen(argv, *args, **kwargs):
        if argv[:2] != [sys.executable, "-c"] or argv[2] != run_suite._PREWARM:
            return real(argv, *args, **kwargs)
        started.append((argv[-1], kwargs["env"]["TORCHINDUCTOR_CACHE_DIR"]))
        return Done()

    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setattr(manifest, "load_manifest", lambda bundle: [{"id": i} for i in ids])
    monkeypatch.setattr(worker, "run_bundle", lambda bundle, path, gpus=None, ids=None: [])
    argv = ["measure", str(out), "--compile-default", "--no-max-autotune", "--once", "--prewarm", "2"]
    assert run_suite.main([*argv, "--prewarm-candidates"]) == 0
    assert sorted(cid for cid, _ in started) == sorted(["c00", "c01", run_suite.COMPILE_DEFAULT])
    assert len({d for _, d in started}) == 1 and not os.path.exists(started[0][1])
    assert "prewarm: 3 kernels of 1 programs" in capsys.readouterr().out
    started.clear()
    assert run_suite.main(argv[:2] + ["--prewarm", "2"]) == 0  # the full run: max-autotune only, no candidates
    assert [cid for cid, _ in started] == ["torch_compile"]
