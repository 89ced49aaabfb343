"""The integrity battery, the same for every path (KernelBench files, Triton to Triton, proposals, axon_eg's own
kernels: every candidate runs through :func:`axon_eg.measure.harness.measure` in a child of the worker).

What the harness does about each way a candidate could look faster or correct without being so:

- **the clocks and synchronization replaced** (``time.perf_counter``, ``torch.cuda.synchronize``,
  ``torch.cuda.Event.elapsed_time``, ``triton.testing.do_bench``, ...): :data:`PRISTINE` holds the objects
  as the fork server imported them, before any candidate's module; :func:`patched` names the first one a
  candidate replaced (at import or in a call), checked after the correctness trials and after the timing
  (stage ``integrity``);
- **outputs cached between calls or by input pointer**: every correctness trial after the first writes its new
  values into the first trial's input tensors (the same pointers), so a result kept from an earlier call is
  wrong there, and is named as the earlier call's output (stage ``integrity``);
- **inputs mutated**, **writes out of bounds**, **unwritten outputs** (NaN-poisoned): the correctness trials;
- **a constant reference** (the problem's output depends on no input): reported on the row
  (``constant_reference``), so a report keeps it out of a geomean;
- **work on a side stream or a thread that outlives the call**: the timing's events see the current stream
  only, so the correctness trials compare the outputs once the call returned and the current stream alone
  finished; an output wrong then is compared again after every stream and the threads the call started
  finished, and one right only then is refused as such (stage ``integrity``).
"""

from __future__ import annotations

import importlib
from typing import Any

WATCHED = ("time.perf_counter", "time.perf_counter_ns", "time.monotonic", "time.time", "time.sleep",
           "torch.cuda.synchronize", "torch.cuda.current_stream", "torch.cuda.Event", "torch.cuda.Event.record",
           "torch.cuda.Event.synchronize", "torch.cuda.Event.elapsed_time", "torch.cuda.Stream.synchronize",
           "torch.Tensor.copy_", "torch.equal", "torch.allclose", "triton.testing.do_bench")
"""The clocks, synchronization and comparisons the harness relies on: a candidate must leave them as they are."""

_MISSING = object()


def _resolve(path: str) -> Any:
    """The object at a dotted path (a module, then attributes), or ``_MISSING``."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name, _MISSING)
            if obj is _MISSING:
                return _MISSING
        return obj
    return _MISSING


def snapshot() -> dict[str, Any]:
    """The watched objects as they are now."""
    return {path: _resolve(path) for path in WATCHED}


PRISTINE = snapshot()
"""The watched objects as the fork server imported them (this module is preloaded there, before any
candidate's module is loaded in a child)."""


def patched(before: dict[str, Any] | None = None) -> str | None:
    """The first watched object that is no longer what it was in ``before`` (default :data:`PRISTINE`), as a
    reason; None when all are intact."""
    before = PRISTINE if before is None else before
    for path, obj in before.items():
        now = _resolve(path)
        if now is not obj:
            return (f"the candidate replaced {path} (the harness's clocks, synchronization and comparisons are "
                    "fixed)")
    return None


__all__ = ["PRISTINE", "WATCHED", "patched", "snapshot"]
