"""Phase 1 of whole corpus models (issue 49 item 4): how long saturation, extraction and emission take per model.

    python benchmarks/phase1_models.py [MODEL ...] [--config real] [--timeout 600] [--json OUT.json]
                                       [--cache-check MODEL]

Each model (``benchmarks.models.MODELS``; all of them when none is named) runs in a fresh process with a fresh
cache directory, so no cache hides a cost: the model is built on the meta device and ``ax.optimize(model,
args, remote=DIR)`` runs phase 1 of each region (``write_bundle_only``: saturate, enumerate, emit, write the
bundle; no GPU, nothing measured). The child prints one JSON line per region as it starts and ends (the
region's wall seconds, and the stages its bundle records in ``phase1.json``: saturation, extraction,
emission, the enumeration's counts), so a model killed at ``--timeout`` still says which region it was in.

Prints a table: model, regions (with a bundle, of all), phase 1 seconds in all (the regions' import, phase 1
and bundle), the whole build's seconds (``ax.optimize``: the export and partition too), the slowest region
and its seconds, and where the time went (saturation / extraction / emission summed over the regions), then
the median and the worst. The targets (issue 49): every model <= 60 s, median <= 20 s on a 2-core machine.
Exits 1 when a model fails or runs past the timeout.

``--cache-check MODEL`` also builds MODEL twice in one process on one cache directory and compares the second
build's seconds per region with the first's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r'''
import json, sys, time
t_start = time.monotonic()
sys.path[:0] = [{src!r}, {root!r}]
import torch
import axon_eg as ax
from axon_eg import dynamo, partition, pipeline
from benchmarks.models import MODELS


def say(**row):
    print("@@" + json.dumps(row), flush=True)


spec = MODELS[{name!r}]
with torch.device("meta"):
    model = spec.build({config!r})
args = tuple(a.to("meta") for a in spec.inputs({config!r}, seed=0))
original = dynamo.compile_region


def timed(sub, call, name, opts, region=None):
    ops = [partition.target(n) for n in sub.graph.nodes if n.op == "call_function"]
    done[0] += 1
    say(event="start", region=name, ops=len(ops), t=time.monotonic() - t_start)
    started = time.monotonic()
    outcome = "kernel"
    try:
        return original(sub, call, name, opts, region)
    except dynamo.Unmeasured:
        outcome = "bundle"
        raise
    except Exception as exc:
        outcome = "torch: " + (str(exc).splitlines() or [type(exc).__name__])[0][:120]
        raise
    finally:
        stages = pipeline.phase1_stages(region.bundle) if region is not None and region.bundle else None
        say(event="done", region=name, ops=len(ops), seconds=time.monotonic() - started, outcome=outcome,
            stages=stages)


dynamo.compile_region = timed
done = [0]
for build in range({builds}):
    started = time.monotonic()
    opt = ax.optimize(model, args, remote={remote!r})
    say(event="built", build=build, seconds=time.monotonic() - started, done=done[0], lines=[r.line() for r in opt.report])
say(event="end", t=time.monotonic() - t_start)
'''


def run_model(name: str, config: str, timeout: float, builds: int = 1) -> dict:
    """One model's phase 1 in a fresh process and a fresh cache directory: its region rows and totals."""
    with tempfile.TemporaryDirectory(prefix="axon-phase1-") as remote:
        code = CHILD.format(src=str(ROOT / "src"), root=str(ROOT), name=name, config=config, remote=remote,
                            builds=builds)
        env = {**os.environ, "AXON_EG_CACHE": os.path.join(remote, "cache")}
        started = time.monotonic()
        try:
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                                  env=env, cwd=str(ROOT))
            out, err, status = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            err, status = "", "timeout"
        wall = time.monotonic() - started
    rows = [json.loads(line[2:]) for line in out.splitlines() if line.startswith("@@")]
    done = [r for r in rows if r["event"] == "done"]
    started_regions = [r for r in rows if r["event"] == "start"]
    result = {"model": name, "wall_s": wall, "status": "ok" if status == 0 else str(status), "regions": done,
              "builds": [r for r in rows if r["event"] == "built"]}
    if status == "timeout" and len(started_regions) > len(done):
        last = started_regions[-1]
        result["running"] = {"region": last["region"], "ops": last["ops"], "seconds": wall - last["t"]}
    if status not in (0, "timeout"):
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        result["error"] = lines[-1] if lines else f"exit status {status}"
    return result


def summarize(r: dict) -> dict:
    """Totals of one model's first build: phase 1 seconds over its regions, the slowest, the stages."""
    first = r["regions"][:r["builds"][0]["done"]] if r["builds"] else r["regions"]
    total = sum(x["seconds"] for x in first)
    slow = max(first, key=lambda x: x["seconds"], default=None)
    stages = {s: sum((x.get("stages") or {}).get(f"{s}_s") or 0.0 for x in first)
              for s in ("saturation", "extraction", "emission")}
    if "running" in r:  # killed inside a region: it is the slowest so far
        total += r["running"]["seconds"]
        if slow is None or r["running"]["seconds"] > slow["seconds"]:
            slow = {"region": r["running"]["region"], "ops": r["running"]["ops"], "seconds": r["running"]["seconds"]}
    bundles = sum(1 for x in first if x.get("stages"))
    build = r["builds"][0]["seconds"] if r["builds"] else None
    return {"total": total, "slow": slow, "stages": stages, "bundles": bundles, "regions": len(first), "build": build}


def cache_check(name: str, config: str, timeout: float) -> str:
    """Two builds of one model in one process on one cache directory: the second build's seconds per region
    against the first's (a region whose phase 1 is served from its bundle takes well under a second)."""
    r = run_model(name, config, timeout, builds=2)
    if r["status"] != "ok" or len(r["builds"]) < 2:
        return f"{name}: the cache check did not finish ({r['status']}{': ' + r.get('error', '') if 'error' in r else ''})"
    n = r["builds"][0]["done"]
    first, second = r["regions"][:n], r["regions"][n:]
    fast = sum(1 for x in second if x["seconds"] < 1.0)
    return (f"{name}: first build {sum(x['seconds'] for x in first):.1f} s over {len(first)} regions; second build "
            f"{sum(x['seconds'] for x in second):.1f} s, {fast} of {len(second)} regions under 1 s")


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.table import Table

    sys.path.insert(0, str(ROOT))
    from benchmarks.models import MODELS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="model names (default: every model of the corpus)")
    parser.add_argument("--config", default="real", choices=("small", "real"))
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per model (default 600)")
    parser.add_argument("--json", type=Path, help="write every model's rows there too")
    parser.add_argument("--cache-check", metavar="MODEL", help="also build MODEL twice on one cache")
    args = parser.parse_args(argv)
    names = args.models or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"unknown model {unknown[0]!r} (models: {', '.join(MODELS)})")
    console = Console(width=200)
    table = Table(title=f"phase 1 per model ({args.config} config, fresh cache, timeout {args.timeout:g} s)")
    for col in ("model", "regions", "phase 1 s", "build s", "slowest region", "its s", "saturation s", "extraction s",
                "emission s", "status"):
        table.add_column(col, justify="left" if col in ("model", "slowest region", "status") else "right")
    results, totals, bad = [], [], 0
    for name in names:
        r = run_model(name, args.config, args.timeout)
        s = summarize(r)
        results.append({**r, "summary": s})
        totals.append(s["total"])
        slow = s["slow"]
        status = r["status"] if "error" not in r else f"{r['status']}: {r['error'][:60]}"
        if "running" in r:
            status = f"timeout in {r['running']['region']}"
        bad += r["status"] != "ok"
        table.add_row(name, f"{s['bundles']}/{s['regions']}", f"{s['total']:.1f}",
                      "-" if s["build"] is None else f"{s['build']:.1f}",
                      f"{slow['region']} ({slow['ops']} ops)" if slow else "-", f"{slow['seconds']:.1f}" if slow else "-",
                      *(f"{s['stages'][k]:.1f}" for k in ("saturation", "extraction", "emission")), status)
        console.print(f"{name}: {s['total']:.1f} s ({r['status']})", highlight=False)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))
    console.print(table)
    if totals:
        console.print(f"median {statistics.median(totals):.1f} s, worst {max(totals):.1f} s over {len(totals)} models "
                      f"(targets: median <= 20 s, every model <= 60 s)", highlight=False)
    if args.cache_check:
        console.print(cache_check(args.cache_check, args.config, args.timeout), highlight=False)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
