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
import atexit
import contextlib
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
from collections.abc import Iterable, Iterator, Sequence
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
    (physical) CUDA device the child may see; None runs on the CPU with ``TRITON_INTERPRET=1``. The child is
    forked by the fork server (see :func:`_serve`); an interrupt raises (see :func:`interrupt_guard`)."""
    return _run_candidate(bundle, cand, gpu, _EPOCH)


def _run_candidate(bundle: Path, cand: dict[str, Any], gpu: int | str | None, epoch: int) -> dict[str, Any]:
    """:func:`run_candidate` for a run that started in ``epoch``: raises :class:`_Stopped` once it is over."""
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
        server = _server(gpu is None)
        t0 = time.monotonic()  # the child's clock starts at its fork, not while the server preloads
        _check_epoch(epoch)
        job = server.start(str(bundle), cand["id"], str(result_path), str(err_path), None if gpu is None else str(gpu))
        finished = job.done.wait(timeout)
        _check_epoch(epoch)
        if not finished:
            server.kill(job)
            job.done.wait(10)
            _check_epoch(epoch)
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


# ------------------------------------------------------------------------------------------- the fork server

_PRELOAD = ["numpy", "torch", "triton", "triton.language", "axon_eg.measure.harness",
            "axon_eg.backends.triton.interpreter"]
_BOOT = "import sys, json; sys.path[:] = json.loads(sys.argv[1]); from axon_eg.measure.worker import _serve; _serve()"
"""The server's whole ``-c`` program: the parent's ``sys.path``, then :func:`_serve`. Nothing of the parent's
``__main__`` (a user's script or notebook) is ever imported in the server or in a child."""
SERVER_START_S = 600.0
"""How long the server may take to import numpy, torch and triton before the run gives up."""
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Job:
    """One candidate's child as the parent sees it: its pid once forked, its exit code once reaped by the
    server (negative: killed by that signal; None with ``done`` set: the server went away)."""

    def __init__(self, tag: int) -> None:
        self.tag = tag
        self.pid: int | None = None
        self.rc: int | None = None
        self.done = threading.Event()


class _Server:
    """Parent side of one fork server: ``python -c _BOOT`` in its own session, commands as JSON lines on its
    stdin, replies (ready, pid, exit) on its stdout read by a daemon thread, its stderr in a temporary file.
    EOF on its stdin (this process exits or dies, even by SIGKILL) makes it kill its children and exit."""

    def __init__(self, env: dict[str, str]) -> None:
        if not sys.executable:
            raise RuntimeError("phase 2 needs a Python interpreter to start its fork server (sys.executable is empty)")
        self.log = tempfile.TemporaryFile(prefix="axon_eg_server_")  # closed with this object
        flags = getattr(subprocess, "_args_from_interpreter_flags", list)()
        cmd_r, self._cmd = os.pipe()  # raw descriptors (no buffered file objects: see _forget_servers_after_fork)
        self._reply, reply_w = os.pipe()
        try:
            self.proc = subprocess.Popen([sys.executable, *flags, "-c", _BOOT, json.dumps(sys.path)], stdin=cmd_r,
                                         stdout=reply_w, stderr=self.log, env=env, start_new_session=True)
        except BaseException:
            for fd in (self._cmd, self._reply):
                os.close(fd)
            raise
        finally:
            os.close(cmd_r)
            os.close(reply_w)
        self.pid = self.proc.pid
        self.ready = threading.Event()
        self.dead = False
        self._jobs: dict[int, _Job] = {}
        self._tag = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._read, name="axon_eg-server-reader", daemon=True).start()

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                data = os.read(self._reply, 1 << 16)
            except OSError:
                data = b""
            if not data:
                break
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                self._dispatch(line)
        self.dead = True  # EOF: the server exited; nothing it ran is alive any more
        with contextlib.suppress(OSError):
            os.close(self._reply)
        self._close_cmd()
        for job in list(self._jobs.values()):
            job.done.set()
        self.ready.set()

    def _close_cmd(self) -> None:
        """Close the command pipe once, under the lock, so that no thread writes to a reused descriptor."""
        with self._lock:
            if self._cmd >= 0:
                with contextlib.suppress(OSError):
                    os.close(self._cmd)
                self._cmd = -1

    def _dispatch(self, line: bytes) -> None:
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            return
        if "ready" in msg:
            self.ready.set()
            return
        job = self._jobs.get(msg.get("tag", -1))
        if job is None:
            return
        if "pid" in msg:
            job.pid = int(msg["pid"])
        elif "exit" in msg:
            job.rc = int(msg["exit"])
            self._jobs.pop(job.tag, None)
            job.done.set()

    def wait_ready(self) -> None:
        if not self.ready.wait(SERVER_START_S) or self.dead:
            self.stop()
            raise RuntimeError(f"the phase-2 fork server did not start ({self.log_tail()})")

    def start(self, bundle: str, cand_id: str, result: str, err: str, gpu: str | None) -> _Job:
        """Fork one child for ``cand_id``; it runs with this process's current environment."""
        with self._lock:
            self._tag += 1
            job = self._jobs[self._tag] = _Job(self._tag)
            self._send({"op": "run", "tag": job.tag, "bundle": bundle, "cand": cand_id, "result": result, "err": err,
                        "gpu": gpu, "env": dict(os.environ)})
        return job

    def kill(self, job: _Job) -> None:
        """SIGKILL the job's process group (the server does it: only it knows whether the pid is still its child)."""
        with self._lock:
            self._send({"op": "kill", "tag": job.tag})

    def _send(self, msg: dict[str, Any]) -> None:
        """Under the lock. A server that is gone drops the message: its reader sees EOF and releases every job."""
        data = (json.dumps(msg) + "\n").encode()
        with contextlib.suppress(OSError):
            while data and self._cmd >= 0:
                data = data[os.write(self._cmd, data):]

    def stop(self, hard: bool = False) -> None:
        """End the server and, through it, every child's process group. ``hard`` (from a signal handler, which
        must not take locks): SIGTERM instead of closing its stdin. SIGKILL if it has not exited in 5 s.
        The reader thread closes the pipes when it sees the server's EOF."""
        if hard:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGTERM)
        else:
            self._close_cmd()  # EOF on the server's stdin
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            for job in list(self._jobs.values()):  # a stuck server: its children die by PDEATHSIG too
                if job.pid is not None:
                    with contextlib.suppress(OSError):
                        os.killpg(job.pid, signal.SIGKILL)
            self.proc.kill()
            self.proc.wait()

    def log_tail(self) -> str:
        try:
            self.log.seek(0)
            text = self.log.read().decode(errors="replace").strip()
        except (OSError, ValueError):
            text = ""
        return f"exit code {self.proc.poll()}" + (f"; its stderr: {text[-2000:]}" if text else "")


_SERVERS: dict[str, _Server] = {}
_SERVERS_LOCK = threading.Lock()
_EPOCH = 0
"""Incremented by every interrupt; a run that started in an older epoch stops instead of writing rows."""
_STOP_SIGNAL: int | None = None
_ATEXIT = False


class _Stopped(BaseException):
    """In a worker thread: this run was interrupted (by a signal handled in the main thread); write nothing more."""


def _server(interpret: bool) -> _Server:
    """The running fork server for this kind of child, started on first use. One per value of
    ``TRITON_INTERPRET`` (``@triton.jit`` reads it when triton is imported, i.e. in the server)."""
    global _ATEXIT
    key = "1" if interpret else os.environ.get("TRITON_INTERPRET", "")
    with _SERVERS_LOCK:
        srv = _SERVERS.get(key)
        if srv is None or srv.dead:
            if srv is not None:
                srv.stop()  # reap the one that died
            env = dict(os.environ)
            if interpret:
                env["TRITON_INTERPRET"] = "1"
            main = threading.current_thread() is threading.main_thread()
            if main:  # a signal between the fork and the registration below would orphan the server
                blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
            try:
                srv = _SERVERS[key] = _Server(env)
            finally:
                if main:
                    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            if not _ATEXIT:
                _ATEXIT = atexit.register(stop_servers) is not None
    srv.wait_ready()
    return srv


def stop_servers() -> None:
    """Stop every fork server (and so every child). Runs at exit; the next candidate starts a new one."""
    with _SERVERS_LOCK:
        servers = list(_SERVERS.values())
        _SERVERS.clear()
    for srv in servers:
        srv.stop()


def _forget_servers_after_fork() -> None:
    """In a process forked from this one (by user code, not by us): drop the servers, closing this copy of
    their pipes so that their EOF still comes when the real parent exits. Raw descriptors only: a buffered
    file's lock may be held by the reader thread, which does not exist in the fork."""
    for srv in _SERVERS.values():
        for fd in (srv._cmd, srv._reply):
            with contextlib.suppress(OSError):
                os.close(fd)
    _SERVERS.clear()


os.register_at_fork(after_in_child=_forget_servers_after_fork)


def _serve() -> None:
    """The fork server's main loop (``python -c _BOOT``, its own session). Preloads numpy, torch and triton
    (never touching CUDA), then forks one child per ``run`` command. A child calls ``setsid`` (its own
    process group, killed as a whole), gets PDEATHSIG=SIGKILL and its stdout/stderr in a file, then runs
    the harness. Reaping a child also SIGKILLs what is left of its group. On EOF of stdin, SIGTERM or
    SIGINT the server SIGKILLs every child's group, reaps them and exits."""
    import importlib
    import select

    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)  # blocked in the parent while it started us
    for name in _PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - reported by the child that needs it
            pass
    jobs: dict[int, int] = {}  # child pid -> tag

    def kill_all() -> None:
        for pid in list(jobs):
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        for pid in list(jobs):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)

    def die(*_: Any) -> None:
        kill_all()
        os._exit(0)

    def send(msg: dict[str, Any]) -> None:
        try:
            os.write(1, (json.dumps(msg) + "\n").encode())
        except OSError:  # the parent is gone
            die()

    def reap() -> None:
        while True:
            try:  # WNOWAIT: the exited child stays a zombie, so its pid (the group id) cannot be reused yet
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid == 0:
                return
            with contextlib.suppress(OSError):
                os.killpg(info.si_pid, signal.SIGKILL)  # whatever the child left running in its group
            _, status = os.waitpid(info.si_pid, 0)
            tag = jobs.pop(info.si_pid, None)
            if tag is not None:
                send({"tag": tag, "exit": os.waitstatus_to_exitcode(status)})

    def fork(msg: dict[str, Any]) -> None:
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)  # no kill_all between fork and jobs[pid]
        pid = os.fork()
        if pid == 0:
            try:
                signal.set_wakeup_fd(-1)
                for s in (signal.SIGCHLD, signal.SIGTERM):
                    signal.signal(s, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.default_int_handler)
                os.close(rfd)
                os.close(wfd)
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
                _fork_child(msg["bundle"], msg["cand"], msg["result"], msg["err"], msg["gpu"], msg["env"])
            finally:
                os._exit(1)
        jobs[pid] = msg["tag"]
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        send({"tag": msg["tag"], "pid": pid})

    rfd, wfd = os.pipe()
    os.set_blocking(rfd, False)
    os.set_blocking(wfd, False)
    signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a Python handler, so that SIGCHLD writes to the wakeup fd
    signal.signal(signal.SIGTERM, die)
    signal.signal(signal.SIGINT, die)
    send({"ready": os.getpid()})
    buf = b""
    while True:
        readable, _, _ = select.select([0, rfd], [], [])
        if rfd in readable:
            with contextlib.suppress(BlockingIOError):
                while os.read(rfd, 512):
                    pass
        reap()
        if 0 not in readable:
            continue
        data = os.read(0, 1 << 16)
        if not data:  # EOF: the parent exited, died or stopped us
            break
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            msg = json.loads(line)
            if msg["op"] == "run":
                fork(msg)
                continue
            pid = next((p for p, t in jobs.items() if t == msg["tag"]), None)  # "kill"
            if pid is not None:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
    kill_all()


def _fork_child(bundle: str, cand_id: str, result_path: str, err_path: str, gpu: str | None, env: dict[str, str]) -> None:
    """Runs in a process forked from the fork server: own session, death with the server, stdin from
    /dev/null, stdout/stderr to a file, the parent's environment (with the server's ``TRITON_INTERPRET``),
    the one GPU it may use, then the harness. Exits through os._exit so nothing of the server runs again."""
    server = os.getppid()
    os.setsid()
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != server:  # the server died before prctl took effect
            os._exit(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    interpret = os.environ.get("TRITON_INTERPRET")
    os.environ.clear()
    os.environ.update(env)
    if interpret is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = interpret
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu  # before the first CUDA call in this process
    code = 1
    try:
        code = _child(Path(bundle), cand_id, Path(result_path))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


# ----------------------------------------------------------------------------------------------- signals


class Interrupted(KeyboardInterrupt):
    """Phase 2 was interrupted by SIGINT or SIGTERM: every child's process group and the fork servers are
    killed, the rows written so far are kept (a rerun measures only the rest). ``str()`` is the one line
    to print; ``exit_code`` is 128 + the signal number. A ``KeyboardInterrupt``, so code that catches
    ``Exception`` does not swallow it; an uncaught one prints that line only (no traceback) and the
    process ends by the signal (exit status 130 / 143 in a shell); in IPython it renders as that line."""

    def __init__(self, signum: int, done: int, total: int, rows: str | os.PathLike[str]) -> None:
        self.signum, self.done, self.total, self.rows = signum, done, total, Path(rows)
        super().__init__(str(self))

    def __str__(self) -> str:
        return (f"axon-eg: interrupted ({signal.Signals(self.signum).name}) after {self.done} of {self.total} kernels; "
                f"rows kept in {self.rows}; run again to resume")

    def __reduce__(self) -> tuple[Any, ...]:
        return (Interrupted, (self.signum, self.done, self.total, str(self.rows)))

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def _render_traceback_(self) -> list[str]:  # IPython / Jupyter: the one line instead of a traceback
        return [str(self)]


class _Guard:
    def __init__(self, bundle: Path, out: Path) -> None:
        self.out = out
        try:
            self.ids = {c["id"] for c in load_manifest(bundle)}
        except (OSError, ValueError, KeyError):
            self.ids = set()
        self.previous: dict[int, Any] = {}
        self.fired = False

    def progress(self) -> tuple[int, int]:
        """(kernels of the bundle with a row in ``out``, kernels of the bundle)."""
        return len(self.ids & {r.get("id") for r in read_rows(self.out)}), len(self.ids)

    def interrupted(self, signum: int) -> Interrupted:
        return Interrupted(signum, *self.progress(), self.out)


_GUARD: _Guard | None = None


def _interrupt(signum: int) -> None:
    """Stop everything phase 2 started, without taking a lock: rows of a run from an older epoch are not written."""
    global _EPOCH, _STOP_SIGNAL
    _EPOCH += 1
    _STOP_SIGNAL = signum
    servers = list(_SERVERS.values())
    _SERVERS.clear()
    for srv in servers:
        srv.stop(hard=True)


def _check_epoch(epoch: int) -> None:
    """Raise :class:`_Stopped` when this run was interrupted since ``epoch``."""
    if epoch != _EPOCH:
        raise _Stopped


def _on_signal(signum: int, frame: Any) -> None:
    g = _GUARD
    if g is None or g.fired:  # a second signal while the first one is being handled
        return
    g.fired = True
    _interrupt(signum)
    exc = g.interrupted(signum)
    prev = g.previous.get(signum)
    if callable(prev) and prev is not signal.default_int_handler:
        prev(signum, frame)  # the caller's own handler, after the children are gone
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = _excepthook
    raise exc


def _excepthook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
    """An uncaught :class:`Interrupted` (a plain script): its one line, exit functions, then death by its signal."""
    if not isinstance(value, Interrupted):
        sys.__excepthook__(kind, value, tb)
        return
    print(value, file=sys.stderr)
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    signal.signal(value.signum, signal.SIG_DFL)
    os.kill(os.getpid(), value.signum)
    os._exit(value.exit_code)


@contextlib.contextmanager
def interrupt_guard(bundle: str | os.PathLike[str], out: str | os.PathLike[str]) -> Iterator[None]:
    """While phase 2 runs: SIGINT and SIGTERM kill every child's process group and the fork servers, then
    raise :class:`Interrupted` (counting the bundle's kernels with a row in ``out``). The previous handlers
    come back on exit; a previous Python handler is called (after the kill) before the raise; an ignored
    signal stays ignored. Re-entrant (an inner guard does nothing); a no-op outside the main thread."""
    global _GUARD
    if _GUARD is not None or threading.current_thread() is not threading.main_thread():
        yield
        return
    guard = _Guard(Path(bundle), Path(out))
    for s in _SIGNALS:
        prev = signal.getsignal(s)
        if prev is not signal.SIG_IGN:
            guard.previous[s] = prev
            signal.signal(s, _on_signal)
    _GUARD = guard
    try:
        yield
    finally:
        _GUARD = None
        for s, prev in guard.previous.items():
            signal.signal(s, prev if prev is not None else signal.SIG_DFL)


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
    done = {r.get("id") for r in read_rows(out)}
    todo = [c for c in cands if c["id"] not in done]
    gpus = _visible_gpus() if gpus is None else list(gpus)
    slots: list[int | None] = list(gpus) or [None]
    new: list[dict[str, Any]] = []
    epoch = _EPOCH
    stopped: list[bool] = []

    def work(k: int) -> None:
        try:
            for c in todo[k::len(slots)]:
                row = _run_candidate(bundle, c, slots[k], epoch)
                _check_epoch(epoch)  # a child killed by the interrupt is not a crash: no row
                writer.write(row)
                new.append(row)
        except _Stopped:
            stopped.append(True)

    with interrupt_guard(bundle, out):
        writer = RowWriter(out)
        threads: list[threading.Thread] = []
        try:
            if len(slots) == 1:
                work(0)
            else:
                if todo:
                    _server(False)  # started here, in the main thread, where signals are handled
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
        raise _Guard(bundle, Path(out)).interrupted(_STOP_SIGNAL or signal.SIGINT)
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
        try:
            rows = run_bundle(args.bundle, args.out, gpus=[] if args.cpu else None)
        except Interrupted as exc:
            print(exc, file=sys.stderr)
            return exc.exit_code
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print(json.dumps({"new_rows": len(rows), "statuses": counts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
