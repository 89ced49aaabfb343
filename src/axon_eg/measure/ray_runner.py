"""Run a bundle's candidates as Ray tasks: ``python -m axon_eg.measure BUNDLE --out FILE --ray ADDRESS``.

The driver does the child-free stages itself (syntax, structure: see :func:`manifest.static_check`), then
ships each remaining candidate as bytes (its manifest entry, its source and its reference file) to a
task on any node of the cluster. The task writes them to a temporary bundle on that node and calls
:func:`worker.run_candidate` there, so a node needs axon_eg with numpy, torch, triton and ray installed,
nothing else. The driver writes each row as its task completes (``ray.wait``) with the same
:class:`manifest.RowWriter` as the local path; ids already in the output file are skipped (resume).

A task asks for one GPU when the cluster has GPUs (the child sees the GPU Ray assigned), else one CPU.
Ray is an optional extra (``pip install 'axon_eg[ray]'``) and is imported only inside these functions.
"""

from __future__ import annotations

import json
import os
import tempfile
import traceback
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from axon_eg.measure import manifest, worker


def pack_candidate(bundle: Path, cand: dict[str, Any]) -> dict[str, Any]:
    """One candidate as a self-contained payload: ``{"cand": entry, "files": {relative path: bytes}}``.
    A file that does not exist is left out, so the task reports it like the local path would."""
    files = {}
    for rel in manifest.candidate_files(cand):
        path = bundle / rel
        if path.is_file():
            files[rel] = path.read_bytes()
    return {"cand": cand, "files": files}


def run_packed(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Task body: unpack ``payload`` into a temporary bundle on this node, run the candidate, return its row."""
    import ray

    gpu_ids = ray.get_gpu_ids()
    gpu = gpu_ids[0] if gpu_ids else None
    cand = payload["cand"]
    with tempfile.TemporaryDirectory(prefix="axon_eg_ray_") as tmp:
        root = Path(tmp).resolve()
        for rel, data in payload["files"].items():
            path = (root / rel).resolve()
            if not path.is_relative_to(root):
                raise ValueError(f"candidate {cand['id']!r}: file {rel!r} escapes the bundle")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        (root / "manifest.json").write_text(json.dumps({"candidates": [cand]}))
        return worker.run_candidate(root, cand, gpu)


def _init(address: str, runtime_env: Mapping[str, Any] | None) -> None:
    import ray

    kwargs: dict[str, Any] = {"runtime_env": dict(runtime_env)} if runtime_env else {}
    if address == "local":
        ray.init(num_cpus=2, include_dashboard=False, **kwargs)
    else:
        ray.init(address=address, **kwargs)


def run_bundle_ray(bundle: str | os.PathLike[str], out: str | os.PathLike[str], address: str,
                   ids: Iterable[str] | None = None, runtime_env: Mapping[str, Any] | None = None,
                   ) -> list[dict[str, Any]]:
    """Run every candidate of ``bundle`` without a row in ``out`` on the Ray cluster at ``address``
    (``"local"`` starts a 2-CPU local cluster, ``"auto"`` joins the running one); returns the new rows.
    If Ray is already initialized in this process, that connection is used and left open."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError("--ray needs Ray: pip install 'axon_eg[ray]' (or 'ray>=2.9')") from exc
    bundle = Path(bundle).resolve()
    cands = manifest.load_manifest(bundle)
    if ids is not None:
        want = set(ids)
        cands = [c for c in cands if c["id"] in want]
    done = {r.get("id") for r in manifest.read_rows(out)}
    todo = [c for c in cands if c["id"] not in done]
    if not todo:  # nothing left: do not start or join a cluster
        return []
    writer = manifest.RowWriter(out)
    new: list[dict[str, Any]] = []

    def emit(row: dict[str, Any]) -> None:
        writer.write(row)
        new.append(row)

    started = not ray.is_initialized()
    try:
        if started:
            _init(address, runtime_env)
        has_gpus = ray.cluster_resources().get("GPU", 0) >= 1
        task = ray.remote(**({"num_gpus": 1} if has_gpus else {"num_cpus": 1}))(run_packed)
        pending: dict[Any, dict[str, Any]] = {}
        for c in todo:
            failed = manifest.static_check(bundle, c, "cpu")
            if failed is not None:
                emit(failed)
            else:
                pending[task.remote(pack_candidate(bundle, c))] = c
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                c = pending.pop(ref)
                try:
                    row = ray.get(ref)
                except Exception as exc:  # the task itself failed (node lost, worker killed)
                    error = "".join(traceback.format_exception(exc))[-4000:]
                    row = manifest.make_row(c, "ray", status="crashed", stage="ray", error=error)
                emit(row)
    finally:
        writer.close()
        if started and ray.is_initialized():
            ray.shutdown()
    return new
