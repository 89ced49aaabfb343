"""A phase-2 bundle's manifest and its result rows (part of :mod:`axon_eg.measure.worker`): reading
``manifest.json`` with its inherited keys, the row schema (``STATUSES``, ``ROW_FIELDS``), reading and
appending JSON-lines rows, and the stages of the cascade that need no child (syntax, structure against the
hardware ``limits``). Standard library only: it runs on a bare GPU box.
"""

from __future__ import annotations

import ast
import datetime as _dt
import json
import os
import platform
import threading
import time
from pathlib import Path
from typing import Any

STATUSES = ("ok", "syntax_error", "structure_error", "compile_error", "runtime_error", "wrong_result", "timeout",
            "crashed")
ROW_FIELDS = ("id", "status", "stage", "error", "median_us", "iqr_us", "mean_us", "min_us", "runs", "max_abs_err",
              "max_rel_err", "trials", "device", "torch_version", "triton_version", "python_version", "timestamp",
              "elapsed_s", "source", "entry", "kind", "cache_key", "program", "hw", "target", "predicted_us",
              "probe_us", "bundle", "constant_reference")
"""A row's fields. ``bundle`` is the key of the bundle it was measured from (the manifest's, which is the bundle
directory's name): rows brought back from another machine are accepted only by the run whose bundle it is."""
INHERITED = ("limits", "cache_key", "program", "hw", "target", "bundle")
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
               target=cand.get("target"), predicted_us=cand.get("predicted_us", meta.get("predicted_us")),
               bundle=cand.get("bundle"))
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
