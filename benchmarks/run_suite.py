"""The suite benchmark: every suite program at its H200 size, axon_eg's selected kernel against torch
eager and ``torch.compile(mode="max-autotune-no-cudagraphs")``, and the roofline floor.

Three steps, so that the GPU box needs only numpy, torch and triton:

    python benchmarks/run_suite.py bundle  DIR [-k 8] [--programs a,b]   # here: phase 1, one bundle per program
    python benchmarks/run_suite.py measure DIR                           # GPU box: probes + phase 2 (resumable)
    python benchmarks/run_suite.py report  DIR [--write BENCHMARKS.md]   # here: tables, selection, Markdown

``measure`` first probes the machine (copy bandwidth: a 1 GiB device-to-device copy, bytes read +
written; matmul rate: 8192^3 bf16 ``torch.matmul``; both medians of 20 CUDA-event runs) and writes
``DIR/probe.json``; the roofline floor of a program is max(bytes / copy bandwidth, matmul flops /
matmul rate), bytes being its inputs read once plus its outputs written once. Then it runs the
measurement worker on every bundle (``DIR/rows/<program>.jsonl``; a killed run resumes).
``report`` imports the rows into the Polars tables under ``DIR/cache`` through
``saturate_and_extract(..., rows=...)``, and prints one row per program: floor, eager,
torch.compile, axon_eg's selected kernel, speedups, fraction of the roofline, phase-1 and phase-2
seconds; it saves ``DIR/suite.parquet`` and ``DIR/suite.md``, and with ``--write`` a BENCHMARKS.md.

On a remote GPU box that receives DIR as a copy each call (the device tool's ``carry``), bring
``DIR/rows`` and ``DIR/index.json`` back after every call and send them again with the next one: a copy
of DIR without them makes ``measure`` start over. ``measure --archive $OUT/suite.tgz`` packs them into one
file after every program (a box that returns only a few files, or cuts the run short, still returns it).
``--prewarm 4`` on a 16-core box compiles the 25 baselines in ~2.5 min, but Inductor then autotunes while
other compiles share the GPU and its picks differ (BENCHMARKS.md); each program takes ~20-90 s (eight
kernels, three correctness trials each).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))


def _suite(names: str | None) -> list:
    from benchmarks import suite

    chosen = suite.SUITE if not names else [suite.get(n) for n in names.split(",")]
    return list(chosen)


def cmd_bundle(args: argparse.Namespace) -> int:
    from axon_eg.pipeline import write_bundle_only

    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    index = json.loads((out / "index.json").read_text()) if (out / "index.json").exists() else {}
    for entry in _suite(args.programs):
        program = entry.bound(small=False)
        t0 = time.monotonic()
        bundle = write_bundle_only(program, "triton", args.hw, args.k, cache_dir=out / "cache", device="cuda",
                                   saturation_s=args.saturation_s)
        seconds = time.monotonic() - t0
        index[entry.name] = {"bundle": str(bundle.relative_to(out)), "phase1_s": seconds, "k": args.k, "hw": args.hw}
        print(f"{entry.name:18s} phase 1 {seconds:6.2f} s  {bundle}")
        (out / "index.json").write_text(json.dumps(index, indent=1))
    return 0


def _probe(path: Path) -> dict:
    import statistics

    import torch

    if path.exists():
        return json.loads(path.read_text())

    def timed(fn, runs: int = 20) -> float:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(runs):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        return statistics.median(times)

    x = torch.empty(1 << 29, dtype=torch.bfloat16, device="cuda").normal_()
    y = torch.empty_like(x)
    copy_s = timed(lambda: y.copy_(x))
    del x, y
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    mm_s = timed(lambda: a @ b)
    probe = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
             "triton": __import__("triton").__version__, "python": platform.python_version(),
             "copy_bytes_per_s": 2 * (1 << 30) / copy_s, "matmul_flops_per_s": 2 * 8192**3 / mm_s,
             "date": time.strftime("%Y-%m-%d")}
    path.write_text(json.dumps(probe, indent=1))
    return probe


_PREWARM = """
import importlib.util, json, sys, torch
from axon_eg.measure import harness
bundle, cid = sys.argv[1], sys.argv[2]
cand = next(c for c in json.load(open(bundle + "/manifest.json"))["candidates"] if c["id"] == cid)
spec = importlib.util.spec_from_file_location("baseline", bundle + "/" + cand["source"])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
inputs = harness.make_inputs(cand["inputs"], 0, "cuda")
getattr(mod, cand["entry"])(*inputs)
torch.cuda.synchronize()
"""


def _prewarm(out: Path, index: dict, names: list[str], jobs: int) -> None:
    """Compile every program's torch.compile baseline once, ``jobs`` at a time, so that the measurement
    (one baseline at a time) finds Inductor's caches warm: compiling 25 max-autotune graphs one after the
    other would take most of a device session. Autotuning runs while other compiles share the GPU, which
    can perturb Inductor's choice of kernel configs (reported with the results)."""
    import subprocess

    todo = [(n, out / index[n]["bundle"]) for n in names]
    todo = [(n, b) for n, b in todo
            if any(c["id"] == "torch_compile" for c in json.loads((b / "manifest.json").read_text())["candidates"])]
    running: list[tuple[str, subprocess.Popen, float]] = []
    t0 = time.monotonic()
    while todo or running:
        while todo and len(running) < jobs:
            name, bundle = todo.pop(0)
            proc = subprocess.Popen([sys.executable, "-c", _PREWARM, str(bundle), "torch_compile"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            running.append((name, proc, time.monotonic()))
        time.sleep(0.5)
        for item in list(running):
            name, proc, started = item
            if proc.poll() is None and time.monotonic() - started < 600:
                continue
            if proc.poll() is None:
                proc.kill()
            err = (proc.stderr.read() if proc.stderr else "")[-300:]
            print(f"  prewarm {name:18s} {time.monotonic() - started:6.1f} s rc={proc.returncode}"
                  + (f" {err!r}" if proc.returncode else ""), flush=True)
            running.remove(item)
    print(f"prewarm: {len(names)} torch.compile baselines in {time.monotonic() - t0:.0f} s ({jobs} at a time)", flush=True)


def cmd_measure(args: argparse.Namespace) -> int:
    from axon_eg.measure.worker import run_bundle

    out = Path(args.dir)
    index = json.loads((out / "index.json").read_text())
    probe = _probe(out / "probe.json")
    print(f"probe: copy {probe['copy_bytes_per_s'] / 1e12:.2f} TB/s, matmul {probe['matmul_flops_per_s'] / 1e12:.0f} TFLOP/s")
    (out / "rows").mkdir(exist_ok=True)
    wanted = args.programs.split(",") if args.programs else list(index)
    if args.archive:
        archive(out, Path(args.archive))
    if args.prewarm:
        _prewarm(out, index, [n for n in wanted if not (out / "rows" / f"{n}.jsonl").exists()], args.prewarm)
    for name in wanted:
        t0 = time.monotonic()
        rows = run_bundle(out / index[name]["bundle"], out / "rows" / f"{name}.jsonl")
        wall = time.monotonic() - t0
        index[name]["phase2_wall_s"] = index[name].get("phase2_wall_s", 0.0) + wall
        (out / "index.json").write_text(json.dumps(index, indent=1))
        statuses = {}
        for r in rows:
            statuses[r["status"]] = statuses.get(r["status"], 0) + 1
        print(f"{name:18s} phase 2 {wall:6.1f} s  {statuses}", flush=True)
        if args.archive:
            archive(out, Path(args.archive))
    return 0


def archive(out: Path, path: Path) -> Path:
    """``rows/``, ``index.json`` and ``probe.json`` of DIR in one .tar.gz (written to a temporary name, then
    renamed): what a remote box returns when it may only send a few files back, refreshed after every
    program so that a run cut short still returns what it measured. Unpack it into DIR to resume."""
    import tarfile

    tmp = path.with_name(path.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for name in ("rows", "index.json", "probe.json"):
            if (out / name).exists():
                tar.add(out / name, arcname=name)
    os.replace(tmp, path)
    return path


def floor_seconds(program, probe: dict) -> tuple[float, str]:
    """The roofline floor: inputs read once and outputs written once at the copy bandwidth, or the
    matmul flops at the measured matmul rate, whichever is larger."""
    nbytes = sum(math.prod(program.concrete_shape(i)) * program.nodes[i].dtype.itemsize for i in program.input_ids)
    nbytes += sum(math.prod(program.concrete_shape(o)) * program.nodes[o].dtype.itemsize for o in program.outputs)
    flops = 0.0
    for i, node in enumerate(program.nodes):
        if node.op == "matmul":
            flops += 2.0 * math.prod(program.concrete_shape(i)) * program.concrete_shape(node.inputs[0])[-1]
    mem, mm = nbytes / probe["copy_bytes_per_s"], flops / probe["matmul_flops_per_s"]
    return max(mem, mm), ("memory" if mem >= mm else "matmul")


def cmd_report(args: argparse.Namespace) -> int:
    import polars as pl

    from axon_eg.pipeline import PipelineError, markdown, saturate_and_extract

    out = Path(args.dir)
    index = json.loads((out / "index.json").read_text())
    probe = json.loads((out / "probe.json").read_text())
    history = _compile_history(args.compile_history or [])
    rows = []
    for entry in _suite(args.programs):
        if entry.name not in index or not (out / "rows" / f"{entry.name}.jsonl").exists():
            continue
        program = entry.bound(small=False)
        info = index[entry.name]
        try:
            result = saturate_and_extract(program, "triton", info["hw"], info["k"], cache_dir=out / "cache",
                                          rows=out / "rows" / f"{entry.name}.jsonl", force=True)
        except PipelineError as exc:  # nothing passed the correctness gate: say so, keep the other rows
            print(f"{entry.name}: {exc}", file=sys.stderr)
            rows.append({"program": entry.name, "kind": entry.kind, "selected": "none passed the correctness gate",
                         "phase1_s": info["phase1_s"], "phase2_s": info.get("phase2_wall_s")})
            continue
        t = result.table
        get = lambda i: t.filter(pl.col("id") == i)["median_us"].first()  # noqa: E731
        eager, comp = get("torch_eager"), get("torch_compile")
        best = t.filter(pl.col("verdict") == "selected").row(0, named=True)
        floor, bound = floor_seconds(program.expand(), probe)
        ours = best["median_us"]
        cands = t.filter((pl.col("kind") == "candidate") & (pl.col("status") == "ok")).sort("median_us", nulls_last=True)
        cand = cands.row(0, named=True) if cands.height else {}
        mine = cand.get("median_us")
        comp_best = min([v for v in (comp, *history.get(entry.name, [])) if v], default=None)
        rows.append({
            "program": entry.name, "kind": entry.kind, "bound": bound, "floor_us": floor * 1e6, "eager_us": eager,
            "compile_us": comp, "axon_eg_us": ours, "selected": best["id"], "lowering": best.get("lowering"),
            "vs_eager": eager / ours if eager and ours else None, "vs_compile": comp / ours if comp and ours else None,
            "roofline": floor * 1e6 / ours if ours else None,
            "best_candidate": cand.get("id"), "candidate_us": mine,
            "cand_vs_compile": comp / mine if comp and mine else None,
            "cand_roofline": floor * 1e6 / mine if mine else None,
            "compile_best_us": comp_best, "vs_compile_best": comp_best / ours if comp_best and ours else None,
            "compiles": 1 + len(history.get(entry.name, [])),
            "ok": int(t.filter((pl.col("status") == "ok") & (pl.col("kind") == "candidate")).height),
            "candidates": int(t.filter(pl.col("kind") == "candidate").height),
            "phase1_s": info["phase1_s"], "phase2_s": info.get("phase2_wall_s", result.phase2_s),
        })
    df = pl.DataFrame(rows, infer_schema_length=None)
    df.write_parquet(out / "suite.parquet")
    geo = lambda col: math.exp(sum(math.log(v) for v in df[col].drop_nulls()) / max(1, df[col].drop_nulls().len()))  # noqa: E731
    table = markdown(df.select(["program", "bound", "floor_us", "eager_us", "compile_us", "axon_eg_us", "vs_eager",
                                "vs_compile", *(["compile_best_us", "vs_compile_best"] if history else []),
                                "roofline", "selected", "candidate_us", "cand_vs_compile", "ok",
                                "candidates", "phase1_s", "phase2_s"]))
    memory = df.filter(pl.col("bound") == "memory")
    conservative = [] if not history else [
        f"- against the fastest torch.compile seen in {df['compiles'].min()}-{df['compiles'].max()} separate compiles "
        f"of each program (`compile_best_us`; max-autotune picks differ between compiles): {geo('vs_compile_best'):.2f}x "
        "(selection); programs where the selection is below 0.97x of it: "
        + (", ".join(f"{r['program']} ({r['vs_compile_best']:.2f}x)" for r in df.iter_rows(named=True)
                     if r["vs_compile_best"] is not None and r["vs_compile_best"] < 0.97) or "none")]
    summary = "\n".join([
        f"- geomean speedup of the selection: {geo('vs_eager'):.2f}x over eager, {geo('vs_compile'):.2f}x over "
        f"torch.compile ({df.height} programs; a baseline is selected where no candidate beats it)",
        f"- geomean of axon_eg's best candidate alone over torch.compile: {geo('cand_vs_compile'):.2f}x; "
        "below 0.97x: "
        + ", ".join(f"{r['program']} ({r['cand_vs_compile']:.2f}x)" for r in df.iter_rows(named=True)
                    if r["cand_vs_compile"] is not None and r["cand_vs_compile"] < 0.97),
        f"- memory-bound programs at >= 85% of the copy bandwidth: "
        f"{memory.filter(pl.col('roofline') >= 0.85).height} of {memory.height} (selection), "
        f"{memory.filter(pl.col('cand_roofline') >= 0.85).height} of {memory.height} (best candidate)", *conservative])
    text = "\n".join([
        f"# axon_eg suite benchmark ({_last_measured(out) or probe['date']})", "",
        f"GPU: {probe['gpu']}; torch {probe['torch']}, Triton {probe['triton']}, Python {probe['python']}. "
        f"Measured copy bandwidth {probe['copy_bytes_per_s'] / 1e12:.2f} TB/s (read + write), matmul "
        f"{probe['matmul_flops_per_s'] / 1e12:.0f} TFLOP/s (bf16 8192^3).", "",
        f"Reproduce: `python benchmarks/run_suite.py bundle runs/suite -k {next(iter(index.values()))['k']}` "
        "(phase 1, CPU), `python benchmarks/run_suite.py measure runs/suite` (GPU; `--prewarm JOBS` compiles the "
        "torch.compile baselines in parallel first), `python benchmarks/run_suite.py report runs/suite --write "
        "BENCHMARKS.md`.", "",
        "Latencies are medians in microseconds of >= 30 runs, each after a 256 MB L2 flush (CUDA events); "
        "`roofline` is floor / axon_eg (1.0 = at the floor); `ok` counts candidates that passed the correctness "
        "gate; phase 1 = saturate + extract + emit (CPU), phase 2 = compile + check + time of every kernel "
        "including the baselines (GPU wall time). `selected` is the fastest correct kernel including the baselines; "
        "`candidate_us` / `cand_vs_compile` are axon_eg's fastest correct candidate alone. How the torch.compile "
        "baselines were compiled is stated below where it was not one compile per program on an idle GPU.", "",
        summary, "", *([Path(args.notes).read_text().strip(), ""] if args.notes else []), table, ""])
    (out / "suite.md").write_text(text)
    print(text)
    if args.write:
        Path(args.write).write_text(text)
    return 0


def _last_measured(out: Path) -> str | None:
    """The date of the newest row under ``out/rows`` (rows of an older run can be reused)."""
    stamps = [json.loads(line).get("timestamp") or "" for p in (out / "rows").glob("*.jsonl")
              for line in p.read_text().splitlines() if line.strip().startswith("{")]
    return max(stamps)[:10] if any(stamps) else None


def _compile_history(globs: list[str]) -> dict[str, list[float]]:
    """program -> torch_compile medians found in the rows files matching ``globs`` (other compiles)."""
    import glob

    out: dict[str, list[float]] = {}
    for pattern in globs:
        for path in sorted(glob.glob(pattern)):
            for line in Path(path).read_text().splitlines():
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if r.get("id") == "torch_compile" and r.get("status") == "ok" and r.get("median_us"):
                    out.setdefault(r.get("program") or Path(path).name.split(".")[0], []).append(r["median_us"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("bundle")
    p.add_argument("dir")
    p.add_argument("-k", type=int, default=8)
    p.add_argument("--hw", default="h200")
    p.add_argument("--programs")
    p.add_argument("--saturation-s", type=float, default=2.0)
    p.set_defaults(func=cmd_bundle)
    p = sub.add_parser("measure")
    p.add_argument("dir")
    p.add_argument("--programs")
    p.add_argument("--prewarm", type=int, default=0, metavar="JOBS",
                   help="compile the torch.compile baselines JOBS at a time before measuring")
    p.add_argument("--archive", metavar="FILE.tgz",
                   help="after every program, pack rows/, index.json and probe.json into FILE.tgz (unpack into DIR)")
    p.set_defaults(func=cmd_measure)
    p = sub.add_parser("report")
    p.add_argument("dir")
    p.add_argument("--programs")
    p.add_argument("--write")
    p.add_argument("--compile-history", action="append", metavar="GLOB",
                   help="rows files (JSON lines) of other runs: their torch_compile times give compile_best_us")
    p.add_argument("--notes", help="a Markdown file printed after the summary (what is special about this run)")
    p.set_defaults(func=cmd_report)
    args = ap.parse_args(argv)
    os.environ.setdefault("PYTHONPATH", str(ROOT / "src"))
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
