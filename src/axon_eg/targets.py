"""The backend registry: which :class:`~axon_eg.backends.base.Backend` serves a target name, a hardware
description or a kernel's calling mode. It sits above the pipeline, with the code that asks it (the pipeline,
the CLI, dynamo, the Triton-to-Triton flow, a selected kernel's call); ``extract/`` and ``egraph/`` are handed
their backend and never look one up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from axon_eg.backends.base import TARGETS, Backend

if TYPE_CHECKING:
    from axon_eg.hw import HardwareSpec


def _triton() -> Backend:
    # lazy: the backend and its templates take ~0.2 s to import; validate, result and `axon-eg --help` import this
    from axon_eg.backends.triton.backend import TRITON

    return TRITON


def _nki() -> Backend:
    from axon_eg.backends.nki.backend import NKI  # lazy: NKI's modules load z3 (semantics.isa); a GPU run never does

    return NKI


_LOADERS: dict[str, Callable[[], Backend]] = {"triton": _triton, "nki": _nki}
"""Target name -> its backend, in the order a hardware description or a calling mode is matched (a backend
is loaded only when the ones before it do not serve)."""


def _in_order() -> Iterator[Backend]:
    return (load() for load in _LOADERS.values())


def backends() -> dict[str, Backend]:
    """Every backend by target name (loads them all)."""
    return {name: load() for name, load in _LOADERS.items()}


def backend_for(target: str) -> Backend:
    """The backend of a target name; KeyError for an unknown one (the pipeline words its own error)."""
    return _LOADERS[target]()


def backend_for_hw(hw: HardwareSpec) -> Backend:
    """The backend that generates code for ``hw`` (the first that accepts it)."""
    found = next((b for b in _in_order() if b.accepts(hw)), None)
    if found is None:
        raise KeyError(f"no backend for {hw.name!r} ({hw.kind})")
    return found


def backend_for_mode(mode: str) -> Backend:
    """The backend whose kernels are called in ``mode`` (``Kernel.mode``: "dps", "return", "nki")."""
    found = next((b for b in _in_order() if mode in b.kernel_modes), None)
    if found is None:
        raise KeyError(f"no backend calls kernels of mode {mode!r}")
    return found


__all__ = ["TARGETS", "backend_for", "backend_for_hw", "backend_for_mode", "backends"]
