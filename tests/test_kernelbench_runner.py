"""benchmarks/kernelbench.py: fast_p per folder (problems axon_eg could not take count as not correct), the
geomeans over the measured ones, the worst problems with why, and a resumable bundle step."""

from __future__ import annotations

import json

import pytest
from benchmarks import kernelbench, run_suite


def test_fast_p_counts_over_every_problem_of_the_folder():
    rows = [{"vs": 0.5}, {"vs": 1.5}, {"vs": 2.5}, {"vs": None}]
    assert kernelbench.fast_p(rows, 5, "vs", 0.0) == pytest.approx(3 / 5)
    assert kernelbench.fast_p(rows, 5, "vs", 1.0) == pytest.approx(2 / 5)
    assert kernelbench.fast_p(rows, 5, "vs", 2.0) == pytest.approx(1 / 5)
    assert kernelbench.fast_p([], 0, "vs", 1.0) == 0.0
    assert kernelbench.geomean([1.0, 4.0, None]) == pytest.approx(2.0) and kernelbench.geomean([]) is None


def test_report_per_folder_with_skipped_problems_and_the_worst(tmp_path, monkeypatch):
    out = tmp_path / "run"
    (out / "rows").mkdir(parents=True)
    bundle = out / "cache" / "bundles" / "b1"
    bundle.mkdir(parents=True)
    (bundle / "candidates.json").write_text(json.dumps([{"id": "c00", "plan": "reduction", "isa": "[]",
                                                         "tilings": json.dumps([{"BLOCK_N": 1024, "SPLIT": 64}]),
                                                         "predicted_us": 10.0}]))
    index = {"r01": {"bundle": "cache/bundles/b1"}, "r02": {"bundle": "cache/bundles/b1"},
             "l01": {"skipped": "UnsupportedOperation: aten.kl_div.default at l01.py:8: no axon_eg equivalent"}}
    (out / "index.json").write_text(json.dumps(index))
    (out / "problems.json").write_text(json.dumps({n: {"folder": f, "path": str(tmp_path / f"{n}.py")}
                                                   for n, f in (("r01", "reductions"), ("r02", "reductions"),
                                                                ("l01", "losses"))}))
    for n in ("r01", "r02"):
        (out / "rows" / f"{n}.jsonl").write_text("{}\n")
        (tmp_path / f"{n}.py").write_text("")
    rows = [{"program": "r01", "best_candidate": "c00", "candidate_us": 20.0, "cand_vs_eager": 0.5, "cand_vs_compile": 0.4,
             "vs_eager": 1.0, "vs_compile": 1.0},
            {"program": "r02", "best_candidate": "c00", "candidate_us": 5.0, "cand_vs_eager": 3.0, "cand_vs_compile": 1.5,
             "vs_eager": 3.0, "vs_compile": 1.5}]
    monkeypatch.setattr(run_suite, "collect_rows", lambda out, programs: rows)
    lines, _, _ = kernelbench.score(out)
    by = {line["folder"]: line for line in lines}
    assert by["reductions"]["best candidate fast_1 vs eager"] == pytest.approx(0.5)
    assert by["reductions"]["best candidate fast_2 vs eager"] == pytest.approx(0.5)
    assert by["losses"]["best candidate fast_0 vs eager"] == 0.0 and by["losses"]["skipped"] == 1
    assert by["all"]["problems"] == 3 and by["all"]["selection fast_0 vs compile"] == pytest.approx(2 / 3)
    assert by["all"]["selection fast_0 vs compile_default"] == 0.0  # not measured in this run
    assert by["all"]["best candidate geomean vs eager"] == pytest.approx((0.5 * 3.0) ** 0.5)
    text = kernelbench.render(out, worst=1)
    worst = text.split("worst best candidates")[1]
    assert "| r01 | 0.50 | - | 0.40 | reduction [BLOCK_N=1024,SPLIT=64]" in worst and "r02" not in worst.split("not taken")[0]
    assert "predicted 10.0 us, measured 20.0 us" in text and "aten.kl_div" in text


def test_bundle_is_resumable(tmp_path, monkeypatch, capsys):
    problem = tmp_path / "set" / "x01_A.py"
    problem.parent.mkdir()
    problem.write_text("")
    out = tmp_path / "run"
    out.mkdir()
    (out / "index.json").write_text(json.dumps({"x01_A": {"bundle": "b"}}))
    calls = []
    monkeypatch.setattr(run_suite, "main", lambda argv: calls.append(argv) or 0)
    assert kernelbench.main(["bundle", str(out), str(problem.parent)]) == 0 and calls == []
    assert "all 1 problems" in capsys.readouterr().out
    assert json.loads((out / "problems.json").read_text())["x01_A"]["folder"] == "set"
    assert kernelbench.main(["bundle", str(out), str(problem.parent), "--force"]) == 0
    assert calls and calls[0][:2] == ["bundle", str(out)] and str(problem) in calls[0][-1]


def test_cost_model_scores_the_first_ranked_candidate_against_the_fastest(tmp_path):
    """The model's pick is the lowest prediction; a pick 20% slower than the fastest, or one that failed,
    is a miss; the kind is the first-ranked plan's heaviest group kind where the bundle is kept."""
    out = tmp_path / "run"
    (out / "rows").mkdir(parents=True)
    bundle = out / "cache" / "bundles" / "b1"
    bundle.mkdir(parents=True)
    (bundle / "candidates.json").write_text(json.dumps(
        [{"id": "c00", "kind": "candidate", "plan": "elementwise+matmul", "rank": 0},
         {"id": "c01", "kind": "candidate", "plan": "matmul", "rank": 1}]))

    def cand(i, pred, us, status="ok"):
        return json.dumps({"id": i, "kind": "candidate", "predicted_us": pred, "median_us": us, "status": status})
    (out / "rows" / "m01.jsonl").write_text("\n".join([cand("c00", 10.0, 12.0), cand("c01", 11.0, 10.0),
                                                       json.dumps({"id": "torch_eager", "kind": "baseline"})]))
    (out / "rows" / "r01.jsonl").write_text("\n".join([cand("c00", 5.0, 5.2), cand("c01", 9.0, 9.0),
                                                       cand("c02", 12.0, 11.0)]))
    (out / "rows" / "r02.jsonl").write_text("\n".join([cand("c00", 5.0, None, "wrong_result"), cand("c01", 6.0, 6.0)]))
    index = {"m01": {"bundle": "cache/bundles/b1"}, "r01": {}, "r02": {}, "x": {"skipped": "why"}}
    folders = {"r01": {"folder": "reductions"}, "r02": {"folder": "reductions"}}
    per = {p["program"]: p for p in kernelbench.cost_model(out, index, folders)}
    assert set(per) == {"m01", "r01", "r02"}
    assert per["m01"]["kind"] == "matmul" and not per["m01"]["within"]
    assert per["m01"]["first_vs_fastest"] == pytest.approx(1.2) and per["m01"]["spearman"] == pytest.approx(-1.0)
    assert per["r01"]["within"] and per["r01"]["spearman"] == pytest.approx(1.0) and per["r01"]["kind"] == "reductions"
    assert not per["r02"]["within"] and per["r02"]["first_vs_fastest"] is None
    table = "\n".join(kernelbench.cost_model_table(list(per.values())))
    assert "| all | 3 | 33% |" in table and "| r02 | reductions | c00 | failed |" in table


def test_scored_rows_are_kept_and_report_without_bundle_or_matching_code(tmp_path, monkeypatch):
    """A problem's scored row is kept with the digest of its rows and bundle: a later report (other code, the
    bundles gone) reads it back, reasons included; a problem whose rows changed is scored again, alone."""
    out = tmp_path / "run"
    (out / "rows").mkdir(parents=True)
    bundle = out / "cache" / "bundles" / "b1"
    bundle.mkdir(parents=True)
    (bundle / "candidates.json").write_text(json.dumps([{"id": "c00", "kind": "candidate", "plan": "reduction",
                                                         "isa": "[]", "tilings": json.dumps([{"BLOCK_N": 512}]),
                                                         "predicted_us": 7.0}]))
    (out / "index.json").write_text(json.dumps({n: {"bundle": "cache/bundles/b1"} for n in ("r01", "r02")}))
    (out / "problems.json").write_text(json.dumps({n: {"folder": "reductions", "path": str(tmp_path / f"{n}.py")}
                                                   for n in ("r01", "r02")}))
    for n in ("r01", "r02"):
        (out / "rows" / f"{n}.jsonl").write_text('{"id": "c00"}\n')
        (tmp_path / f"{n}.py").write_text("")
    asked: list[str] = []

    def collect(out_, programs):
        names = [p.rsplit("/", 1)[-1][:-3] for p in programs.split(",")]
        asked.extend(names)
        return [{"program": n, "best_candidate": "c00", "candidate_us": 9.0, "cand_vs_eager": 2.0, "vs_eager": 2.0}
                for n in names]

    monkeypatch.setattr(run_suite, "collect_rows", collect)
    kernelbench.score(out)
    assert sorted(asked) == ["r01", "r02"] and len(list((out / kernelbench.SCORED).glob("*.json"))) == 2
    asked.clear()
    import shutil

    shutil.rmtree(out / "cache")
    (out / "rows" / "r02.jsonl").write_text('{"id": "c00"}\n{"id": "c01"}\n')  # r02 measured again
    _, rows, _ = kernelbench.score(out)
    assert asked == ["r02"] and len(rows) == 2
    text = kernelbench.render(out, worst=2)
    assert "reduction [BLOCK_N=512] isa []: predicted 7.0 us, measured 9.0 us" in text  # r01's kept reason
    index = json.loads((out / "index.json").read_text())
    assert kernelbench._plans(out, index, "r01") == {"c00": {"kind": "reduction", "rank": 0}}  # the plan's, kept


def _bundle(root, name: str, sources: dict[str, str], predicted: dict[str, float]):
    b = root / "cache" / "bundles" / name
    b.mkdir(parents=True)
    (b / "reference.py").write_text("def reference_torch(*t):\n    return t\n")
    cands = []
    for cid, code in sources.items():
        (b / f"{cid}.py").write_text(code)
        cands.append({"id": cid, "source": f"{cid}.py", "entry": "kernel", "kind": "candidate" if cid[0] == "c" else
                      "baseline", "reference": "reference.py:reference_torch", "trials": 3})
    (b / "manifest.json").write_text(json.dumps({"limits": {"grid": 8}, "candidates": cands}))
    (b / "candidates.json").write_text(json.dumps([{"id": c, "predicted_us": p} for c, p in predicted.items()]))
    return f"cache/bundles/{name}"


def test_reuse_takes_rows_only_where_every_kernel_is_unchanged(tmp_path, capsys):
    """After a re-ranking (ids and header comments change, code stays) a problem takes the earlier rows, ids and
    predictions mapped to the new bundle; a problem with one changed kernel is left to measure, whole."""
    old, new = tmp_path / "old", tmp_path / "new"
    code = {"a": "# rank 0, predicted 5 us\ndef kernel(x):\n    return x\n", "b": "# rank 1\ndef kernel(x):\n    return -x\n"}
    old_index = {"p1": {"bundle": _bundle(old, "o1", {"c00_a": code["a"], "c01_b": code["b"], "torch_eager": "e"},
                                          {"c00_a": 5.0, "c01_b": 9.0}), "phase2_wall_s": 3.0},
                 "p2": {"bundle": _bundle(old, "o2", {"c00_a": code["a"], "torch_eager": "e"}, {"c00_a": 5.0})}}
    (old / "index.json").write_text(json.dumps(old_index))
    (old / "rows").mkdir()
    for n, ids in (("p1", ("c00_a", "c01_b", "torch_eager")), ("p2", ("c00_a", "torch_eager"))):
        (old / "rows" / f"{n}.jsonl").write_text("".join(
            json.dumps({"id": i, "kind": "baseline" if i.startswith("torch") else "candidate", "median_us": 1.0 + k,
                        "predicted_us": None if i.startswith("torch") else 5.0, "source": f"{i}.py"}) + "\n"
            for k, i in enumerate(ids)))
    ranked_again = {"c00_b": "# rank 0, predicted 4 us\n" + code["b"].split("\n", 1)[1], "c01_a": code["a"], "torch_eager": "e"}
    new_index = {"p1": {"bundle": _bundle(new, "n1", ranked_again, {"c00_b": 4.0, "c01_a": 6.0})},
                 "p2": {"bundle": _bundle(new, "n2", {"c00_a": code["a"].replace("x\n", "x + 1\n"), "torch_eager": "e"},
                                          {"c00_a": 5.0})}}
    (new / "index.json").write_text(json.dumps(new_index))
    assert kernelbench.main(["reuse", str(new), str(old)]) == 0
    assert "1 problems take earlier rows" in capsys.readouterr().out
    rows = {r["id"]: r for r in map(json.loads, (new / "rows" / "p1.jsonl").read_text().splitlines())}
    assert rows["c00_b"]["median_us"] == 2.0 and rows["c00_b"]["predicted_us"] == 4.0  # old c01_b, new prediction
    assert rows["c01_a"]["median_us"] == 1.0 and rows["torch_eager"]["median_us"] == 3.0
    assert not (new / "rows" / "p2.jsonl").exists()
    index = json.loads((new / "index.json").read_text())
    assert index["p1"]["rows_from"] == str(old) and index["p1"]["phase2_wall_s"] == 3.0 and "rows_from" not in index["p2"]
    # the earlier run kept without its bundles (a results directory): its scored rows keep the fingerprints
    import shutil

    kept = tmp_path / "kept"
    shutil.copytree(old, kept, ignore=shutil.ignore_patterns("cache"))
    (kept / kernelbench.SCORED).mkdir()
    (kept / kernelbench.SCORED / "p1.json").write_text(json.dumps(
        {"digest": "-", "row": {"program": "p1", "fingerprint": kernelbench.fingerprint(old / old_index["p1"]["bundle"])}}))
    shutil.rmtree(new / "rows")
    assert kernelbench.main(["reuse", str(new), str(kept)]) == 0
    assert (new / "rows" / "p1.jsonl").exists() and not (new / "rows" / "p2.jsonl").exists()


def test_a_memory_bound_problem_is_reported_against_the_copy_floor_and_the_models_prediction():
    """Issue 53's deliverable 1: bytes moved, achieved bandwidth, the fraction of the run's copy rate and the
    cost model's predicted fraction, and the per-kind target (element-wise and row-wise 90 %, others 85 %)."""
    got = run_suite.copy_fractions(2_000_000_000, 1000.0, 800.0, 4.0e12, 4.0e12)
    assert got["achieved_bytes_per_s"] == pytest.approx(2.0e12) and got["of_copy"] == pytest.approx(0.5)
    assert got["predicted_of_copy"] == pytest.approx(2e9 / 4e12 / 800e-6)
    assert run_suite.copy_fractions(10, None, None, 1.0, 1.0)["of_copy"] is None
    rows = [{"program": p, "bound": "memory", "why": f"{kind} [BLOCK=1]: predicted 1.0 us", "candidate_us": us,
             **run_suite.copy_fractions(4_000_000_000, us, us * 0.9, 4.0e12, 4.0e12)}
            for p, kind, us in (("soft", "reduction", 1050.0), ("pool", "library", 1150.0), ("scan", "scan", 1190.0))]
    rows.append({"program": "gemm", "bound": "matmul", "candidate_us": 5.0, "bytes": 1, "of_copy": 0.01})
    text = "\n".join(kernelbench.copy_floor_table(rows))
    assert "(2 of 3 at target)" in text and "gemm" not in text
    assert "| soft | reduction | 4000 | 1050.0 | 3.81 | 95 % | 106 % | met |" in text
    assert "| scan | scan | 4000 | 1190.0 | 3.36 | 84 % | 93 % | missed |" in text
    assert "| pool | library" in text and text.index("scan") < text.index("pool") < text.index("soft")
