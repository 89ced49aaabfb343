"""The suite benchmark: every suite program at its H200 size, axon_eg's selected kernel against torch
eager and ``torch.compile(mode="max-autotune-no-cudagraphs")``, and the roofline floor.

Three steps, so that the GPU box needs only numpy, torch and triton:

    python benchmarks/run_suite.py bundle  DIR [-k 8] [--programs a,b]   # here: phase 1, one bundle per program
    python benchmarks/run_suite.py measure DIR [--programs a,b]          # GPU box: probes + phase 2 (resumable)
    python benchmarks/run_suite.py report  DIR [--programs a,b] [--against DIR2] [--write benchmarks/results/runs/]

``measure`` first probes the machine (copy bandwidth: a 1 GiB device-to-device copy, bytes read +
written; matmul rate: 8192^3 bf16 ``torch.matmul``; both medians of 20 CUDA-event runs) and writes
``DIR/probe.json``; the roofline floor of a program is max(bytes / copy bandwidth, matmul flops /
matmul rate), bytes being its inputs read once plus its outputs written once. Then, for every program,
three measurement-worker runs:

1. axon_eg's candidates, on every visible GPU (``DIR/rows/<program>.jsonl``);
2. the baselines ``torch_eager`` and ``torch_compile`` **alone**: one GPU, one child at a time, nothing else
   running on the box (the candidates are done, any prewarm is over), with ``TORCHINDUCTOR_CACHE_DIR`` set to
   a fresh, empty directory made for this program. Inductor therefore finds no FX-graph, AOTAutograd or
   autotune cache entry and re-does, in this one process, the whole compile including every max-autotune
   decision: the GEMM/template choice benchmarks and the pointwise / reduction config benchmarks
   (``.best_config``). Only the Triton binary cache (``TRITON_CACHE_DIR``, shared, ``--triton-cache``) can
   be warm: it holds compiled kernels keyed by their source, no timing and no choice. Rows go to the same
   ``DIR/rows/<program>.jsonl``;
   With ``--compile-default`` ``torch_compile_default`` (torch.compile in its default mode, KernelBench's
   bar; in every GPU bundle) is measured here too, alone, and in step 3;
3. the same baselines timed a second time, again alone, in new children
   (``DIR/rows/<program>.baselines2.jsonl``). ``torch_compile`` is compiled again from the program's cache of
   step 2 (the same kernels, so the two medians differ by timing noise only); where step 2 ran in an earlier,
   interrupted ``measure``, that cache is gone and step 3 autotunes again, also alone.

``measure DIR2 --reproduce DIR1`` (DIR2 a copy of DIR1's bundles without its rows) is the cheaper second
run the reproduction gate needs: per program only the two baselines (steps 1-2, once: no step 3) and the
fastest correct candidate of DIR1's rows, i.e. the kernels DIR1's row reports; `report DIR1 --against DIR2`
then compares them.

A killed run resumes (rows already written are kept). ``--prewarm JOBS`` compiles every program's
torch.compile baselines (with ``--prewarm-candidates`` it also runs the candidates once) JOBS at a time
first, in a throw-away Inductor cache: it only fills the shared Triton binary cache (``--prewarm 4`` on a
16-core box: ~2.5 min for the 25 baselines), so that step 2 spends its time on autotuning and not on
compiling Triton kernels; nothing the prewarm autotuned is used. Each program
takes ~20-90 s for its candidates (eight kernels, three correctness trials each) plus its baselines twice.

``report`` imports the rows into the Polars tables under ``DIR/cache`` through
``saturate_and_extract(..., rows=...)``, and prints one row per program: floor, both timings of eager
(``eager_us``, ``eager2_us``) and of torch.compile (``compile_us``, ``compile2_us``; ``baseline_drift`` names a
baseline whose two timings differ by more than 5%), axon_eg's selection (the fastest correct kernel, a
baseline where no candidate beats it: ``selected``, ``axon_eg_us``, ``vs_eager``, ``vs_compile``) and its best
candidate alone (``best_candidate``, ``candidate_us``, ``cand_vs_eager``, ``cand_vs_compile``), fraction of the
roofline, phase-1 and phase-2 seconds; the summary gives geomeans of the selection and of the best candidate,
over all programs and over the matmul-bound ones. It saves ``DIR/suite.parquet`` and ``DIR/suite.md``.
``--against DIR2`` (a second complete ``measure`` of the same bundles) compares every program's selection,
``axon_eg_us``, ``candidate_us``, ``eager_us`` and ``compile_us`` between the two runs (column ``reproduced``;
more than 5% apart, or another kernel selected, does not reproduce). ``--write benchmarks/results/runs/``
writes the Markdown as the run's file in the benchmark history, ``<date>-suite.md`` (``-2``, ``-3`` ... where
that name is taken; a path that is not a directory is written as given, never the page ``BENCHMARKS.md``,
whose suite section is then updated by hand from the run file), only when ``--against`` was given and every
row reproduced, or with ``--unreproduced-ok``, when the Markdown lists the rows that did not reproduce and
by how much; otherwise it says why on stderr, exits 1 and leaves the file as it was.

On a remote GPU box that receives DIR as a copy each call (the device tool's ``carry``), bring
``DIR/rows`` and ``DIR/index.json`` back after every call and send them again with the next one: a copy
of DIR without them makes ``measure`` start over. ``measure --archive $OUT/suite.tgz`` packs them into one
file after every program (a box that returns only a few files, or cuts the run short, still returns it).
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


class _Problem:
    """A KernelBench-format file as a benchmark entry (``--programs`` naming a .py file or a directory of
    them, e.g. the held-out ``benchmarks/problems/gemm``): named by its file stem, at its own sizes."""

    kind = "problem"

    def __init__(self, path: Path):
        self.path, self.name = path, path.stem
        self._program = None

    def bound(self, small: bool = False):
        if self._program is None:
            import axon_eg as ax

            self._program = ax.load_problem(self.path).program
        return self._program


def _suite(names: str | None) -> list:
    from benchmarks import suite

    if not names:
        return list(suite.SUITE)
    chosen: list = []
    for name in names.split(","):
        path = Path(name)
        if path.is_dir():
            chosen += [_Problem(f) for f in sorted(path.glob("*.py"))]
        elif name.endswith(".py"):
            chosen.append(_Problem(path))
        else:
            chosen.append(suite.get(name))
    return chosen


def _names(programs: str) -> list[str]:
    """The entry names ``--programs`` selects: suite names as given, KernelBench files and directories by
    their file stems (a name that is neither is kept, for the caller's one-line error)."""
    names: list[str] = []
    for name in programs.split(","):
        path = Path(name)
        names += [f.stem for f in sorted(path.glob("*.py"))] if path.is_dir() else [path.stem] if name.endswith(".py") \
            else [name]
    return names


def cmd_bundle(args: argparse.Namespace) -> int:
    from axon_eg.errors import AxonError
    from axon_eg.pipeline import write_bundle_only

    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    index = json.loads((out / "index.json").read_text()) if (out / "index.json").exists() else {}
    failed = 0
    for entry in _suite(args.programs):
        t0 = time.monotonic()
        try:
            program = entry.bound(small=False)
            bundle = write_bundle_only(program, "triton", args.hw, args.k, cache_dir=out / "cache", device="cuda",
                                       saturation_s=args.saturation_s)
        except AxonError as exc:  # a problem axon_eg cannot take (yet): one line, the other programs go on
            failed += 1
            index[entry.name] = {"skipped": f"{type(exc).__name__}: {exc}"}
            (out / "index.json").write_text(json.dumps(index, indent=1))
            print(f"{entry.name:18s} skipped: {index[entry.name]['skipped']}", file=sys.stderr, flush=True)
            continue
        seconds = time.monotonic() - t0
        index[entry.name] = {"bundle": str(bundle.relative_to(out)), "phase1_s": seconds, "k": args.k, "hw": args.hw}
        print(f"{entry.name:18s} phase 1 {seconds:6.2f} s  {bundle}")
        (out / "index.json").write_text(json.dumps(index, indent=1))
    if failed:
        print(f"run_suite bundle: {failed} program(s) skipped (above, recorded in {out / 'index.json'}); "
              "measure and report take the others", file=sys.stderr)
    return 1 if failed else 0


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
outputs = []
if cand.get("mode") == "dps":  # destination passing: the outputs as the file's SIGNATURE declares them
    outputs = [torch.empty(shape, dtype=dtype, device="cuda") for _, shape, dtype in mod.SIGNATURE[len(inputs):]]
getattr(mod, cand["entry"])(*inputs, *outputs)
torch.cuda.synchronize()
"""


BASELINE_IDS = ("torch_eager", "torch_compile")
COMPILE_DEFAULT = "torch_compile_default"
"""torch.compile in its default mode (KernelBench's bar): in every GPU bundle, measured only with
``measure --compile-default`` (alone, like the others)."""
ALL_BASELINES = (*BASELINE_IDS, COMPILE_DEFAULT)
"""The kernels of a bundle that are baselines (the measurement worker's ids): timed alone, and twice."""
TOLERANCE = 0.05
"""Two timings of one kernel (the two timings of a baseline in one run, or one row of two runs) that differ by
more than this fraction are flagged."""


def _default_triton_cache() -> Path:
    import tempfile

    return Path(os.environ.get("TRITON_CACHE_DIR") or Path(tempfile.gettempdir()) / "axon_eg_suite_triton")


def _prewarm(out: Path, index: dict, names: list[str], jobs: int, ids: tuple[str, ...] = ("torch_compile",),
             candidates: bool = False) -> None:
    """Run every program's kernels ``ids`` (torch.compile baselines) once, and with ``candidates`` its own
    candidates too, ``jobs`` at a time, to fill the shared Triton binary cache (``TRITON_CACHE_DIR``) only:
    the compiles share one throw-away ``TORCHINDUCTOR_CACHE_DIR``, deleted afterwards, so that no FX graph
    and no autotune result of these (perturbed, parallel) runs reaches the measurement, which compiles and
    autotunes every baseline again alone (see the module docstring) and times nothing of the prewarm. A
    kernel that fails here is only reported: the measurement records it."""
    import shutil
    import subprocess
    import tempfile

    todo = []
    for n in names:
        bundle = out / index[n]["bundle"]
        cands = json.loads((bundle / "manifest.json").read_text())["candidates"]
        todo += [(n, bundle, c["id"]) for c in cands
                 if c["id"] in ids or (candidates and c["id"] not in ALL_BASELINES)]
    scratch = tempfile.mkdtemp(prefix="axon_eg_prewarm_inductor_")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": scratch}
    running: list[tuple[str, subprocess.Popen, float]] = []
    t0, count = time.monotonic(), len(todo)
    try:
        while todo or running:
            while todo and len(running) < jobs:
                name, bundle, cid = todo.pop(0)
                proc = subprocess.Popen([sys.executable, "-c", _PREWARM, str(bundle), cid], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                running.append((f"{name}:{cid}", proc, time.monotonic()))
            time.sleep(0.2)
            for item in list(running):
                name, proc, started = item
                if proc.poll() is None and time.monotonic() - started < 600:
                    continue
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                err = (proc.stderr.read() if proc.stderr else "")[-300:]
                if proc.returncode:
                    print(f"  prewarm {name} {time.monotonic() - started:6.1f} s rc={proc.returncode} {err!r}", flush=True)
                running.remove(item)
    finally:
        for _, proc, _ in running:
            proc.kill()
            proc.wait()
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"prewarm: {count} kernels of {len(names)} programs in {time.monotonic() - t0:.0f} s ({jobs} at a time; "
          "Triton binaries only, every baseline is compiled and autotuned again alone)", flush=True)


def fastest_candidate(rows_path: Path) -> str | None:
    """The id of the fastest correct candidate (not a baseline) in a rows file, None when there is none."""
    medians = {i: us for i, us in read_medians(rows_path).items() if i not in ALL_BASELINES}
    return min(medians, key=lambda i: (medians[i], i)) if medians else None


def _statuses(rows: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return counts


def cmd_measure(args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    from axon_eg.measure.manifest import load_manifest
    from axon_eg.measure.worker import _visible_gpus, run_bundle

    out = Path(args.dir)
    index = json.loads((out / "index.json").read_text())
    wanted = _names(args.programs) if args.programs else list(index)
    missing = [n for n in wanted if n not in index]
    if missing:
        print(f"run_suite measure: no bundle in {out / 'index.json'} for {', '.join(missing)} "
              f"(run `bundle {out} --programs {','.join(missing)}` first)", file=sys.stderr)
        return 2
    for n in [n for n in wanted if "skipped" in index[n]]:  # `bundle` could not take it: said once, not measured
        print(f"{n:18s} not measured: {index[n]['skipped']}", file=sys.stderr)
    wanted = [n for n in wanted if "bundle" in index[n]]
    triton_cache = Path(args.triton_cache) if args.triton_cache else _default_triton_cache()
    os.environ["TRITON_CACHE_DIR"] = str(triton_cache)  # shared: compiled kernels only, no autotune decision
    probe = _probe(out / "probe.json")
    print(f"probe: copy {probe['copy_bytes_per_s'] / 1e12:.2f} TB/s, matmul {probe['matmul_flops_per_s'] / 1e12:.0f} TFLOP/s")
    (out / "rows").mkdir(exist_ok=True)
    if args.archive:
        archive(out, Path(args.archive))
    if args.prewarm:
        ids = ((() if args.no_max_autotune else ("torch_compile",))
               + ((COMPILE_DEFAULT,) if args.compile_default else ()))
        _prewarm(out, index, [n for n in wanted if not (out / "rows" / f"{n}.jsonl").exists()], args.prewarm,
                 ids=ids, candidates=args.prewarm_candidates)
    alone = _visible_gpus()[:1]  # the baselines: this one GPU, one child at a time ([]: the CPU)
    for name in wanted:
        bundle = out / index[name]["bundle"]
        ids = [c["id"] for c in load_manifest(bundle)]
        baselines = [i for i in ids if i in BASELINE_IDS or (args.compile_default and i == COMPILE_DEFAULT)]
        if args.no_max_autotune:
            baselines = [i for i in baselines if i != "torch_compile"]
        if args.reproduce:  # only what the first run's row reports: its fastest correct candidate
            best = fastest_candidate(Path(args.reproduce) / "rows" / f"{name}.jsonl")
            if best is None or best not in ids:
                print(f"{name:18s} skipped: no correct candidate of this bundle in {args.reproduce}", flush=True)
                continue
            ids = baselines + [best]
        rows_path, second_path = out / "rows" / f"{name}.jsonl", out / "rows" / f"{name}.baselines2.jsonl"
        inductor = tempfile.mkdtemp(prefix=f"axon_eg_inductor_{name}_")  # fresh: max-autotune benchmarks again
        previous = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = inductor  # the children get the parent's current environment
        try:
            t0 = time.monotonic()
            rows = run_bundle(bundle, rows_path, ids=[i for i in ids if i not in ALL_BASELINES])
            rows += run_bundle(bundle, rows_path, gpus=alone, ids=baselines)
            wall = time.monotonic() - t0
            t1 = time.monotonic()
            second = [] if args.reproduce or args.once else run_bundle(bundle, second_path, gpus=alone, ids=baselines)
            wall2 = time.monotonic() - t1
        finally:
            if previous is None:
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = previous
            shutil.rmtree(inductor, ignore_errors=True)
        info = index[name]
        info["phase2_wall_s"] = info.get("phase2_wall_s", 0.0) + wall
        info["baselines2_wall_s"] = info.get("baselines2_wall_s", 0.0) + wall2
        if any(r["id"] == "torch_compile" for r in rows):
            info["compile"] = "alone, fresh TORCHINDUCTOR_CACHE_DIR"
        (out / "index.json").write_text(json.dumps(index, indent=1))
        print(f"{name:18s} phase 2 {wall:6.1f} s  {_statuses(rows)}; baselines again {wall2:6.1f} s  "
              f"{_statuses(second)}", flush=True)
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


def moved_bytes(program) -> int:
    """The bytes a program must move at the least: its inputs read once and its outputs written once."""
    nbytes = sum(math.prod(program.concrete_shape(i)) * program.nodes[i].dtype.itemsize for i in program.input_ids)
    return nbytes + sum(math.prod(program.concrete_shape(o)) * program.nodes[o].dtype.itemsize for o in program.outputs)


def copy_fractions(nbytes: int, measured_us: float | None, predicted_us: float | None, copy_bytes_per_s: float,
                   model_bytes_per_s: float) -> dict:
    """A memory-bound kernel against the copy floor: its achieved bandwidth (``nbytes`` over its measured time),
    that as a fraction of the copy rate the same run measured, and the fraction the cost model predicted (the
    floor at the hardware file's copy rate over the kernel's predicted time)."""
    achieved = nbytes / (measured_us * 1e-6) if measured_us else None
    return {"bytes": nbytes, "achieved_bytes_per_s": achieved, "copy_bytes_per_s": copy_bytes_per_s,
            "of_copy": achieved / copy_bytes_per_s if achieved else None,
            "predicted_of_copy": nbytes / model_bytes_per_s / (predicted_us * 1e-6) if predicted_us else None}


def floor_seconds(program, probe: dict) -> tuple[float, str]:
    """The roofline floor: inputs read once and outputs written once at the copy bandwidth, or the
    matmul flops at the measured matmul rate, whichever is larger."""
    nbytes = moved_bytes(program)
    flops = 0.0
    for i, node in enumerate(program.nodes):
        if node.op == "matmul":
            flops += 2.0 * math.prod(program.concrete_shape(i)) * program.concrete_shape(node.inputs[0])[-1]
    mem, mm = nbytes / probe["copy_bytes_per_s"], flops / probe["matmul_flops_per_s"]
    return max(mem, mm), ("memory" if mem >= mm else "matmul")


def read_medians(path: Path) -> dict[str, float]:
    """id -> median_us of the ``ok`` rows with a median in a rows file (JSON lines; the last row of an id
    wins; a missing file or a line that is not JSON gives nothing)."""
    out: dict[str, float] = {}
    if not Path(path).exists():
        return out
    for line in Path(path).read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(r, dict) and r.get("status") == "ok" and r.get("median_us"):
            out[r["id"]] = float(r["median_us"])
    return out


def rel_diff(a: float | None, b: float | None) -> float | None:
    """(b - a) / a, None unless both are positive numbers."""
    return (b - a) / a if a and b else None


def _pct(d: float) -> str:
    return f"{100 * d:+.1f}%"


def drift(first: dict[str, float | None], second: dict[str, float | None], tol: float = TOLERANCE) -> str | None:
    """The baselines whose two timings differ by more than ``tol`` ("compile +7.3%"), None where none does."""
    out = []
    for key in ("eager", "compile"):
        d = rel_diff(first.get(key), second.get(key))
        if d is not None and abs(d) > tol:
            out.append(f"{key} {_pct(d)}")
    return ", ".join(out) or None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def program_row(name: str, kind: str, table: list[dict], floor_us: float, bound: str, info: dict,
                second: dict[str, float] | None = None, history: list[float] | None = None) -> dict:
    """One program's row of the report from its kernel table (dicts with ``id``, ``kind``, ``status``,
    ``median_us``, ``verdict`` and optionally ``lowering``: ``Result.table`` as dicts), its floor, its
    ``index.json`` entry, the second timings of its baselines (id -> median_us) and the torch.compile medians
    of other compiles."""
    second, history = second or {}, history or []
    by_id = {r["id"]: r for r in reversed(table)}  # the first row of an id wins
    eager = (by_id.get("torch_eager") or {}).get("median_us")
    comp = (by_id.get("torch_compile") or {}).get("median_us")
    comp_default = (by_id.get(COMPILE_DEFAULT) or {}).get("median_us")
    eager2, comp2 = second.get("torch_eager"), second.get("torch_compile")
    best = next(r for r in table if r.get("verdict") == "selected")
    ours = best.get("median_us")
    cands = sorted((r for r in table if r.get("kind") == "candidate" and r.get("status") == "ok"
                    and r.get("median_us") is not None), key=lambda r: r["median_us"])
    cand = cands[0] if cands else {}
    mine = cand.get("median_us")
    comp_best = min([v for v in (comp, comp2, *history) if v], default=None)
    return {
        "program": name, "kind": kind, "bound": bound, "floor_us": floor_us,
        "eager_us": eager, "eager2_us": eager2, "compile_us": comp, "compile2_us": comp2,
        "baseline_drift": drift({"eager": eager, "compile": comp}, {"eager": eager2, "compile": comp2}),
        "axon_eg_us": ours, "selected": best["id"], "lowering": best.get("lowering"),
        "vs_eager": _ratio(eager, ours), "vs_compile": _ratio(comp, ours), "roofline": _ratio(floor_us, ours),
        "best_candidate": cand.get("id"), "candidate_us": mine,
        "cand_vs_eager": _ratio(eager, mine), "cand_vs_compile": _ratio(comp, mine),
        "cand_roofline": _ratio(floor_us, mine),
        "compile_default_us": comp_default, "vs_compile_default": _ratio(comp_default, ours),
        "cand_vs_compile_default": _ratio(comp_default, mine),
        "compile_best_us": comp_best, "vs_compile_best": _ratio(comp_best, ours),
        "compiles": 1 + len(history), "compile": info.get("compile"),
        "ok": sum(1 for r in table if r.get("status") == "ok" and r.get("kind") == "candidate"),
        "candidates": sum(1 for r in table if r.get("kind") == "candidate"),
        "phase1_s": info.get("phase1_s"), "phase2_s": info.get("phase2_wall_s"),
        "baselines2_s": info.get("baselines2_wall_s"),
    }


REPRO_FIELDS = ("axon_eg_us", "candidate_us", "eager_us", "compile_us")
"""The latencies a second run must reproduce (with the selected kernel's id)."""


def compare_runs(rows: list[dict], other: list[dict], tol: float = TOLERANCE) -> dict[str, list[str]]:
    """program -> how its row of ``other`` (a second run) differs from its row of ``rows``: another selected
    kernel, or one of :data:`REPRO_FIELDS` more than ``tol`` apart (relative to ``rows``), or missing on one
    side; an empty list: reproduced."""
    theirs = {r["program"]: r for r in other}
    out: dict[str, list[str]] = {}
    for r in rows:
        o = theirs.get(r["program"])
        if o is None:
            out[r["program"]] = ["not in the second run"]
            continue
        diffs = []
        if r.get("selected") != o.get("selected"):
            diffs.append(f"selected {r.get('selected')} / {o.get('selected')}")
        for f in REPRO_FIELDS:
            a, b = r.get(f), o.get(f)
            if a is None and b is None:
                continue
            d = rel_diff(a, b)
            if d is None:
                diffs.append(f"{f} {a} / {b}")
            elif abs(d) > tol:
                diffs.append(f"{f} {a:.4g} / {b:.4g} us ({_pct(d)})")
        out[r["program"]] = diffs
    return out


def write_refusal(against: bool, repro: dict[str, list[str]] | None, unreproduced_ok: bool) -> str | None:
    """Why ``--write`` must not write (one line), or None: it writes when ``--against`` was given and every row
    reproduced, or with ``--unreproduced-ok``."""
    if unreproduced_ok:
        return None
    if not against or repro is None:
        return ("run_suite report: refusing --write: no second run to reproduce against; pass --against DIR2 "
                "(a second complete measure of the same bundles) or --unreproduced-ok")
    bad = [p for p, d in repro.items() if d]
    if bad:
        return (f"run_suite report: refusing --write: {len(bad)} of {len(repro)} rows did not reproduce within "
                f"{100 * TOLERANCE:.0f}% ({', '.join(bad)}); see the reproduced column, or pass --unreproduced-ok")
    return None


def geomean(values) -> float | None:
    vals = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def _x(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def summary_lines(rows: list[dict], history: bool = False, repro: dict[str, list[str]] | None = None,
                  against: str | None = None) -> list[str]:
    """The Markdown bullets under the title: geomeans of the selection and of the best candidate alone (all
    programs, matmul-bound ones), the bandwidth target, the baselines timed twice, the reproduction."""
    timed = [r for r in rows if r.get("axon_eg_us")]

    def geo(col: str, subset: list[dict] | None = None) -> float | None:
        return geomean(r.get(col) for r in (timed if subset is None else subset))

    matmul = [r for r in timed if r.get("bound") == "matmul"]
    memory = [r for r in timed if r.get("bound") == "memory"]
    low = [f"{r['program']} ({r['cand_vs_compile']:.2f}x)" for r in timed
           if r.get("cand_vs_compile") is not None and r["cand_vs_compile"] < 0.97]
    drifted = [f"{r['program']} ({r['baseline_drift']})" for r in rows if r.get("baseline_drift")]
    twice = sum(1 for r in rows if r.get("eager2_us") or r.get("compile2_us"))
    lines = [
        f"- geomean speedup of the selection: {_x(geo('vs_eager'))} over eager, {_x(geo('vs_compile'))} over "
        f"torch.compile ({len(timed)} programs; a baseline is selected where no candidate beats it)",
        f"- geomean of axon_eg's best candidate alone: {_x(geo('cand_vs_eager'))} over eager, "
        f"{_x(geo('cand_vs_compile'))} over torch.compile; below 0.97x of torch.compile: {', '.join(low) or 'none'}",
        f"- matmul-bound programs ({len(matmul)}): selection {_x(geo('vs_eager', matmul))} over eager, "
        f"{_x(geo('vs_compile', matmul))} over torch.compile; best candidate alone {_x(geo('cand_vs_eager', matmul))} "
        f"over eager, {_x(geo('cand_vs_compile', matmul))} over torch.compile",
        f"- memory-bound programs at >= 85% of the copy bandwidth: "
        f"{sum(1 for r in memory if (r.get('roofline') or 0) >= 0.85)} of {len(memory)} (selection), "
        f"{sum(1 for r in memory if (r.get('cand_roofline') or 0) >= 0.85)} of {len(memory)} (best candidate)",
        f"- baselines timed twice in this run ({twice} programs; `eager2_us`, `compile2_us`): two timings more than "
        f"{100 * TOLERANCE:.0f}% apart: {', '.join(drifted) or 'none'}",
    ]
    if history:
        lo = min(r.get("compiles", 1) for r in timed) if timed else 0
        hi = max(r.get("compiles", 1) for r in timed) if timed else 0
        below = [f"{r['program']} ({r['vs_compile_best']:.2f}x)" for r in timed
                 if r.get("vs_compile_best") is not None and r["vs_compile_best"] < 0.97]
        lines.append(f"- against the fastest torch.compile seen in {lo}-{hi} separate compiles of each program "
                     f"(`compile_best_us`; max-autotune picks differ between compiles): {_x(geo('vs_compile_best'))} "
                     f"(selection); programs where the selection is below 0.97x of it: {', '.join(below) or 'none'}")
    if repro is None:
        lines.append("- reproduction: not checked against a second run")
    else:
        bad = {p: d for p, d in repro.items() if d}
        head = (f"- reproduction against a second complete measure run{f' ({against})' if against else ''}: "
                f"{len(repro) - len(bad)} of {len(repro)} rows within {100 * TOLERANCE:.0f}% (selection, "
                + ", ".join(REPRO_FIELDS) + ")")
        lines.append(head + ("" if not bad else "; did not reproduce (this run / second run):"))
        lines += [f"  - {p}: {'; '.join(d)}" for p, d in bad.items()]
    return lines


TABLE_COLUMNS = ["program", "bound", "floor_us", "eager_us", "eager2_us", "compile_us", "compile2_us",
                 "baseline_drift", "selected", "axon_eg_us", "vs_eager", "vs_compile", "roofline",
                 "best_candidate", "candidate_us", "cand_vs_eager", "cand_vs_compile", "ok", "candidates",
                 "phase1_s", "phase2_s"]


def render(rows: list[dict], probe: dict, k: int | None, date: str, *, history: bool = False,
           repro: dict[str, list[str]] | None = None, against: str | None = None, notes: str | None = None) -> str:
    """The report's Markdown (suite.md, the run file ``--write`` adds to the benchmark history) from the
    programs' rows (:func:`program_row`)."""
    import polars as pl

    from axon_eg.result import markdown

    columns = list(TABLE_COLUMNS)
    if history:
        columns[columns.index("roofline"):columns.index("roofline")] = ["compile_best_us", "vs_compile_best"]
    if repro is not None:
        columns.append("reproduced")
        rows = [{**r, "reproduced": "yes" if not repro.get(r["program"]) else "no: " + "; ".join(repro[r["program"]])}
                for r in rows]
    full = [{c: r.get(c) for c in columns} for r in rows]
    table = markdown(pl.DataFrame(full, schema=_schema(full, columns), orient="row")) if full else "(no rows)"
    alone = sum(1 for r in rows if r.get("compile"))
    compile_note = ("Every program's torch.compile baseline" if alone == len(rows) else
                    f"The torch.compile baseline of {alone} of {len(rows)} programs") + (
        " was compiled and autotuned alone on an idle GPU with a fresh, empty `TORCHINDUCTOR_CACHE_DIR` (only the "
        "Triton binary cache shared)" + ("." if alone == len(rows) else "; how the others were compiled is "
                                         "stated below."))
    return "\n".join([
        f"# axon_eg suite benchmark ({date})", "",
        f"GPU: {probe['gpu']}; torch {probe['torch']}, Triton {probe['triton']}, Python {probe['python']}. "
        f"Measured copy bandwidth {probe['copy_bytes_per_s'] / 1e12:.2f} TB/s (read + write), matmul "
        f"{probe['matmul_flops_per_s'] / 1e12:.0f} TFLOP/s (bf16 8192^3).", "",
        f"Reproduce: `python benchmarks/run_suite.py bundle runs/suite -k {k}` (phase 1, CPU), "
        "`python benchmarks/run_suite.py measure runs/suite` and again `... measure runs/suite2` on a copy of the "
        "bundles (GPU; `--prewarm JOBS` fills the Triton binary cache in parallel first; every torch.compile "
        "baseline is still autotuned alone), `python benchmarks/run_suite.py report runs/suite --against "
        "runs/suite2 --write benchmarks/results/runs/`.", "",
        "Latencies are medians in microseconds of >= 30 runs, each after a 256 MB L2 flush (CUDA events); "
        "`roofline` is floor / axon_eg (1.0 = at the floor); `ok` counts candidates that passed the correctness "
        "gate; phase 1 = saturate + extract + emit (CPU), phase 2 = compile + check + time of every kernel "
        "including the baselines (GPU wall time). `selected` / `axon_eg_us` is the fastest correct kernel "
        "including the baselines; `best_candidate` / `candidate_us` / `cand_vs_*` are axon_eg's fastest correct "
        "candidate alone. Each baseline is timed twice in one run (`eager_us` / `eager2_us`, `compile_us` / "
        "`compile2_us`, in new processes; `baseline_drift` where they differ by more than 5%). " + compile_note, "",
        *summary_lines(rows, history, repro, against), "", *([notes.strip(), ""] if notes else []), table, ""])


def _schema(rows: list[dict], columns: list[str]) -> dict:
    import polars as pl

    def kind(c: str):
        vals = [r[c] for r in rows if r.get(c) is not None]
        if vals and all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
            return pl.Int64
        if vals and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
            return pl.Float64
        return pl.Utf8 if vals else pl.Float64

    return {c: kind(c) for c in columns}


def collect_rows(out: Path, programs: str | None, history: dict[str, list[float]] | None = None) -> list[dict]:
    """Every measured program's row of the run in ``out`` (the rows imported through ``saturate_and_extract``
    into ``out/cache``)."""
    from axon_eg.hw import load as load_hw  # lazy: the GPU box's measure imports this module without axon_eg's deps
    from axon_eg.pipeline import PipelineError, saturate_and_extract

    index = json.loads((out / "index.json").read_text())
    probe = json.loads((out / "probe.json").read_text())
    history = history or {}
    rows = []
    for entry in _suite(programs):
        if entry.name not in index or not (out / "rows" / f"{entry.name}.jsonl").exists():
            continue
        program = entry.bound(small=False)
        info = index[entry.name]
        try:
            result = saturate_and_extract(program, "triton", info["hw"], info["k"], cache_dir=out / "cache",
                                          rows=out / "rows" / f"{entry.name}.jsonl", force=True)
        except PipelineError as exc:  # nothing passed the correctness gate, or the rows' bundle is not this
            # code's (a hardware file or cost change moves the cache key: report with the commit that bundled)
            print(f"{entry.name}: {exc}", file=sys.stderr)
            why = "no bundle of this code's key" if "no bundle at" in str(exc) else "none passed the correctness gate"
            rows.append({"program": entry.name, "kind": entry.kind, "selected": why,
                         "phase1_s": info["phase1_s"], "phase2_s": info.get("phase2_wall_s")})
            continue
        floor, bound = floor_seconds(program.expand(), probe)
        info = {**info, "phase2_wall_s": info.get("phase2_wall_s", result.phase2_s)}
        table = result.table.to_dicts()
        row = program_row(entry.name, entry.kind, table, floor * 1e6, bound, info,
                          read_medians(out / "rows" / f"{entry.name}.baselines2.jsonl"), history.get(entry.name, []))
        best = next((r for r in table if r["id"] == row.get("best_candidate")), {})
        hw = load_hw(info["hw"])
        model_rate = hw.get("memory.hbm.measured_bandwidth") or hw.value("memory.hbm.bandwidth")
        rows.append({**row, **copy_fractions(moved_bytes(program.expand()), row.get("candidate_us"),
                                             best.get("predicted_us"), probe["copy_bytes_per_s"], model_rate)})
    return rows


def cmd_report(args: argparse.Namespace) -> int:
    import polars as pl

    out = Path(args.dir)
    index = json.loads((out / "index.json").read_text())
    probe = json.loads((out / "probe.json").read_text())
    history = _compile_history(args.compile_history or [])
    rows = collect_rows(out, args.programs, history)
    repro = None
    if args.against:
        repro = compare_runs(rows, collect_rows(Path(args.against), args.programs))
    if rows:
        pl.DataFrame(rows, infer_schema_length=None).write_parquet(out / "suite.parquet")
    date = _last_measured(out) or probe["date"]
    text = render(rows, probe, next(iter(index.values()), {}).get("k"), date, history=bool(history), repro=repro,
                  against=Path(args.against).name if args.against else None,
                  notes=Path(args.notes).read_text() if args.notes else None)
    (out / "suite.md").write_text(text)
    print(text)
    if args.write:
        refusal = write_refusal(bool(args.against), repro, args.unreproduced_ok)
        if refusal:
            print(refusal, file=sys.stderr)
            return 1
        target = write_target(args.write, date)
        if target is None:
            print(f"run_suite report: refusing --write {args.write}: that is the benchmark page, edited by hand; "
                  "write the run file with --write benchmarks/results/runs/ and copy its headline into the page",
                  file=sys.stderr)
            return 1
        target.write_text(text)
        print(f"run_suite report: wrote {target}", file=sys.stderr)
    return 0


def write_target(write: str, date: str) -> Path | None:
    """The file ``--write`` writes: in a directory (an existing one, or a path ending in ``/``) a new run file
    ``<date>-suite.md``, ``-2``, ``-3`` ... where that name is taken, so that no earlier run is overwritten;
    any other path as given. None for the repository's ``BENCHMARKS.md``: the page is edited by hand, from
    the run files under ``benchmarks/results/runs/``."""
    path = Path(write)
    if write.endswith(("/", os.sep)) or path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        target, n = path / f"{date}-suite.md", 2
        while target.exists():
            target, n = path / f"{date}-suite-{n}.md", n + 1
        return target
    if path.resolve() == (ROOT / "BENCHMARKS.md").resolve():
        return None
    return path


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
                   help="first compile the torch.compile baselines JOBS at a time, in a throw-away Inductor cache: "
                   "fills the shared Triton binary cache only; every baseline is still autotuned alone")
    p.add_argument("--prewarm-candidates", action="store_true",
                   help="with --prewarm: run axon_eg's candidates once too (their Triton binaries compiled in parallel)")
    p.add_argument("--triton-cache", metavar="DIR",
                   help="Triton binary cache shared by the prewarm and every compile (default: $TRITON_CACHE_DIR, "
                   "else axon_eg_suite_triton in the temporary directory); Inductor's caches are fresh per program")
    p.add_argument("--compile-default", action="store_true",
                   help="also measure torch.compile in its default mode (torch_compile_default), alone and twice")
    p.add_argument("--reproduce", metavar="DIR1",
                   help="a reproduction run for `report DIR1 --against DIR`: per program only the baselines (once) "
                   "and the fastest correct candidate of DIR1's rows, from the same bundles")
    p.add_argument("--no-max-autotune", action="store_true",
                   help="leave out the max-autotune torch.compile baseline (with --compile-default: KernelBench's bar "
                   "only; a max-autotune compile of a GEMM costs tens of seconds)")
    p.add_argument("--once", action="store_true",
                   help="time the baselines once (an exploratory run: a published table needs them twice)")
    p.add_argument("--archive", metavar="FILE.tgz",
                   help="after every program, pack rows/, index.json and probe.json into FILE.tgz (unpack into DIR)")
    p.set_defaults(func=cmd_measure)
    p = sub.add_parser("report")
    p.add_argument("dir")
    p.add_argument("--programs")
    p.add_argument("--write", metavar="PATH",
                   help="write the Markdown as a run file: a directory (benchmarks/results/runs/) gets <date>-suite.md "
                   "(never overwritten), another path is written as given (not BENCHMARKS.md, the page); only with "
                   "--against and every row reproduced, or --unreproduced-ok")
    p.add_argument("--against", metavar="DIR2",
                   help="a second complete measure run of the same bundles: every row must reproduce within 5%%")
    p.add_argument("--unreproduced-ok", action="store_true",
                   help="--write even without --against or with rows that did not reproduce (the Markdown lists them)")
    p.add_argument("--compile-history", action="append", metavar="GLOB",
                   help="rows files (JSON lines) of other runs: their torch_compile times give compile_best_us")
    p.add_argument("--notes", help="a Markdown file printed after the summary (what is special about this run)")
    p.set_defaults(func=cmd_report)
    args = ap.parse_args(argv)
    os.environ.setdefault("PYTHONPATH", str(ROOT / "src"))
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
