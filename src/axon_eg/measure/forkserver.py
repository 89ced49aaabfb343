"""The phase-2 fork servers (part of :mod:`axon_eg.measure.worker`).

Parent side: :class:`_Server` starts ``python -c _BOOT`` in its own session (the parent's ``sys.path`` and
environment, nothing of its ``__main__``), sends it ``run`` / ``kill`` commands as JSON lines and reads its
replies (ready, pid, exit) on a daemon thread; :func:`fork_server` keeps one per ``TRITON_INTERPRET`` value,
:func:`stop_servers` ends them (at exit too). Server side: :func:`_serve` preloads numpy, torch and triton,
forks one child per command and reaps it (SIGKILLing what is left of its process group);
:func:`_fork_child` is the forked child's set-up before it runs :func:`axon_eg.measure.child.run_child`.
Standard library only.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from axon_eg.measure.child import run_child

_PRELOAD = ["numpy", "torch", "triton", "triton.language", "triton.testing", "axon_eg.measure.harness",
            "axon_eg.measure.integrity",
            "axon_eg.backends.triton.interpreter", "torch._dynamo", "torch._inductor.compile_fx"]
"""Imported once by the server, so no child imports them again: a torch.compile baseline's child spent 1.3 s
(this 2-core machine) importing dynamo and Inductor, and a GPU box's child 4 to 5 s importing Inductor's config
alone (H100, 2026-12-07: each eager child took 5 to 8 s with that import, 1 to 2 s without)."""
_SERVER_ENV = {
    # A child compiles one graph. Inductor's default starts a compile pool (a process per core) in each child; the
    # warm-up's children already compile in parallel. One thread changes no generated code. Read when Inductor's
    # config is imported: in the server, above.
    "TORCHINDUCTOR_COMPILE_THREADS": "1",
    # torch.cuda.is_available() and device_count() through NVML, which leaves the CUDA driver uninitialized: an
    # import in the server that asks must not make every forked child's CUDA fail.
    "PYTORCH_NVML_BASED_CUDA_CHECK": "1",
}
"""Set in the server's environment (and so its children's) unless the caller's environment sets them."""
_BOOT = "import sys, json; sys.path[:] = json.loads(sys.argv[1]); from axon_eg.measure.forkserver import _serve; _serve()"
"""The server's whole ``-c`` program: the parent's ``sys.path``, then :func:`_serve`. Nothing of the parent's
``__main__`` (a user's script or notebook) is ever imported in the server or in a child."""
SERVER_START_S = 600.0
"""How long the server may take to import numpy, torch and triton before the run gives up."""
SIGNALS = (signal.SIGINT, signal.SIGTERM)


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


SERVERS: dict[str, _Server] = {}
_SERVERS_LOCK = threading.Lock()
_ATEXIT = False

def fork_server(interpret: bool) -> _Server:
    """The running fork server for this kind of child, started on first use. One per value of
    ``TRITON_INTERPRET`` (``@triton.jit`` reads it when triton is imported, i.e. in the server)."""
    global _ATEXIT
    key = "1" if interpret else os.environ.get("TRITON_INTERPRET", "")
    with _SERVERS_LOCK:
        srv = SERVERS.get(key)
        if srv is None or srv.dead:
            if srv is not None:
                srv.stop()  # reap the one that died
            env = {**_SERVER_ENV, **os.environ}
            if interpret:
                env["TRITON_INTERPRET"] = "1"
            main = threading.current_thread() is threading.main_thread()
            if main:  # a signal between the fork and the registration below would orphan the server
                blocked = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
            try:
                srv = SERVERS[key] = _Server(env)
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
        servers = list(SERVERS.values())
        SERVERS.clear()
    for srv in servers:
        srv.stop()


def _forget_servers_after_fork() -> None:
    """In a process forked from this one (by user code, not by us): drop the servers, closing this copy of
    their pipes so that their EOF still comes when the real parent exits. Raw descriptors only: a buffered
    file's lock may be held by the reader thread, which does not exist in the fork."""
    for srv in SERVERS.values():
        for fd in (srv._cmd, srv._reply):
            with contextlib.suppress(OSError):
                os.close(fd)
    SERVERS.clear()


os.register_at_fork(after_in_child=_forget_servers_after_fork)


def _serve() -> None:
    """The fork server's main loop (``python -c _BOOT``, its own session). Preloads numpy, torch and triton
    (never touching CUDA), then forks one child per ``run`` command. A child calls ``setsid`` (its own
    process group, killed as a whole), gets PDEATHSIG=SIGKILL and its stdout/stderr in a file, then runs
    the harness. Reaping a child also SIGKILLs what is left of its group. On EOF of stdin, SIGTERM or
    SIGINT the server SIGKILLs every child's group, reaps them and exits."""
    import importlib
    import select

    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)  # blocked in the parent while it started us
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
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)  # no kill_all between fork and jobs[pid]
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
    os.environ.update({**_SERVER_ENV, **env})  # what the server imported with, unless the caller set it
    if interpret is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = interpret
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu  # before the first CUDA call in this process
    code = 1
    try:
        code = run_child(Path(bundle), cand_id, Path(result_path))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

