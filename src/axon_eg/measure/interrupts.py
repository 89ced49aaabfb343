"""SIGINT and SIGTERM during phase 2, and Ctrl-C during phase 1 (part of :mod:`axon_eg.measure.worker`).

While :func:`interrupt_guard` is active (main thread only), either signal stops the fork servers, so every
child's process group dies, bumps ``_EPOCH`` so that runs started before it write no more rows, and
raises :class:`Interrupted` (a ``KeyboardInterrupt``) with the count of kernels that have a row. Inside
:func:`phase_one`, Ctrl-C raises :class:`PhaseOneInterrupted` naming the program and the stage. Both print
one line when uncaught (no traceback). Standard library only.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from axon_eg.measure.forkserver import SERVERS, SIGNALS
from axon_eg.measure.manifest import load_manifest, read_rows

_EPOCH = 0
"""Incremented by every interrupt; a run that started in an older epoch stops instead of writing rows."""
_STOP_SIGNAL: int | None = None


class Stopped(BaseException):
    """In a worker thread: this run was interrupted (by a signal handled in the main thread); write nothing more."""


class OneLineInterrupt(KeyboardInterrupt):
    """An interrupt that says what was stopped in one line: ``str()`` is the line to print, ``exit_code`` is
    128 + the signal number. A ``KeyboardInterrupt``, so code that catches ``Exception`` does not swallow it;
    an uncaught one prints that line only (no traceback; :func:`uncaught_as_one_line`) and the process ends
    by the signal (exit status 130 / 143 in a shell); in IPython it renders as that line."""

    signum: int = signal.SIGINT

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def _render_traceback_(self) -> list[str]:  # IPython / Jupyter: the one line instead of a traceback
        return [str(self)]


class Interrupted(OneLineInterrupt):
    """Phase 2 was interrupted by SIGINT or SIGTERM: every child's process group and the fork servers are
    killed, the rows written so far are kept (a rerun measures only the rest)."""

    def __init__(self, signum: int, done: int, total: int, rows: str | os.PathLike[str]) -> None:
        self.signum, self.done, self.total, self.rows = signum, done, total, Path(rows)
        super().__init__(str(self))

    def __str__(self) -> str:
        return (f"axon-eg: interrupted ({signal.Signals(self.signum).name}) after {self.done} of {self.total} kernels; "
                f"rows kept in {self.rows}; run again to resume")

    def __reduce__(self) -> tuple[Any, ...]:
        return (Interrupted, (self.signum, self.done, self.total, str(self.rows)))


class PhaseOneInterrupted(OneLineInterrupt):
    """Phase 1 (loading, saturation, enumeration, emission: all in this process) was interrupted by Ctrl-C.
    Nothing was measured and no table was written; the bundle files written so far are replaced by the next
    run, which starts phase 1 over."""

    def __init__(self, program: str, stage: str) -> None:
        self.program, self.stage = program, stage
        super().__init__(str(self))

    def __str__(self) -> str:
        return (f"axon-eg: interrupted (SIGINT) during {self.stage} of {self.program}; nothing was measured or "
                "stored; run again to start over")

    def __reduce__(self) -> tuple[Any, ...]:
        return (PhaseOneInterrupted, (self.program, self.stage))


def uncaught_as_one_line() -> None:
    """An uncaught :class:`OneLineInterrupt` in a plain script prints its line only (the excepthook below),
    unless the caller installed an excepthook of its own."""
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = _excepthook


@contextlib.contextmanager
def phase_one(program: str, stage: Callable[[], str]) -> Iterator[None]:
    """Ctrl-C inside the block (phase 1) raises :class:`PhaseOneInterrupted` naming ``program`` and the stage
    ``stage()`` says it was in; an interrupt of phase 2 (:class:`Interrupted`) passes through as it is."""
    try:
        yield
    except OneLineInterrupt:
        raise
    except KeyboardInterrupt:
        uncaught_as_one_line()
        raise PhaseOneInterrupted(program, stage()) from None


class Guard:
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


_GUARD: Guard | None = None


def _interrupt(signum: int) -> None:
    """Stop everything phase 2 started, without taking a lock: rows of a run from an older epoch are not written."""
    global _EPOCH, _STOP_SIGNAL
    _EPOCH += 1
    _STOP_SIGNAL = signum
    servers = list(SERVERS.values())
    SERVERS.clear()
    for srv in servers:
        srv.stop(hard=True)


def check_epoch(epoch: int) -> None:
    """Raise :class:`Stopped` when this run was interrupted since ``epoch``."""
    if epoch != _EPOCH:
        raise Stopped


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
    uncaught_as_one_line()
    raise exc


def _excepthook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
    """An uncaught :class:`OneLineInterrupt` (a plain script): its one line, exit functions, then death by its
    signal."""
    if not isinstance(value, OneLineInterrupt):
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
    guard = Guard(Path(bundle), Path(out))
    for s in SIGNALS:
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
