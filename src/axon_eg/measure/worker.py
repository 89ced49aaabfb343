"""The phase-2 worker: run every candidate of a bundle in its own child process, one JSON row each.

Imports only the standard library here. How children start: the first candidate that needs one starts a
**fork server**, ``subprocess.Popen([sys.executable, "-c", _BOOT, json(sys.path)], start_new_session=True)``:
a fresh interpreter that gets the parent's ``sys.path`` and environment, imports numpy, torch and triton
once (never touching CUDA; ``TRITON_INTERPRET=1`` for CPU children) and then ``os.fork()``s one child per
candidate on request (JSON lines over a pipe). Nothing of the caller's ``__main__`` is ever imported (no
``multiprocessing``): a script without an ``if __name__ == "__main__":`` guard and a notebook both work.
Each child calls ``setsid`` (its own session and process group), dies with the server (PDEATHSIG), reads
/dev/null, writes stdout/stderr to a file (its tail goes into a ``crashed`` row) and gets the parent's
current environment plus ``CUDA_VISIBLE_DEVICES`` for its one GPU, so it starts in milliseconds and a
crash (a negative exit code: ``crashed``) or a hang (killed after ``timeout_s``: ``timeout``) takes only its
own process group. The server SIGKILLs a child's whole group when it reaps it (nothing it started
outlives it) and every group when its stdin closes (the parent exited or died, even by SIGKILL) or it
gets SIGTERM; the parent stops it at exit. One server per ``TRITON_INTERPRET`` value, shared by the
worker threads (one per GPU) and kept across :func:`run_bundle` calls.

Signals: while :func:`run_bundle` runs (:func:`interrupt_guard`, main thread only), SIGINT and SIGTERM
stop the server(s), so every child's process group dies, and raise :class:`Interrupted` (a
``KeyboardInterrupt``): rows already written stay, a rerun measures only the rest. ``python -m
axon_eg.measure`` prints its one line (``axon-eg: interrupted (SIGTERM) after 3 of 8 kernels; rows kept in
FILE; run again to resume``) and exits 130 / 143; uncaught in a script it prints that line only. The
previous handlers are restored afterwards.

Runs on a bare GPU box. Usage: ``python -m axon_eg.measure BUNDLE --out FILE``, or ``python -m axon_eg.measure
BUNDLE...`` (each bundle's rows into ``BUNDLE/rows.jsonl``, where ``saturate_and_extract`` and the dynamo
backend's ``remote`` option look for them).

Bundle layout: ``BUNDLE/manifest.json`` plus the source files it names. The manifest is a list of
candidates, or ``{"limits": {...}, "cache_key": ..., "candidates": [...]}``; each candidate::

    {"id": "softmax_v3",                 # unique within the bundle; the resume key
     "source": "softmax_v3.py",          # relative to the bundle
     "entry": "kernel",                  # callable in the source (see harness.py for calling modes)
     "inputs": [{"name": "x", "shape": [64, 128], "dtype": "fp32", "positive": false}],
     "out_dtypes": ["fp32"],             # optional; default: first input's dtype
     "reference": "ref.npz" | "ref.py:fn",
     "mode": "auto",                     # optional: dps / return / auto
     "seed": 0, "trials": 3,             # optional
     "timeout_s": 30,                    # optional, wall-clock seconds of the child
     "kind": "candidate",                # optional: candidate / baseline (copied into the row)
     "resources": {"smem_bytes": 98304, "max_warps": 8, "launch": "_k0"},  # optional, see below
     "predicted_us": 12.5,               # optional (or meta.predicted_us), copied into the row
     "meta": {...}}                      # optional, free-form; not interpreted

Top-level keys ``limits``, ``cache_key``, ``program``, ``hw`` and ``target`` are inherited by every
candidate that does not set them; all but ``limits`` are copied into the rows.

``ref.npz`` holds precomputed float64 outputs under keys ``seed{S}_out{J}`` for trial seeds
``seed .. seed+trials-1``; ``ref.py:fn`` names a NumPy float64 reference function in the bundle.

Verification cascade, cheapest first; a candidate stops at the first stage it fails:
syntax (``ast.parse``, no child) -> structure (static ``resources`` of the kernel's launches, the max
over launches as estimated by the code generator, against the hardware ``limits``, e.g.
``{"smem_bytes": 232448, "max_warps": 32, "max_block_elems": 1048576, "regs_per_thread": 255}``; any
resource over its limit is a ``structure_error`` without starting a child; Triton's ``OutOfResources``
in the child is one too) -> correctness (harness.check_correctness) -> performance (harness.time_candidate).

Every outcome is one row, appended to FILE as JSON lines, flushed and fsynced per row. Rows already in
FILE are skipped on a rerun, so a killed run resumes; a partially written last line is dropped.
Statuses: ok, syntax_error, structure_error, compile_error, runtime_error, wrong_result, timeout, crashed.
With ``--ray ADDRESS`` the candidates run as Ray tasks instead (see :mod:`axon_eg.measure.ray_runner`).

This module is the cascade and the bundle runner (:func:`run_candidate`, :func:`run_bundle`; the command line is
:mod:`.cli`); the parts live beside it (import each name from its own module): :mod:`.manifest` (the manifest, the row schema
and writer, the child-free stages), :mod:`.forkserver` (starting, feeding and stopping the fork servers),
:mod:`.child` (what one forked child runs), :mod:`.interrupts` (SIGINT / SIGTERM).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from axon_eg.measure import interrupts
from axon_eg.measure.child import LIMIT_FILE, WARM_FILE
from axon_eg.measure.forkserver import fork_server
from axon_eg.measure.interrupts import Guard, Stopped, check_epoch, interrupt_guard
from axon_eg.measure.manifest import DEFAULT_TIMEOUT_S, RowWriter, load_manifest, make_row, read_rows, static_check


def run_candidate(bundle: Path, cand: dict[str, Any], gpu: int | str | None = None) -> dict[str, Any]:
    """Check and run one candidate; always returns a row, never raises for a bad candidate. ``gpu`` is the
    (physical) CUDA device the child may see; None runs on the CPU with ``TRITON_INTERPRET=1``. The child is
    forked by the fork server (see :func:`_serve`); an interrupt raises (see :func:`interrupt_guard`)."""
    return _run_candidate(bundle, cand, gpu, interrupts._EPOCH)


ROWS_NAME = "rows.jsonl"
"""A bundle's own rows file (``python -m axon_eg.measure BUNDLE`` without ``--out``)."""
STOP_FACTOR = 10.0
"""A candidate whose first timed runs are this many times slower than the fastest correct kernel measured
before it in the run (or the rows file it resumes) is stopped and recorded as ``performance``."""


def stop_limit(rows: Iterable[dict[str, Any]], factor: float = STOP_FACTOR) -> float | None:
    """The stop limit for the next candidate (``harness.measure``'s ``stop_above_us``): ``factor`` times the
    fastest correct kernel among ``rows`` (baselines included); None before any was timed."""
    times = [float(r["median_us"]) for r in rows if r.get("status") == "ok" and r.get("median_us")]
    return factor * min(times) if times else None


def _run_candidate(bundle: Path, cand: dict[str, Any], gpu: int | str | None, epoch: int,
                   limit_us: float | None = None, warm: bool = False) -> dict[str, Any]:
    """:func:`run_candidate` for a run that started in ``epoch``: raises :class:`Stopped` once it is over.
    ``limit_us``: a candidate (not a baseline) whose first timed runs are slower stops there (``performance``).
    ``warm``: compile and check it once, untimed (``warm``); the result is not a row."""
    t0 = time.monotonic()
    bundle = Path(bundle)
    device = "cpu" if gpu is None else f"cuda:{gpu}"
    failed = static_check(bundle, cand, device)
    if failed is not None:
        return failed
    timeout = float(cand.get("timeout_s", DEFAULT_TIMEOUT_S))
    with tempfile.TemporaryDirectory(prefix="axon_eg_child_") as tmp:
        result_path = Path(tmp) / "result.json"
        err_path = Path(tmp) / "stderr.txt"
        if limit_us is not None and cand.get("kind") == "candidate":
            (Path(tmp) / LIMIT_FILE).write_text(json.dumps({"stop_above_us": limit_us}))
        if warm:
            (Path(tmp) / WARM_FILE).write_text("")
        server = fork_server(gpu is None)
        t0 = time.monotonic()  # the child's clock starts at its fork, not while the server preloads
        check_epoch(epoch)
        job = server.start(str(bundle), cand["id"], str(result_path), str(err_path), None if gpu is None else str(gpu))
        finished = job.done.wait(timeout)
        check_epoch(epoch)
        if not finished:
            server.kill(job)
            job.done.wait(10)
            check_epoch(epoch)
            return make_row(cand, device, status="timeout", stage="run", error=f"killed after {timeout:g} s",
                            elapsed_s=time.monotonic() - t0)
        stderr_tail = err_path.read_text(errors="replace")[-4000:] if err_path.exists() else ""
        if result_path.exists():
            res = json.loads(result_path.read_text())
            return make_row(cand, res.pop("device", device), **res, elapsed_s=time.monotonic() - t0)
        rc = job.rc
        if rc is None:  # the server died (it was not us): the child died with it (PDEATHSIG), not its group
            if job.pid is not None:  # the group id stays reserved while a member lives, so this hits only them
                with contextlib.suppress(OSError):
                    os.killpg(job.pid, signal.SIGKILL)
            how = f"was lost: the fork server exited ({server.log_tail()})"
        else:
            how = f"killed by signal {signal.Signals(-rc).name}" if rc < 0 else f"exited with code {rc}"
        return make_row(cand, device, status="crashed", stage="run", error=f"child {how}; stderr: {stderr_tail}",
                        elapsed_s=time.monotonic() - t0)


def _visible_gpus() -> list[int]:
    """GPUs the worker may use, without creating a CUDA context in this process."""
    if os.environ.get("AXON_EG_FORCE_CPU"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    n = sum(1 for ln in out.stdout.splitlines() if ln.startswith("GPU "))
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        ids = [v.strip() for v in vis.split(",") if v.strip() and v.strip() != "-1"]
        return [int(v) for v in ids if v.isdigit()][:n] if n else []
    return list(range(n))


def run_bundle(bundle: str | os.PathLike[str], out: str | os.PathLike[str], gpus: Sequence[int] | None = None,
               ids: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Run every candidate without a row in ``out``; returns the new rows. One worker thread (each driving
    one child at a time) per GPU; sequential on CPU. Under :func:`interrupt_guard`: SIGINT / SIGTERM
    kill every child and raise :class:`Interrupted`, the rows written so far stay."""
    bundle = Path(bundle).resolve()
    cands = load_manifest(bundle)
    if ids is not None:
        want = set(ids)
        cands = [c for c in cands if c["id"] in want]
    earlier = read_rows(out)
    done = {r.get("id") for r in earlier}
    todo = [c for c in cands if c["id"] not in done]
    timed = [r for r in earlier if r.get("status") == "ok"]  # the stop limit follows the fastest so far
    lock = threading.Lock()
    gpus = _visible_gpus() if gpus is None else list(gpus)
    slots: list[int | None] = list(gpus) or [None]
    new: list[dict[str, Any]] = []
    epoch = interrupts._EPOCH
    stopped: list[bool] = []

    def work(k: int) -> None:
        try:
            for c in todo[k::len(slots)]:
                with lock:
                    limit = stop_limit(timed)
                row = _run_candidate(bundle, c, slots[k], epoch, limit)
                check_epoch(epoch)  # a child killed by the interrupt is not a crash: no row
                writer.write(row)
                with lock:
                    new.append(row)
                    timed.append(row)
        except Stopped:
            stopped.append(True)

    with interrupt_guard(bundle, out):
        writer = RowWriter(out)
        threads: list[threading.Thread] = []
        try:
            if len(slots) == 1:
                work(0)
            else:
                if todo:
                    fork_server(False)  # started here, in the main thread, where signals are handled
                threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(len(slots))]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
        finally:
            for t in threads:  # after an interrupt: each ends as soon as its child is gone
                t.join(10)
            writer.close()
    if stopped:  # interrupted by a signal another thread's guard handled: same exception, this run's counts
        raise Guard(bundle, Path(out)).interrupted(interrupts._STOP_SIGNAL or signal.SIGINT)
    return new


WARM_TIMEOUT_S = 300.0
"""The longest a warm-up child runs (a compile that takes longer is left to the timed run)."""


def warm(bundles: Sequence[str | os.PathLike[str]], parallel: int, gpus: Sequence[int] | None = None) -> int:
    """Compile every candidate of ``bundles`` not measured yet, ``parallel`` children at once (spread over the
    GPUs), each compiled and checked once and never timed: Triton's cache and Inductor's FX graph cache are on
    disk, so the timed run that follows (one child at a time per GPU, nothing else running) loads what was
    compiled instead of compiling while the card waits. No row is written; a failure here is the timed run's
    to record. Returns how many children ran. Under :func:`interrupt_guard` like :func:`run_bundle`."""
    gpus = _visible_gpus() if gpus is None else list(gpus)
    jobs = []
    for b in bundles:
        bundle = Path(b).resolve()
        done = {r.get("id") for r in read_rows(bundle / ROWS_NAME)}
        jobs += [(bundle, c) for c in load_manifest(bundle) if c["id"] not in done]
    if not jobs or parallel < 2 or not gpus:
        return 0
    epoch = interrupts._EPOCH
    queue = list(reversed(jobs))
    lock = threading.Lock()
    stopped: list[bool] = []

    def work(k: int) -> None:
        gpu = gpus[k % len(gpus)]
        try:
            while True:
                with lock:
                    if not queue:
                        return
                    bundle, cand = queue.pop()
                _run_candidate(bundle, {**cand, "timeout_s": min(float(cand.get("timeout_s", DEFAULT_TIMEOUT_S)),
                                                                 WARM_TIMEOUT_S)}, gpu, epoch, warm=True)
                check_epoch(epoch)
        except Stopped:
            stopped.append(True)

    first = Path(jobs[0][0])
    with interrupt_guard(first, first / ROWS_NAME):
        fork_server(gpus[0] is None)  # started here, in the main thread, where signals are handled
        threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(min(parallel, len(jobs)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if stopped:
        raise Guard(first, first / ROWS_NAME).interrupted(interrupts._STOP_SIGNAL or signal.SIGINT)
    return len(jobs)
