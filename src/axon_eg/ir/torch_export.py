"""``torch.export`` for the PyTorch front end (:mod:`axon_eg.ir.torch_import`), and the diagnosis of what goes
wrong: the user's source line of an fx node (the innermost frame outside torch and axon_eg), torch's
logging, warnings and prints captured while it exports (replayed only when a failure cannot be named),
and an export failure turned into one line naming the user's line (data-dependent control flow, a shape
mismatch, anything else torch says).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import sys
import sysconfig
import traceback
import warnings

import torch
from torch.fx.node import Node

from axon_eg.errors import AxonError, ShapeError, UnsupportedOperation

# ------------------------------------------------------------------------------------------------
# Source locations: the innermost stack frame outside torch and axon_eg
# ------------------------------------------------------------------------------------------------
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
_LIBRARY_DIRS = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (torch,)) + (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
)
_STDLIB_DIRS = tuple(os.path.abspath(p) + os.sep for p in {sysconfig.get_path("stdlib"), sysconfig.get_path("purelib"),
                                                            sysconfig.get_path("platlib")} if p)


def node_location(node: Node) -> str | None:
    """``file:line`` of the user code that created ``node`` (from ``meta["stack_trace"]``).

    torch.export keeps only ``forward`` frames, so this is the innermost user ``forward()`` line."""
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    user = [f for f in frames if not os.path.abspath(f[0]).startswith(_LIBRARY_DIRS)]
    if not user:
        return None
    path, line = user[-1]
    return f"{path}:{line}"



class _Captured:
    """torch's log records, warnings and stderr prints while it exports, kept out of the terminal.

    ``replay()`` hands them to the handlers (and stream) they were meant for: done only when an export
    fails with something ``_export_error`` cannot diagnose."""

    def __init__(self) -> None:
        self.records: list[tuple[list[logging.Handler], logging.LogRecord]] = []
        self.stderr = io.StringIO()
        self.warnings: list[warnings.WarningMessage] = []
        self._saved: dict[logging.Logger, list[logging.Handler]] = {}
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> _Captured:
        for logger_name, logger in list(logging.root.manager.loggerDict.items()):
            if isinstance(logger, logging.Logger) and logger.handlers and logger_name.split(".")[0] == "torch":
                self._saved[logger] = logger.handlers[:]
                logger.handlers = [_Keep(self.records, self._saved[logger])]
        self.warnings = self._stack.enter_context(warnings.catch_warnings(record=True))
        warnings.simplefilter("default")
        self._stack.enter_context(contextlib.redirect_stderr(self.stderr))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
        for logger, handlers in self._saved.items():
            logger.handlers = handlers

    def replay(self) -> None:
        for handlers, record in self.records:
            for h in handlers:
                if record.levelno >= h.level:
                    h.handle(record)
        for w in self.warnings:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        sys.stderr.write(self.stderr.getvalue())


class _Keep(logging.Handler):
    def __init__(self, into: list[tuple[list[logging.Handler], logging.LogRecord]], handlers: list[logging.Handler]):
        super().__init__(logging.NOTSET)
        self.into, self.handlers = into, handlers

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append((self.handlers, record))


def export_program(module: torch.nn.Module, args: tuple, name: str) -> torch.export.ExportedProgram:
    """``torch.export.export`` with its logging captured; a failure becomes one line naming the user's line."""
    captured = _Captured()
    with captured:
        try:
            return torch.export.export(module, args)
        except Exception as e:  # noqa: BLE001 - torch raises many kinds; report which module failed
            failure = e
    error = _export_error(failure, name)
    if error is None:  # not understood: show what torch said, then the one line
        captured.replay()
        text = str(failure).strip()
        first = text.splitlines()[0] if text else type(failure).__name__
        error = UnsupportedOperation(f"{name}: torch.export could not trace forward(): {first}")
    raise error from failure


_SHAPE_WORDS = re.compile(r"broadcast|size of tensor|shape|mat1 and mat2|must match|dimension|expected size", re.I)


def _export_error(e: BaseException, name: str) -> AxonError | None:
    """One line for an export failure at a known user line: data-dependent control flow (a Python ``if``
    or ``.item()`` on a tensor's value), a shape mismatch, anything else torch says. None when no user
    line is known (the caller then shows torch's own output)."""
    location, code = _user_frame(e)
    text = str(e).strip()
    first = text.splitlines()[0] if text else type(e).__name__
    at = f" at {location}" + (f" (`{code}`)" if code else "") if location else ""
    guard = getattr(sys.modules.get("torch.fx.experimental.symbolic_shapes"), "GuardOnDataDependentSymNode", ())
    if (guard and isinstance(e, guard)) or "data-dependent" in first or "data dependent" in first:
        return UnsupportedOperation(
            f"{name}: data-dependent control flow is not supported: forward(){at} decides on a tensor's value "
            "(an if/while on a tensor, or .item()); axon_eg imports one fixed computation",
            op="data-dependent control flow", location=location)
    if location is None:
        return None
    if isinstance(e, (RuntimeError, ValueError, IndexError)) and _SHAPE_WORDS.search(first):
        return ShapeError(f"{name}: forward(){at}: {first}")
    return UnsupportedOperation(f"{name}: torch.export could not trace forward(){at}: {type(e).__name__}: {first}",
                                location=location)


def _user_frame(e: BaseException) -> tuple[str | None, str | None]:
    """(``file:line``, source text) of the innermost user frame of ``e`` (or its causes), else of the
    ``File "...", line N`` frames quoted in its message."""
    seen: set[int] = set()
    err: BaseException | None = e
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        frames = [f for f in traceback.extract_tb(err.__traceback__) if _is_user_file(f.filename)]
        if frames:
            return f"{frames[-1].filename}:{frames[-1].lineno}", (frames[-1].line or "").strip() or None
        err = err.__cause__ or err.__context__
    quoted = [m for m in re.finditer(r'File "([^"]+)", line (\d+)[^\n]*\n?([^\n]*)', str(e)) if _is_user_file(m[1])]
    if quoted:
        return f"{quoted[-1][1]}:{quoted[-1][2]}", quoted[-1][3].strip() or None
    return None, None


def _is_user_file(path: str) -> bool:
    return not path.startswith("<") and not os.path.abspath(path).startswith(_LIBRARY_DIRS + _STDLIB_DIRS)

