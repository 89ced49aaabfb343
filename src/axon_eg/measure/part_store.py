"""The Parquet part files behind the result tables (part of :mod:`axon_eg.measure.tables`): the cache directory
and its writability check, staging a part under a hidden name with the checksum in its final name, and reading
one part back with every check of ``tables``' docstring (checksum, full decode, required columns, strict
casts), moving a damaged part to ``damaged/`` with one ``DamagedPartWarning``. Parts are immutable, so a
checked part is remembered (``MEMO``) by path, size and modification time.
"""


from __future__ import annotations

import hashlib
import io
import os
import re
import tempfile
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from axon_eg.errors import AxonError
from axon_eg.measure.table_schemas import REQUIRED, SCHEMAS, conform

CHECKSUM = re.compile(r"\.([0-9a-f]{16})\.parquet$")
"""The checksum in a part's name: the first 16 hex digits of the SHA-256 of its bytes."""
DAMAGED = "damaged"
"""Sub-directory of a table where unreadable parts are moved."""


class CacheError(AxonError, OSError):
    """The cache directory cannot be written (read-only, not a directory, full); names the directory."""


class DamagedPartWarning(UserWarning):
    """A Parquet part of a table could not be read; it was moved aside (the message names it and where)."""


class _Damaged(Exception):
    """Why a part is unreadable (internal)."""


_format_warning = warnings.formatwarning


def _one_line(message: Warning | str, category: type[Warning], filename: str, lineno: int, line: str | None = None) -> str:
    """``DamagedPartWarning`` prints as one line naming the file; other warnings as Python prints them."""
    if isinstance(category, type) and issubclass(category, DamagedPartWarning):
        return f"axon_eg: warning: {message}\n"
    return _format_warning(message, category, filename, lineno, line)


warnings.formatwarning = _one_line


def cache_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The cache directory: ``path`` if given, else ``$AXON_EG_CACHE``, else ``~/.cache/axon_eg``."""
    if path is not None:
        return Path(path)
    env = os.environ.get("AXON_EG_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "axon_eg"


def not_writable(root: Path, exc: OSError) -> CacheError:
    what = exc.strerror or type(exc).__name__
    where = f" ({exc.filename})" if exc.filename and Path(exc.filename) != root else ""
    return CacheError(f"the cache directory {root} is not writable: {what}{where}; choose another with --cache DIR "
                      "or $AXON_EG_CACHE")


def ensure_writable(cache: str | os.PathLike[str] | None = None) -> Path:
    """The cache directory, created if needed; raises ``CacheError`` naming it when it cannot be written."""
    root = cache_dir(cache)
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=root)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise not_writable(root, exc) from None
    return root


def table_dir(table: str, cache: str | os.PathLike[str] | None) -> Path:
    if not table or "/" in table or table.startswith("."):
        raise ValueError(f"bad table name {table!r}")
    return cache_dir(cache) / "tables" / table


def fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def stage_part(d: Path, df: pl.DataFrame) -> tuple[Path, Path]:
    """Write ``df`` under a hidden temporary name in ``d`` (fsynced); returns (temporary, final name)."""
    d.mkdir(parents=True, exist_ok=True)
    stem = f"part-{os.getpid()}-{uuid.uuid4().hex}"
    tmp = d / f".{stem}.tmp"
    try:
        df.write_parquet(tmp)
        with open(tmp, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()[:16]
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp, d / f"{stem}.{digest}.parquet"


@dataclass(frozen=True)
class Part:
    """One readable part of a table: its file and its rows (conformed to the schema when the table has one)."""

    path: Path
    frame: pl.DataFrame


MEMO: dict[Path, tuple[int, int, str, pl.DataFrame]] = {}
_MEMO_MAX = 8192
_WARNED: set[str] = set()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


def _decode(table: str, path: Path, data: bytes) -> pl.DataFrame:
    """The part's rows, checked (see the checks in :mod:`axon_eg.measure.tables`); raises _Damaged with the reason."""
    if not data:
        raise _Damaged("empty file")
    m = CHECKSUM.search(path.name)
    if m and hashlib.sha256(data).hexdigest()[:16] != m.group(1):
        raise _Damaged(f"checksum mismatch: its {len(data)} bytes changed after it was written")
    try:
        df = pl.read_parquet(io.BytesIO(data))
    except (Exception, pl.exceptions.PanicException) as exc:  # a panic in the decoder is a BaseException
        raise _Damaged(f"not readable as Parquet: {_first_line(exc)}") from None
    schema = SCHEMAS.get(table)
    if schema is None:
        return df
    missing = [c for c in REQUIRED.get(table, ()) if c not in df.columns]
    if missing:
        raise _Damaged(f"incompatible schema: no column {missing[0]!r}")
    for c, t in schema.items():
        if c in df.columns and df.schema[c] != t:
            try:
                df[c].cast(t, strict=True)
            except (Exception, pl.exceptions.PanicException):
                raise _Damaged(f"incompatible schema: column {c!r} is {df.schema[c]}, not {t}") from None
    return conform(table, df)


def _quarantine(table: str, path: Path, reason: str) -> None:
    """Move an unreadable part to the table's ``damaged/`` directory and warn once, naming it."""
    dest_dir = path.parent / DAMAGED
    try:
        dest_dir.mkdir(exist_ok=True)
        dest = dest_dir / path.name
        if dest.exists():
            dest = dest_dir / f"{path.stem}-{uuid.uuid4().hex[:8]}{path.suffix}"
        os.replace(path, dest)
        where = f"moved to {dest}"
    except FileNotFoundError:  # another process moved (and reported) it first
        return
    except OSError as exc:
        where = f"left in place (cannot move it: {exc.strerror or exc})"
    msg = f"damaged Parquet part {path} of table {table!r} ({reason}); {where}; the table is read without it"
    if msg in _WARNED:  # a part left in place is found again by every read: say it once per process
        return
    _WARNED.add(msg)
    warnings.warn(msg, DamagedPartWarning, stacklevel=3)


def load_part(table: str, path: Path) -> pl.DataFrame | None:
    """The part's checked rows, or None when it is gone or damaged (then moved aside, with a warning)."""
    try:
        st = path.stat()
        memo = MEMO.get(path)
        if memo is not None and memo[:3] == (st.st_size, st.st_mtime_ns, table):
            return memo[3]
        data = path.read_bytes()
    except FileNotFoundError:  # moved aside or removed meanwhile
        return None
    except OSError as exc:
        _quarantine(table, path, f"cannot be read: {exc.strerror or exc}")
        return None
    try:
        frame = _decode(table, path, data)
    except _Damaged as why:
        MEMO.pop(path, None)
        _quarantine(table, path, str(why))
        return None
    if len(MEMO) >= _MEMO_MAX:
        MEMO.pop(next(iter(MEMO)))
    MEMO[path] = (st.st_size, st.st_mtime_ns, table, frame)
    return frame
