"""KernelBench-style runner: any directories of KernelBench-format files end to end, scored per folder.

    python benchmarks/kernelbench.py bundle  DIR PROBLEMS...   # phase 1 here (CPU): saturate, extract, emit
    python benchmarks/kernelbench.py measure DIR               # phase 2 on a GPU (run_suite measure)
    python benchmarks/kernelbench.py report  DIR [--worst 10] [--write FILE.md]
    python benchmarks/kernelbench.py reuse   DIR OLD_DIR...    # rows of problems whose kernels did not change

``PROBLEMS`` are KernelBench-format files or directories of them (``benchmarks/problems/reductions``, a
KernelBench ``level1`` folder, ...). ``bundle`` is resumable: a problem already in ``DIR/index.json``
(bundled, or skipped with the one-line reason axon_eg gave) is not redone unless ``--force``; it records
each problem's folder and file in ``DIR/problems.json``. ``measure`` is ``run_suite.py measure`` on the same
directory (candidates on every visible GPU, each baseline compiled and timed alone, twice; resumable:
rows already written are kept, one rows file per problem under ``DIR/rows``). ``report`` prints, per folder
and over all, KernelBench's ``fast_p`` (the fraction of the folder's problems whose kernel is correct and
more than p times faster; ``fast_0``: correct) against eager and against torch.compile, for axon_eg's best
candidate alone and for its selection (which falls back to a baseline, so its fast_0 counts what
axon_eg can run at all), the geomeans over the problems measured, and the worst problems by the best
candidate's speed over eager with why: its fusion plan, its tilings, predicted against measured. A problem
axon_eg could not take counts as not correct, with its reason. The cost model section scores the model per
plan kind: the share of problems whose first-ranked candidate (lowest prediction) is within 10% of the fastest
measured one, and the median rank correlation of predicted and measured latency. torch.compile is measured in its default
mode (KernelBench's bar, ``measure --compile-default`` of ``run_suite.py``) and as
``mode="max-autotune-no-cudagraphs"`` (``run_suite.py``'s usual, stronger bar).

``reuse`` spends the GPU only on what changed: after a change re-bundled into DIR, a problem none of whose
kernels changed against an earlier run (every candidate's and baseline's code, the reference, the harness
settings; comments aside) takes that run's rows, candidate ids and predictions mapped to DIR's bundle, and
``measure`` then times only the others. A problem is reused whole or not at all, so its candidates and
baselines stay measured in one run; ``index.json`` records where its rows came from (``rows_from``). The earlier
run needs its bundles or its scored rows, which keep each bundle's fingerprint (a results directory).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from axon_eg.bundle import atomic_text  # noqa: E402
from benchmarks import run_suite  # noqa: E402

THRESHOLDS = (0.0, 1.0, 2.0)
BASES = ("eager", "compile_default", "compile")
"""The baselines fast_p is taken against: eager, torch.compile in its default mode (KernelBench's), and
max-autotune (``run_suite``'s stronger bar)."""


def problem_files(paths: list[str]) -> list[Path]:
    """The KernelBench-format files named or held (directly) by ``paths``, in order, each once."""
    files: list[Path] = []
    for p in map(Path, paths):
        found = sorted(p.glob("*.py")) if p.is_dir() else [p]
        files += [f for f in found if f not in files and not f.name.startswith("_")]
    return files


def cmd_bundle(args: argparse.Namespace) -> int:
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    files = problem_files(args.problems)
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        print(f"kernelbench bundle: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    folders_path = out / "problems.json"
    folders = json.loads(folders_path.read_text()) if folders_path.exists() else {}
    folders.update({f.stem: {"folder": f.parent.name, "path": str(f.resolve())} for f in files})
    folders_path.write_text(json.dumps(folders, indent=1))
    index = json.loads((out / "index.json").read_text()) if (out / "index.json").exists() else {}
    todo = [f for f in files if args.force or f.stem not in index]
    if not todo:
        print(f"kernelbench bundle: all {len(files)} problems are in {out / 'index.json'} (--force redoes them)")
        return 0
    argv = ["bundle", str(out), "-k", str(args.k), "--hw", args.hw, "--programs", ",".join(str(f) for f in todo)]
    return run_suite.main(argv)


def cmd_measure(args: argparse.Namespace) -> int:
    argv = ["measure", str(args.dir), "--compile-default"] + (["--archive", args.archive] if args.archive else [])
    argv += ["--no-max-autotune", "--once"] if args.quick else []
    argv += ["--programs", args.programs] if args.programs else []
    argv += ["--prewarm", str(args.prewarm), "--prewarm-candidates"] if args.prewarm else []
    return run_suite.main(argv)


def _code(path: Path) -> str:
    """A kernel file's code: its lines without the comment lines (a candidate's header names its rank and
    prediction, which a re-ranking changes while the code stays)."""
    return "\n".join(ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith("#"))


HARNESS_KEYS = ("entry", "mode", "kind", "inputs", "out_dtypes", "reference", "seed", "trials", "timeout_s",
                "time_wrong", "tolerance")
"""The manifest fields of a kernel that decide what the harness measures (its id, file and prediction aside)."""


def fingerprint(bundle: Path) -> dict:
    """What a bundle measures, without its files: the limits, a digest of each reference file, and per kernel
    (id) a digest of its code (comments aside) and of the manifest fields that decide what the harness does."""
    def sha(data: str | bytes) -> str:
        return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()[:32]

    manifest = json.loads((bundle / "manifest.json").read_text())
    refs = sorted({c.get("reference", "").split(":")[0] for c in manifest["candidates"]} - {""})  # .py or .npz
    return {"limits": manifest.get("limits"),
            "references": {r: sha((bundle / r).read_bytes()) if (bundle / r).exists() else None for r in refs},
            "kernels": {c["id"]: sha(_code(bundle / c["source"]) + json.dumps([c.get(k) for k in HARNESS_KEYS]))
                        for c in manifest["candidates"]}}


def same_kernels(new: dict, old: dict) -> dict[str, str] | None:
    """``{new id: old id}`` when the bundle of fingerprint ``new`` runs exactly the kernels that of ``old`` ran
    (:func:`fingerprint`: the same code under the same harness settings, the same references and limits), else
    None."""
    if new["limits"] != old["limits"] or new["references"] != old["references"] or len(new["kernels"]) != len(
            old["kernels"]):
        return None
    by_code: dict[str, list[str]] = {}
    for cid, digest in old["kernels"].items():
        by_code.setdefault(digest, []).append(cid)
    mapping = {}
    for cid, digest in new["kernels"].items():
        ids = by_code.get(digest)
        if not ids:
            return None
        mapping[cid] = ids.pop(0)
    return mapping


def _fingerprint_of(out: Path, index: dict, name: str) -> dict | None:
    """Problem ``name``'s fingerprint: from its bundle, else from its kept scored row (a run kept without bundles)."""
    info = index.get(name, {})
    if "bundle" in info and (out / info["bundle"] / "manifest.json").exists():
        return fingerprint(out / info["bundle"])
    kept = out / SCORED / f"{name}.json"
    return json.loads(kept.read_text())["row"].get("fingerprint") if kept.exists() else None


def cmd_reuse(args: argparse.Namespace) -> int:
    out = Path(args.dir)
    if not (out / "index.json").exists():
        print(f"kernelbench reuse: {out / 'index.json'} not found (run `bundle {out} PROBLEMS...` first)", file=sys.stderr)
        return 2
    index = json.loads((out / "index.json").read_text())
    olds = [(Path(d), json.loads((Path(d) / "index.json").read_text())) for d in args.old
            if (Path(d) / "index.json").exists()]
    (out / "rows").mkdir(exist_ok=True)
    reused, todo = [], []
    for name, info in index.items():
        if "bundle" not in info or (out / "rows" / f"{name}.jsonl").exists():
            continue
        for old, old_index in olds:
            was = old_index.get(name, {})
            rows_path = old / "rows" / f"{name}.jsonl"
            before = _fingerprint_of(old, old_index, name) if "bundle" in was and rows_path.exists() else None
            mapping = same_kernels(fingerprint(out / info["bundle"]), before) if before else None
            if mapping is None:
                continue
            back = {v: k for k, v in mapping.items()}
            predicted = {c["id"]: c.get("predicted_us") for c in
                         json.loads((out / info["bundle"] / "candidates.json").read_text())}
            for suffix in (".jsonl", ".baselines2.jsonl"):
                src = old / "rows" / f"{name}{suffix}"
                if not src.exists():
                    continue
                lines = []
                for line in src.read_text().splitlines():
                    if not line.strip():
                        continue
                    row = json.loads(line)
                    if row.get("id") in back:
                        new_id = back[row["id"]]
                        row.update(id=new_id, source=f"{new_id}.py" if row.get("kind") == "candidate" else row.get("source"))
                        if row.get("predicted_us") is not None and predicted.get(new_id) is not None:
                            row["predicted_us"] = predicted[new_id]
                    lines.append(json.dumps(row))
                atomic_text(out / "rows" / f"{name}{suffix}", "\n".join(lines) + "\n")
            info.update({k: v for k, v in was.items() if k in ("phase2_wall_s", "baselines2_wall_s", "compile")})
            info["rows_from"] = str(old)
            reused.append(name)
            break
        else:
            todo.append(name)
    (out / "index.json").write_text(json.dumps(index, indent=1))
    if not todo and olds and (olds[0][0] / "probe.json").exists() and not (out / "probe.json").exists():
        (out / "probe.json").write_text((olds[0][0] / "probe.json").read_text())
    print(f"kernelbench reuse: {len(reused)} problems take earlier rows (their kernels did not change); "
          f"{len(todo)} to measure: {','.join(todo) or '-'}")
    return 0


def fast_p(rows: list[dict], total: int, key: str, p: float) -> float:
    """KernelBench's fast_p over ``total`` problems: correct and ``key`` (a speedup) above ``p``."""
    hits = sum(1 for r in rows if r.get(key) is not None and (p == 0.0 or r[key] > p))
    return hits / total if total else 0.0


geomean = run_suite.geomean


def why(out: Path, index: dict, row: dict) -> str:
    """The best candidate's plan and tilings, predicted against measured."""
    info = index.get(row["program"], {})
    cands = out / info.get("bundle", "") / "candidates.json"
    if "bundle" not in info or not cands.exists():
        return ""
    best = next((c for c in json.loads(cands.read_text()) if c.get("id") == row.get("best_candidate")), None)
    if best is None:
        return ""
    tilings = "; ".join(",".join(f"{k}={v}" for k, v in t.items()) for t in json.loads(best.get("tilings") or "[]"))
    return (f"{best.get('plan')} [{tilings}] isa {best.get('isa')}: predicted {best.get('predicted_us', 0):.1f} us, "
            f"measured {row.get('candidate_us') or float('nan'):.1f} us")


SCORED = "scored"
"""DIR/scored/NAME.json: a problem's scored row (its selection and best candidate against the baselines) with the
digest of the measured rows and the bundle it was scored from. The score runs the pipeline's selection on the
rows at the code that bundled them (another code's cache key finds no bundle), so it is kept: a run whose
problems were bundled at several commits (re-bundled after a change) is reported whole by any later code."""


def _digest(out: Path, index: dict, name: str) -> str:
    h = hashlib.sha256(index[name].get("bundle", "").encode())
    for suffix in (".jsonl", ".baselines2.jsonl"):
        path = out / "rows" / f"{name}{suffix}"
        h.update(path.read_bytes() if path.exists() else b"-")
    return h.hexdigest()


def scored_rows(out: Path, index: dict, folders: dict, measured: list[str]) -> list[dict]:
    """The scored row of every measured problem: kept ones whose rows and bundle are unchanged, the others
    scored now (``run_suite.collect_rows``) and kept, except where this code finds no bundle of its key. A row
    keeps the best candidate's reason (:func:`why`), so that the run's rows report whole without its bundles."""
    store = out / SCORED
    rows: dict[str, dict] = {}
    todo: list[str] = []
    for name in measured:
        path = store / f"{name}.json"
        kept = json.loads(path.read_text()) if path.exists() else {}
        if kept.get("digest") != _digest(out, index, name):
            todo.append(name)
            continue
        rows[name] = kept["row"]
        if any(k not in kept["row"] for k in BUNDLE_FACTS) and "bundle" in index[name] and (
                out / index[name]["bundle"]).exists():  # kept before its bundle was at hand
            rows[name] = _with_bundle_facts(out, index, kept["row"])
            _keep(out, index, rows[name])
    paths = [folders[n]["path"] for n in todo if Path(folders[n]["path"]).exists()]
    for row in run_suite.collect_rows(out, ",".join(paths)) if paths else []:
        row = _with_bundle_facts(out, index, row)
        rows[row["program"]] = row
        if row.get("selected") != "no bundle of this code's key":
            _keep(out, index, row)
    return [rows[n] for n in measured if n in rows]


BUNDLE_FACTS = ("why", "plans", "fingerprint")
"""What a scored row keeps of its bundle, so that the run reports (and serves ``reuse``) without it."""


def _with_bundle_facts(out: Path, index: dict, row: dict) -> dict:
    name = row["program"]
    return {**row, "why": why(out, index, row), "plans": _plans(out, index, name),
            "fingerprint": _fingerprint_of(out, index, name)}


def _keep(out: Path, index: dict, row: dict) -> None:
    """Write a problem's scored row."""
    (out / SCORED).mkdir(exist_ok=True)
    name = row["program"]
    atomic_text(out / SCORED / f"{name}.json",
                json.dumps({"digest": _digest(out, index, name), "row": row}, indent=1, default=str))


def score(out: Path) -> tuple[list[dict], list[dict], dict]:
    """(one line per folder and one for all, the measured rows, the index)."""
    index = json.loads((out / "index.json").read_text())
    folders = json.loads((out / "problems.json").read_text()) if (out / "problems.json").exists() else {}
    measured = [n for n in index if (out / "rows" / f"{n}.jsonl").exists() and n in folders]
    rows = scored_rows(out, index, folders, measured)
    constant = {n for n in measured if any(json.loads(line).get("constant_reference")
                                           for line in (out / "rows" / f"{n}.jsonl").read_text().splitlines() if line)}
    by_name = {r["program"]: r for r in rows if r["program"] not in constant}  # a constant reference: never averaged
    groups: dict[str, list[str]] = {}
    for name in index:
        groups.setdefault(folders.get(name, {}).get("folder", "-"), []).append(name)
    lines = []
    for folder, names in [*sorted(groups.items()), ("all", list(index))]:
        got = [by_name[n] for n in names if n in by_name]
        line = {"folder": folder, "problems": len(names), "measured": len(got),
                "skipped": sum(1 for n in names if "skipped" in index[n]),
                "constant reference": sum(1 for n in names if n in constant)}
        for who, prefix in (("best candidate", "cand_"), ("selection", "")):
            for base in BASES:
                key = f"{prefix}vs_{base}"
                for p in THRESHOLDS:
                    line[f"{who} fast_{p:g} vs {base}"] = fast_p(got, len(names), key, p)
                line[f"{who} geomean vs {base}"] = geomean([r.get(key) for r in got])
        lines.append(line)
    return lines, rows, index


KIND_ORDER = ("matmul", "library", "scan", "reduction", "elementwise", "layout")
"""A plan's group kinds, heaviest first: a problem's kind is its first-ranked plan's heaviest."""
WITHIN = 1.10
"""The cost model's target: the first-ranked candidate within 10% of the fastest measured."""


def plan_kind(plan: str | None) -> str:
    kinds = set((plan or "").split("+"))
    return next((k for k in KIND_ORDER if k in kinds), plan or "-")


def cost_model(out: Path, index: dict, folders: dict) -> list[dict]:
    """Per problem with a correct candidate: is the first-ranked candidate (the model's pick: lowest
    prediction, ties by rank) within ``WITHIN`` of the fastest measured, and the Spearman rank correlation
    of predicted and measured latency over the correct candidates. A first-ranked candidate that failed is
    a miss. The kind is the first-ranked plan's heaviest group kind (``plan_kind``) where the bundle is
    kept, else the folder."""
    from axon_eg.extract.cost import spearman

    per = []
    for name, info in index.items():
        path = out / "rows" / f"{name}.jsonl"
        if "skipped" in info or not path.exists():
            continue
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        cands = [r for r in rows if r.get("kind") == "candidate" and r.get("predicted_us") is not None]
        timed = [r for r in cands if r.get("status") == "ok" and r.get("median_us")]
        if not timed:
            continue
        plans = _plans(out, index, name)
        first = min(cands, key=lambda r: (r["predicted_us"], plans.get(r["id"], {}).get("rank", 0), r["id"]))
        fastest = min(r["median_us"] for r in timed)
        ratio = first["median_us"] / fastest if first in timed else None
        kind = plans[first["id"]]["kind"] if first["id"] in plans else folders.get(name, {}).get("folder", "-")
        rho = spearman([r["predicted_us"] for r in timed], [r["median_us"] for r in timed]) if len(timed) > 1 else None
        per.append({"program": name, "kind": kind, "first": first["id"], "first_vs_fastest": ratio,
                    "within": ratio is not None and ratio <= WITHIN, "spearman": rho, "candidates": len(timed),
                    "measured_vs_predicted": first["median_us"] / first["predicted_us"] if first in timed
                    and first["predicted_us"] else None})
    return per


def _plans(out: Path, index: dict, name: str) -> dict[str, dict]:
    """``{candidate id: {"kind": its plan's heaviest group kind, "rank": its rank}}`` from the bundle, else from the
    problem's kept scored row (which keeps them for a run reported without its bundles)."""
    info = index.get(name, {})
    meta = out / info.get("bundle", "") / "candidates.json"
    if "bundle" in info and meta.exists():
        return {c["id"]: {"kind": plan_kind(c.get("plan")), "rank": c.get("rank", 0)}
                for c in json.loads(meta.read_text()) if c.get("kind") == "candidate"}
    kept = out / SCORED / f"{name}.json"
    return json.loads(kept.read_text())["row"].get("plans", {}) if kept.exists() else {}


def cost_model_table(per: list[dict]) -> list[str]:
    """Markdown: per kind and over all, the problems, the share whose first-ranked candidate is within
    ``WITHIN`` of the fastest, the median rank correlation and the median of the first-ranked candidate's
    measured over predicted time (the model's calibration: 1 is exact); then the misses."""
    import statistics

    md = [f"## cost model: first-ranked candidate within {WITHIN - 1:.0%} of the fastest measured", "",
          "| kind | problems | first-ranked within | median Spearman (problems with >= 2 correct candidates) | "
          "median measured / predicted (first-ranked) |",
          "|---|---:|---:|---:|---:|"]
    kinds: dict[str, list[dict]] = {}
    for p in per:
        kinds.setdefault(p["kind"], []).append(p)
    for kind, ps in [*sorted(kinds.items()), ("all", per)]:
        rhos = [p["spearman"] for p in ps if p["spearman"] is not None]
        share = sum(p["within"] for p in ps) / len(ps) if ps else 0.0
        med = f"{statistics.median(rhos):.2f} (n={len(rhos)})" if rhos else "-"
        scale = [p["measured_vs_predicted"] for p in ps if p.get("measured_vs_predicted")]
        cal = f"{statistics.median(scale):.2f}" if scale else "-"
        md.append(f"| {kind} | {len(ps)} | {share:.0%} | {med} | {cal} |")
    misses = [p for p in per if not p["within"]]
    if misses:
        md += ["", "| missed | kind | first-ranked | its time / fastest |", "|---|---|---|---:|"]
        for p in misses:
            ratio = "failed" if p["first_vs_fastest"] is None else f"{p['first_vs_fastest']:.2f}"
            md.append(f"| {p['program']} | {p['kind']} | {p['first']} | {ratio} |")
    return md + [""]


COPY_TARGET = {"elementwise": 0.90, "reduction": 0.90, "layout": 0.90}
"""Issue 53's bar for a memory-bound problem's best candidate, by its plan's heaviest group kind: the fraction of
the measured copy rate (element-wise and row-wise work 90 %, the rest, ``COPY_DEFAULT``, 85 %)."""
COPY_DEFAULT = 0.85


def copy_floor_table(rows: list[dict]) -> list[str]:
    """The memory-bound problems against the copy floor: per problem its bytes, achieved bandwidth, the fraction
    of the run's copy rate and the cost model's predicted fraction, and whether it meets ``COPY_TARGET``."""
    memory = [r for r in rows if r.get("bound") == "memory" and r.get("of_copy")]
    if not memory:
        return []

    def kind(r: dict) -> str:
        return plan_kind(((r.get("why") or "").split(" [")[0]) or None)

    met = [r for r in memory if r["of_copy"] >= COPY_TARGET.get(kind(r), COPY_DEFAULT)]
    md = [f"## memory-bound problems against the copy floor ({len(met)} of {len(memory)} at target)", "",
          f"Target: {', '.join(f'{k} {v:.0%}' for k, v in COPY_TARGET.items())}, others {COPY_DEFAULT:.0%} of the "
          "device-to-device copy rate this run measured; predicted: the cost model's fraction.", "",
          "| problem | kind | MB | best us | TB/s | of copy | predicted | target |", "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in sorted(memory, key=lambda r: r["of_copy"]):
        pred = f"{100 * r['predicted_of_copy']:.0f} %" if r.get("predicted_of_copy") else "-"
        md.append(f"| {r['program']} | {kind(r)} | {r['bytes'] / 1e6:.0f} | {r['candidate_us']:.1f} | "
                  f"{r['achieved_bytes_per_s'] / 1e12:.2f} | {100 * r['of_copy']:.0f} % | {pred} | "
                  f"{'met' if r in met else 'missed'} |")
    return md + [""]


def render(out: Path, worst: int) -> str:
    lines, rows, index = score(out)
    md = ["# KernelBench-style run", "",
          f"`{out}`: {len(index)} problems, {sum(1 for n in index if 'skipped' in index[n])} axon_eg could not take. "
          "fast_p: fraction of the folder's problems whose kernel is correct and more than p times faster (fast_0: "
          "correct), against eager, torch.compile in its default mode (`compile_default`) and torch.compile "
          "max-autotune-no-cudagraphs (`compile`), each compiled alone.", ""]
    for who in ("best candidate", "selection"):
        cols = [f"{who} fast_{p:g} vs {b}" for b in BASES for p in THRESHOLDS]
        cols += [f"{who} geomean vs {b}" for b in BASES]
        md += [f"## {who}", "", "| folder | problems | measured | " + " | ".join(c.replace(f'{who} ', '') for c in cols) + " |",
               "|---|---:|---:|" + "---:|" * len(cols)]
        for line in lines:
            vals = [f"{line[c]:.2f}" if line[c] is not None else "-" for c in cols]
            md.append(f"| {line['folder']} | {line['problems']} | {line['measured']} | " + " | ".join(vals) + " |")
        md.append("")
    apart = sum(line.get("constant reference", 0) for line in lines if line["folder"] == "all")
    if apart:
        md += [f"{apart} problem(s) whose reference output depends on no input are left out of every fast_p and "
               "geomean above (rows' `constant_reference`).", ""]
    folders = json.loads((out / "problems.json").read_text()) if (out / "problems.json").exists() else {}
    md += copy_floor_table(rows)
    md += cost_model_table(cost_model(out, index, folders))

    def cell(v: float | None) -> str:
        return f"{v:.2f}" if v else "-"

    for base, title in (("eager", "eager"), ("compile_default", "torch.compile (default)")):
        key = f"cand_vs_{base}"
        ranked = sorted((r for r in rows if r.get(key)), key=lambda r: r[key])[:worst]
        md += [f"## the {len(ranked)} worst best candidates (vs {title})", "",
               "| problem | vs eager | vs compile_default | vs compile | why |", "|---|---:|---:|---:|---|"]
        md += [f"| {r['program']} | {cell(r.get('cand_vs_eager'))} | {cell(r.get('cand_vs_compile_default'))} | "
               f"{cell(r.get('cand_vs_compile'))} | {r.get('why') or why(out, index, r)} |" for r in ranked]
        md.append("")
    skipped = [(n, index[n]["skipped"]) for n in index if "skipped" in index[n]]
    if skipped:
        md += ["## not taken", "", "| problem | reason |", "|---|---|"]
        md += [f"| {n} | {reason} |" for n, reason in skipped]
    return "\n".join(md) + "\n"


def per_problem(out: Path) -> str:
    """Every measured problem in one table: its best candidate, the baselines, the speedups, what the selection
    took, and the run its rows come from (``reuse``'s ``rows_from``; this run where it measured them)."""
    _, rows, index = score(out)
    folders = json.loads((out / "problems.json").read_text()) if (out / "problems.json").exists() else {}

    def us(v: float | None, digits: int = 1) -> str:
        return f"{v:.{digits}f}" if v else "-"

    def frac(v: float | None) -> str:
        return f"{100 * v:.0f} %" if v else "-"

    def rate(v: float | None) -> str:
        return f"{v / 1e12:.2f}" if v else "-"

    copy = next((r["copy_bytes_per_s"] for r in rows if r.get("copy_bytes_per_s")), None)
    md = ["# Every measured problem (best candidate, selection, baselines; microseconds)", "",
          f"Bytes: inputs read once and outputs written once; TB/s: bytes over the best candidate's time; of copy: "
          f"that over the device-to-device copy rate this run measured ({rate(copy)} TB/s); predicted: the cost "
          "model's fraction (bytes at the hardware file's copy rate over the candidate's predicted time). The "
          "fractions are the roofline's for memory-bound problems (bound `memory`).", "",
          "| folder | problem | bound | MB | best candidate us | TB/s | of copy | predicted | eager us | "
          "compile (default) us | best vs eager | best vs compile | selected | rows from |",
          "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in sorted(rows, key=lambda r: (folders.get(r["program"], {}).get("folder", "-"), r["program"])):
        name = r["program"]
        source = index.get(name, {}).get("rows_from")
        mb = f"{r['bytes'] / 1e6:.0f}" if r.get("bytes") else "-"
        md.append(f"| {folders.get(name, {}).get('folder', '-')} | {name} | {r.get('bound') or '-'} | {mb} | "
                  f"{us(r.get('candidate_us'))} | {rate(r.get('achieved_bytes_per_s'))} | {frac(r.get('of_copy'))} | "
                  f"{frac(r.get('predicted_of_copy'))} | "
                  f"{us(r.get('eager_us'))} | {us(r.get('compile_default_us'))} | {us(r.get('cand_vs_eager'), 2)} | "
                  f"{us(r.get('cand_vs_compile_default'), 2)} | {r.get('selected') or '-'} | "
                  f"{Path(source).name if source else 'this run'} |")
    return "\n".join(md) + "\n"


def cmd_report(args: argparse.Namespace) -> int:
    out = Path(args.dir)
    if not (out / "index.json").exists():
        print(f"kernelbench report: {out / 'index.json'} not found (run `bundle {out} PROBLEMS...` first)", file=sys.stderr)
        return 2
    text = render(out, args.worst)
    print(text)
    if args.write:
        Path(args.write).write_text(text)
    if args.problems:
        Path(args.problems).write_text(per_problem(out))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("bundle")
    p.add_argument("dir")
    p.add_argument("problems", nargs="+")
    p.add_argument("-k", type=int, default=6)
    p.add_argument("--hw", default="h200")
    p.add_argument("--force", action="store_true", help="redo problems already in DIR/index.json")
    p.set_defaults(func=cmd_bundle)
    p = sub.add_parser("measure")
    p.add_argument("dir")
    p.add_argument("--archive", metavar="FILE.tgz")
    p.add_argument("--programs", help="comma-separated problem names (default: every problem of DIR)")
    p.add_argument("--quick", action="store_true",
                   help="exploratory: eager and default-mode torch.compile only, each timed once (not publishable)")
    p.add_argument("--prewarm", type=int, default=0, metavar="JOBS",
                   help="first run every problem's torch.compile baselines and candidates once, JOBS at a time, to fill "
                   "the shared Triton binary cache (nothing timed; each baseline is compiled and autotuned again alone)")
    p.set_defaults(func=cmd_measure)
    p = sub.add_parser("reuse", help="take earlier runs' rows for the problems whose kernels did not change")
    p.add_argument("dir")
    p.add_argument("old", nargs="+", metavar="OLD_DIR")
    p.set_defaults(func=cmd_reuse)
    p = sub.add_parser("report")
    p.add_argument("dir")
    p.add_argument("--worst", type=int, default=10)
    p.add_argument("--write", metavar="FILE.md")
    p.add_argument("--problems", metavar="FILE.md", help="also write every measured problem's row, one table")
    p.set_defaults(func=cmd_report)
    args = ap.parse_args(argv)
    os.environ.setdefault("PYTHONPATH", str(ROOT / "src"))
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
