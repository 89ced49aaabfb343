"""What importing each entry module loads: the package, the CLI and the GPU worker stay light (no egglog,
z3, torch, polars where they do not need them), so a lazy import turned into a top-level one cannot
silently make ``axon-eg --help`` or the measuring child pay for the e-graph or the prover. Each module is
imported in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "egglog", "z3", "polars", "triton", "libcst", "hypothesis")

# entry module -> the heavy packages it may load
ALLOWED: dict[str, set[str]] = {
    "axon_eg": set(),
    "axon_eg.ir": set(),
    "axon_eg.cli": set(),
    "axon_eg.measure.worker": set(),
    "axon_eg.measure.child": set(),
    "axon_eg.backends.triton.backend": set(),
    "axon_eg.selection": {"polars"},
    "axon_eg.cache": {"polars"},
    "axon_eg.pipeline": {"polars"},
    "axon_eg.dynamo": {"torch"},
    "axon_eg.extract.candidates": {"egglog"},
    "axon_eg.egraph.nugraph": {"egglog"},
    "axon_eg.triton_in.run": {"libcst"},
}


@pytest.mark.parametrize("module", sorted(ALLOWED))
def test_an_entry_module_loads_only_what_it_needs(module: str) -> None:
    code = f"import sys, json; import {module}; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert loaded <= ALLOWED[module], f"importing {module} loads {sorted(loaded - ALLOWED[module])}"
