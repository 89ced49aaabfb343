"""What one phase-2 child runs, in the process the fork server forked (part of :mod:`axon_eg.measure.worker`):
load the candidate's reference and source, apply the Triton interpreter's work-arounds under
``TRITON_INTERPRET=1``, run the harness, and write the result for the parent to read.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from axon_eg.measure.manifest import load_manifest

LIMIT_FILE = "limit.json"
"""Written by the worker next to a child's result file: ``{"stop_above_us": x}`` (``harness.measure``)."""
WARM_FILE = "warm"
"""Written by the worker next to a child's result file for a warm-up run (``worker.warm``): the candidate is
compiled and checked once, not timed, and its result is not a row."""


def load_reference(bundle: Path, cand: dict[str, Any]) -> Any:
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
    try:  # lazy: optional, and only under the interpreter; a bundle run elsewhere may have no backends/
        from axon_eg.backends.triton import interpreter
    except ImportError:
        return
    interpreter.apply()


def run_child(bundle: Path, cand_id: str, result_path: Path) -> int:
    import faulthandler
    import importlib.util
    import traceback

    faulthandler.enable()
    import numpy  # noqa: F401
    import torch

    from axon_eg.measure import harness  # lazy: loads torch; the worker imports this module and must not

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
        reference = load_reference(bundle, cand)
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
    limit_path = result_path.parent / LIMIT_FILE  # the worker's stop limit for this run, if any
    limit = json.loads(limit_path.read_text()).get("stop_above_us") if limit_path.exists() else None
    if (result_path.parent / WARM_FILE).exists():  # compile (Triton's and Inductor's caches on disk), one check
        try:
            res = harness.check_correctness(fn, cand["inputs"], reference, seed=int(cand.get("seed", 0)), trials=1,
                                            device=device, mode=cand.get("mode", "auto"),
                                            out_dtypes=cand.get("out_dtypes"), tolerance=cand.get("tolerance"),
                                            steps=bool(cand.get("steps", False)))
        except Exception:
            return finish({"status": "crashed", "stage": "warm", "error": traceback.format_exc()[-4000:]})
        return finish({"status": res.status, "stage": "warm"})
    from axon_eg.measure.integrity import patched  # lazy: as the harness, after the fork (PRISTINE predates it)

    def run(inputs: list, ref: Any, stop: float | None) -> Any:
        return harness.measure(fn, inputs, ref, seed=int(cand.get("seed", 0)), intact=patched,
                               trials=int(cand.get("trials", harness.MIN_TRIALS)), device=device,
                               mode=cand.get("mode", "auto"), out_dtypes=cand.get("out_dtypes"),
                               time_wrong=bool(cand.get("time_wrong", False)), stop_above_us=stop,
                               tolerance=cand.get("tolerance"), steps=bool(cand.get("steps", False)))

    try:
        res = run(cand["inputs"], reference, limit)
    except Exception:
        return finish({"status": "crashed", "stage": "harness", "error": traceback.format_exc()[-4000:]})
    out = res.as_dict()
    if out["status"] == "ok" and cand.get("probes"):
        out.update(_probes(bundle, cand, run))
    return finish(out)


def _probes(bundle: Path, cand: dict[str, Any], run: Any) -> dict[str, Any]:
    """A shape-generic candidate at the other sizes of its bucket (the manifest's ``probes``: label, inputs,
    reference each): correct at every one (else the row is ``wrong_result`` / the failure, naming the
    size), and its median latency at each (``probe_us``, JSON)."""
    import traceback

    times: dict[str, Any] = {}
    for probe in cand["probes"]:
        label = probe["label"]
        try:
            res = run(probe["inputs"], load_reference(bundle, probe), None)
        except Exception:
            return {"status": "crashed", "stage": "harness", "error": f"at {label}: {traceback.format_exc()[-4000:]}"}
        if res.status != "ok":
            return {"status": res.status, "stage": res.stage, "error": f"at {label}: {res.error}",
                    "max_abs_err": res.max_abs_err, "max_rel_err": res.max_rel_err}
        times[label] = res.median_us
    return {"probe_us": json.dumps(times)}

