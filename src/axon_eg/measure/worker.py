"""The phase-2 worker: run every candidate of a bundle in its own child process, one JSON row each.

Imports only the standard library here; numpy, torch and triton are imported once by a fork server
(``multiprocessing`` "forkserver", which never touches CUDA) and each candidate's child is forked from
it, in its own session, so a child starts in milliseconds and a crash or hang kills only that child.
Runs on a bare GPU box. Usage: ``python -m axon_eg.measure BUNDLE --out FILE``.

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
"""

from __future__ import annotations

import argparse
import ast
import datetime as _dt
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

STATUSES = ("ok", "syntax_error", "structure_error", "compile_error", "runtime_error", "wrong_result", "timeout",
            "crashed")
ROW_FIELDS = ("id", "status", "stage", "error", "median_us", "iqr_us", "mean_us", "min_us", "runs", "max_abs_err",
              "max_rel_err", "trials", "device", "torch_version", "triton_version", "python_version", "timestamp",
              "elapsed_s", "source", "entry", "kind", "cache_key", "program", "hw", "target", "predicted_us")
INHERITED = ("limits", "cache_key", "program", "hw", "target")
"""Top-level manifest keys every candidate inherits unless it sets them."""
RESOURCES: dict[str, tuple[str, str]] = {
    "smem_bytes": ("shared memory", " B"),
    "max_warps": ("warps per block", ""),
    "max_block_elems": ("block elements", ""),
    "regs_per_thread": ("registers per thread", ""),
}
"""Display name and unit of the known resource keys (any other key is compared too, named as is)."""
DEFAULT_TIMEOUT_S = 60.0


def _version(pkg: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat()


def load_manifest(bundle: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The bundle's candidates, each with the top-level ``INHERITED`` keys filled in."""
    data = json.loads((Path(bundle) / "manifest.json").read_text())
    cands = data["candidates"] if isinstance(data, dict) else data
    if isinstance(data, dict):
        header = {k: data[k] for k in INHERITED if k in data}
        cands = [{**header, **c} for c in cands]
    ids = [c["id"] for c in cands]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ValueError(f"duplicate candidate ids in manifest: {sorted(dup)}")
    return cands


def read_rows(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Complete rows of a JSON-lines file; a partial or unparsable line is ignored."""
    rows = []
    p = Path(path)
    if not p.exists():
        return rows
    for line in p.read_text().splitlines(keepends=True):
        if not line.endswith("\n"):
            break
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


class RowWriter:
    """Append-only JSON-lines writer: one write, flush and fsync per row, under a lock."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():  # drop a partially written last line left by a killed run
            data = self.path.read_bytes()
            if data and not data.endswith(b"\n"):
                with open(self.path, "r+b") as f:
                    f.truncate(data.rfind(b"\n") + 1)
                    os.fsync(f.fileno())
        self._f = open(self.path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, row: dict[str, Any]) -> None:
        line = json.dumps(row, default=str) + "\n"
        with self._lock:
            self._f.write(line)
            self._f.flush()
            os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


def candidate_files(cand: dict[str, Any]) -> list[str]:
    """Bundle-relative files a candidate needs: its source and its reference file."""
    return [cand["source"], str(cand["reference"]).partition(":")[0]]


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def check_structure(cand: dict[str, Any]) -> str | None:
    """Why the candidate's static ``resources`` exceed the ``limits`` (None when within them)."""
    limits, used = cand.get("limits") or {}, cand.get("resources") or {}
    launch = used.get("launch")
    problems = []
    for key, value in used.items():
        limit = limits.get(key)
        if not (_is_number(value) and _is_number(limit)) or value <= limit:
            continue
        name, unit = RESOURCES.get(key, (key, ""))
        where = launch.get(key) if isinstance(launch, dict) else launch
        problems.append(f"{name} {_fmt(value)}{unit} > limit {_fmt(limit)}{unit}" + (f" (launch {where})" if where else ""))
    return "; ".join(problems) or None


def make_row(cand: dict[str, Any], device: str, **fields: Any) -> dict[str, Any]:
    row = dict.fromkeys(ROW_FIELDS)
    meta = cand.get("meta") if isinstance(cand.get("meta"), dict) else {}
    row.update(id=cand["id"], source=cand.get("source"), entry=cand.get("entry"), device=device,
               torch_version=_version("torch"), triton_version=_version("triton"),
               python_version=platform.python_version(), timestamp=_now(), kind=cand.get("kind"),
               cache_key=cand.get("cache_key"), program=cand.get("program"), hw=cand.get("hw"),
               target=cand.get("target"), predicted_us=cand.get("predicted_us", meta.get("predicted_us")))
    row.update({k: v for k, v in fields.items() if k in ROW_FIELDS})
    return row


def static_check(bundle: Path, cand: dict[str, Any], device: str = "cpu") -> dict[str, Any] | None:
    """The stages that need no child: syntax, then structure. A row when the candidate fails one, else None."""
    t0 = time.monotonic()
    src_path = Path(bundle) / cand["source"]
    try:
        ast.parse(src_path.read_text(), filename=str(src_path))
    except SyntaxError as exc:
        return make_row(cand, device, status="syntax_error", stage="syntax", error=f"{type(exc).__name__}: {exc}",
                    elapsed_s=time.monotonic() - t0)
    except OSError as exc:
        return make_row(cand, device, status="compile_error", stage="syntax", error=f"cannot read source: {exc}",
                    elapsed_s=time.monotonic() - t0)
    too_big = check_structure(cand)
    if too_big:
        return make_row(cand, device, status="structure_error", stage="structure", error=too_big,
                    elapsed_s=time.monotonic() - t0)
    return None


def run_candidate(bundle: Path, cand: dict[str, Any], gpu: int | str | None = None) -> dict[str, Any]:
    """Check and run one candidate; always returns a row, never raises for a bad candidate. ``gpu`` is the
    (physical) CUDA device the child may see; None runs on the CPU with ``TRITON_INTERPRET=1``."""
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
        ctx = _context(gpu is None)
        proc = ctx.Process(target=_fork_child, args=(str(bundle), cand["id"], str(result_path), str(err_path),
                                                     None if gpu is None else str(gpu)), daemon=False)
        proc.start()
        proc.join(timeout)
        if proc.exitcode is None:
            _kill_tree(proc)
            return make_row(cand, device, status="timeout", stage="run", error=f"killed after {timeout:g} s",
                            elapsed_s=time.monotonic() - t0)
        stderr_tail = err_path.read_text(errors="replace")[-4000:] if err_path.exists() else ""
        if result_path.exists():
            res = json.loads(result_path.read_text())
            return make_row(cand, res.pop("device", device), **res, elapsed_s=time.monotonic() - t0)
        rc = proc.exitcode
        how = f"killed by signal {signal.Signals(-rc).name}" if rc < 0 else f"exited with code {rc}"
        return make_row(cand, device, status="crashed", stage="run", error=f"child {how}; stderr: {stderr_tail}",
                        elapsed_s=time.monotonic() - t0)


_PRELOAD = ["numpy", "torch", "triton", "triton.language", "axon_eg.measure.harness"]


def _context(cpu: bool) -> Any:
    """A fork server that has imported numpy, torch and triton once (never touching CUDA), so each
    candidate's child starts in milliseconds instead of re-importing torch. Without a GPU the server
    must import triton with TRITON_INTERPRET=1 (``@triton.jit`` decides at import time)."""
    import multiprocessing as mp

    if cpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return ctx


def _kill_tree(proc: Any) -> None:
    """SIGKILL the child's whole session (it calls setsid first), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.join(10)


def _fork_child(bundle: str, cand_id: str, result_path: str, err_path: str, gpu: str | None) -> None:
    """Runs in a process forked from the fork server: own session, stdout/stderr to a file, the one
    GPU it may use, then the harness. Exits through os._exit so nothing of the server runs again."""
    os.setsid()
    fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu  # before the first CUDA call in this process
    code = 1
    try:
        code = _child(Path(bundle), cand_id, Path(result_path))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


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
    one child at a time) per GPU; sequential on CPU."""
    bundle = Path(bundle).resolve()
    cands = load_manifest(bundle)
    if ids is not None:
        want = set(ids)
        cands = [c for c in cands if c["id"] in want]
    writer = RowWriter(out)
    done = {r.get("id") for r in read_rows(out)}
    todo = [c for c in cands if c["id"] not in done]
    gpus = _visible_gpus() if gpus is None else list(gpus)
    slots: list[int | None] = list(gpus) or [None]
    new: list[dict[str, Any]] = []

    def work(k: int) -> None:
        for c in todo[k::len(slots)]:
            row = run_candidate(bundle, c, slots[k])
            writer.write(row)
            new.append(row)

    try:
        if len(slots) == 1:
            work(0)
        else:
            threads = [threading.Thread(target=work, args=(k,)) for k in range(len(slots))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        writer.close()
    return new


# ----------------------------------------------------------------------------------------------- child side


def _load_reference(bundle: Path, cand: dict[str, Any]) -> Any:
    import importlib.util

    import numpy as np

    ref = cand["reference"]
    if ref.endswith(".npz"):
        data = np.load(bundle / ref)
        seeds: dict[int, list[Any]] = {}
        for key in data.files:
            s, j = key.removeprefix("seed").split("_out")
            seeds.setdefault(int(s), []).append((int(j), data[key]))
        return {s: [a for _, a in sorted(v, key=lambda p: p[0])] for s, v in seeds.items()}
    path, _, name = ref.partition(":")
    spec = importlib.util.spec_from_file_location("axon_eg_reference", bundle / path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name or "reference")


def _interpreter_fixes() -> None:
    """Under TRITON_INTERPRET=1 only: the interpreter work-arounds, when axon_eg's backends are installed
    (a bare GPU box running a bundle needs none)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    try:
        from axon_eg.backends.triton import interpreter
    except ImportError:
        return
    interpreter.apply()


def _child(bundle: Path, cand_id: str, result_path: Path) -> int:
    import faulthandler
    import importlib.util
    import traceback

    faulthandler.enable()
    import numpy  # noqa: F401
    import torch

    from axon_eg.measure import harness

    try:
        import triton  # noqa: F401
    except ImportError:
        pass
    cand = next(c for c in load_manifest(bundle) if c["id"] == cand_id)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dev_name = torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu"

    def finish(res: dict[str, Any]) -> int:
        res["device"] = f"{device} ({dev_name})"
        tmp = result_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(res, default=str))
        os.replace(tmp, result_path)
        return 0

    try:
        reference = _load_reference(bundle, cand)
    except Exception:
        return finish({"status": "crashed", "stage": "reference", "error": traceback.format_exc()[-4000:]})
    try:
        src = bundle / cand["source"]
        spec = importlib.util.spec_from_file_location(f"axon_eg_candidate_{cand_id}", src)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        _interpreter_fixes()
        spec.loader.exec_module(mod)
        fn = getattr(mod, cand.get("entry", "kernel"))
    except BaseException:
        return finish({"status": "compile_error", "stage": "compile", "error": traceback.format_exc()[-4000:]})
    try:
        res = harness.measure(fn, cand["inputs"], reference, seed=int(cand.get("seed", 0)),
                              trials=int(cand.get("trials", harness.MIN_TRIALS)), device=device,
                              mode=cand.get("mode", "auto"), out_dtypes=cand.get("out_dtypes"),
                              time_wrong=bool(cand.get("time_wrong", False)))
    except Exception:
        return finish({"status": "crashed", "stage": "harness", "error": traceback.format_exc()[-4000:]})
    return finish(res.as_dict())


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m axon_eg.measure", description=__doc__.splitlines()[0])
    ap.add_argument("bundle", help="bundle directory with manifest.json and sources")
    ap.add_argument("--out", required=True, help="JSON-lines file of result rows (appended; resumable)")
    ap.add_argument("--cpu", action="store_true", help="ignore GPUs, run sequentially on the CPU")
    ap.add_argument("--ray", metavar="ADDRESS", help="run candidates as Ray tasks on the cluster at ADDRESS "
                    "(\"local\": start a local one; \"auto\": the running one)")
    args = ap.parse_args(argv)
    if args.ray:
        from axon_eg.measure.ray_runner import run_bundle_ray

        rows = run_bundle_ray(args.bundle, args.out, args.ray)
    else:
        rows = run_bundle(args.bundle, args.out, gpus=[] if args.cpu else None)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print(json.dumps({"new_rows": len(rows), "statuses": counts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
