"""The backend registry: which :class:`~axon_eg.backends.base.Backend` serves a target name, a hardware
description or a kernel's calling mode. It sits above the pipeline, with the code that asks it (the pipeline,
the CLI, dynamo, the Triton-to-Triton flow, a selected kernel's call); ``extract/`` and ``egraph/`` are handed
their backend and never look one up.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from axon_eg.backends.base import TARGETS, Backend

if TYPE_CHECKING:
    from axon_eg.hw import HardwareSpec


@cache
def backends() -> dict[str, Backend]:
    """Every backend by target name (explicit imports; the modules load on first use)."""
    # lazy: the backends and their templates take ~0.2 s to import; validate, result and `axon-eg --help` import this
    from axon_eg.backends.nki.backend import NKI
    from axon_eg.backends.triton.backend import TRITON

    return {TRITON.name: TRITON, NKI.name: NKI}


def backend_for(target: str) -> Backend:
    """The backend of a target name; KeyError for an unknown one (the pipeline words its own error)."""
    return backends()[target]


def backend_for_hw(hw: HardwareSpec) -> Backend:
    """The backend that generates code for ``hw`` (the first that accepts it)."""
    found = next((b for b in backends().values() if b.accepts(hw)), None)
    if found is None:
        raise KeyError(f"no backend for {hw.name!r} ({hw.kind})")
    return found


def backend_for_mode(mode: str) -> Backend:
    """The backend whose kernels are called in ``mode`` (``Kernel.mode``: "dps", "return", "nki")."""
    found = next((b for b in backends().values() if mode in b.kernel_modes), None)
    if found is None:
        raise KeyError(f"no backend calls kernels of mode {mode!r}")
    return found


__all__ = ["TARGETS", "backend_for", "backend_for_hw", "backend_for_mode", "backends"]
