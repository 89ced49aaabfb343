"""Phase 2: the fixed measurement harness, the isolated worker and the result tables.

Everything in this package except :mod:`axon_eg.measure.tables` and :mod:`axon_eg.measure.report` imports
only the standard library, numpy, torch and triton, so the worker runs on a bare GPU box (no egglog, z3
or polars); :mod:`axon_eg.measure.ray_runner` also needs Ray, imported only when it runs.
Submodules are imported on demand to keep ``import axon_eg.measure`` cheap. The report is
``axon_eg.measure.report.report`` (not lifted to the package: the name is its module's).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "TensorInput": "axon_eg.measure.harness",
    "measure": "axon_eg.measure.harness",
    "check_correctness": "axon_eg.measure.harness",
    "time_candidate": "axon_eg.measure.harness",
    "make_inputs": "axon_eg.measure.harness",
    "TOLERANCES": "axon_eg.measure.harness",
    "run_bundle": "axon_eg.measure.worker",
    "run_candidate": "axon_eg.measure.worker",
    "check_structure": "axon_eg.measure.manifest",
    "STATUSES": "axon_eg.measure.manifest",
    "run_bundle_ray": "axon_eg.measure.ray_runner",
    "results": "axon_eg.measure.tables",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'axon_eg.measure' has no attribute {name!r}")
