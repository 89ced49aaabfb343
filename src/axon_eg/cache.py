"""The pipeline's cache: keys, and what the tables hold for one key.

The bundle key (:func:`bundle_key`) is what phase 1 depends on: the program hash (it covers shapes and
dtypes), the input specs, the hardware file, target, k, axon_eg and the rule store. The cache key
(:func:`cache_key`) adds the measuring side's toolchain (:func:`toolchain`: torch, triton, python,
device). A run's candidate set is its key's newest phase 1 and each candidate's observation its newest
``measurements`` row (:func:`latest`); :func:`axon_eg.selection.from_cache` is the hit, when every one of them is final (the
cache semantics are in :mod:`axon_eg.pipeline`'s docstring). The CLI over the cache is
:mod:`axon_eg.cli.cache`.
"""

from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path
from typing import Any

import polars as pl

from axon_eg import __version__
from axon_eg.backends.kernel import input_specs
from axon_eg.hw import HardwareSpec
from axon_eg.ir.program import Program
from axon_eg.measure import tables
from axon_eg.measure.manifest import read_rows as read_manifest_rows
from axon_eg.result import PipelineError
from axon_eg.rules_discovered import DATA  # the rule files alone: no prover, no egglog


def _version(pkg: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _rules_digest() -> str:
    h = hashlib.sha256()
    for p in sorted(Path(DATA).glob("*.json")):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()[:16]


def toolchain(device: str) -> dict[str, Any]:
    """Versions of everything that can change a measurement, on the measuring side."""
    return {"axon_eg": __version__, "rules": _rules_digest(), "torch": _version("torch"),
            "triton": _version("triton"), "python": platform.python_version(), "device": device}


def row_toolchain(rows: list[dict[str, Any]], tools: dict[str, Any], device: str) -> dict[str, Any]:
    """``tools`` (this side's :func:`toolchain`) with the measuring side's versions from imported rows."""
    tools = dict(tools)
    first = rows[0]
    tools.update(torch=first.get("torch_version"), triton=first.get("triton_version"),
                 python=first.get("python_version"), device=str(first.get("device", device)).split(" ")[0])
    return tools


def bundle_key(program: Program, hw: HardwareSpec, target: str, k: int, precision: str = "ieee",
               ranges: dict[str, tuple[int, int]] | None = None) -> str:
    """What phase 1 depends on: the program (its hash covers shapes and dtypes), the hardware file, k,
    the fp32 matmul precision policy, and for a shape bucket the ranges its kernels serve."""
    bucket = {"ranges": {d: list(r) for d, r in sorted(ranges.items())}} if ranges else {}
    return _sha({**bucket, "program": program.hash, "inputs": input_specs(program), "hw": hw.name,
                 "hw_file": hashlib.sha256(Path(hw.path).read_bytes()).hexdigest(), "target": target, "k": k,
                 "precision": precision, "axon_eg": __version__, "rules": _rules_digest()})[:24]


def cache_key(bkey: str, tools: dict[str, Any]) -> str:
    return _sha({"bundle": bkey, **tools})[:24]


def kernel_name(index: int, candidate_key: Any) -> str:
    """A candidate's kernel name: its rank and a digest of its key."""
    return f"c{index:02d}_{_sha(list(map(str, candidate_key)))[:8]}"


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Measurement rows made elsewhere (a JSON-lines file); PipelineError when it has none."""
    got = read_manifest_rows(path)
    if not got:
        raise PipelineError(f"{path}: no measurement rows")
    return got


def bundle_candidates(bdir: Path, key: str) -> list[dict[str, Any]]:
    """The ``candidates`` rows a bundle's phase 1 wrote (``candidates.json``), under ``key``."""
    path = bdir / "candidates.json"
    if not path.exists():
        raise PipelineError(f"no bundle at {bdir}: write it first with `axon-eg optimize TARGET --bundle-only` "
                            "(same program, sizes, hardware and k)")
    rows = json.loads(path.read_text())
    for r in rows:
        r.update(cache_key=key, source=str(bdir / Path(r["source"]).name) if r.get("source") else None)
    return rows


def manifest(bdir: Path) -> list[dict[str, Any]]:
    """The bundle's manifest entries (id, entry, mode, source)."""
    return json.loads((bdir / "manifest.json").read_text())["candidates"]


def latest(key: str, cache_dir: Any) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The run's candidate set (its newest phase 1) and each candidate's newest observation (rows not superseded)."""
    current = (pl.col("cache_key") == key) & ~pl.col("superseded")
    cands = tables.results(cache_dir, "candidates").filter(current).drop("superseded").collect()
    meas = tables.results(cache_dir).filter(current).drop("superseded").collect()
    return cands, meas


def observations(key: str, cache_dir: Any) -> tuple[dict[str, dict[str, Any]], set[tuple[str, str]]]:
    """(id -> newest observation when it is final, every (id, timestamp) of the key's rows)."""
    rows = tables.read("measurements", cache_dir).filter(pl.col("cache_key") == key)
    meas = tables.with_derived(rows).collect()
    final = {r["id"]: r for r in meas.filter(~pl.col("superseded") & pl.col("final")).iter_rows(named=True)}
    return final, set(zip(meas["id"], meas["timestamp"].fill_null("")))


__all__ = ["bundle_candidates", "bundle_key", "cache_key", "kernel_name", "latest", "manifest",
           "observations", "read_rows", "row_toolchain", "toolchain"]
