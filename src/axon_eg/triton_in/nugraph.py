"""The algorithmic stage: the reference ``Model`` through the νGraph, axon_eg's own kernels as candidates.

The reference module is imported (``ir.torch_import.import_torch``: parameters and buffers become named
inputs) at the harness's input shapes on fake tensors, saturated with the discovered rules and enumerated
(the pipeline's phase 1: a cheaper program such as a GEMM turned GEMV, folded constants, fusions); the k best
candidates are emitted by the Triton backend. Each kernel file defines the input's wrapper class
(``ModelNew`` or ``Model``) as a drop-in module: built from the same ``__init__`` arguments, it holds the
reference ``Model`` (its parameters and buffers), passes the user's inputs and those tensors where the
program reads them, and allocates the outputs of destination-passing kernels. The harness entry builds it
once (seeded with 0, as the wrapper and the reference are). The kernels then go
through the same cascade as every other candidate.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from axon_eg.extract.candidates import enumerate_candidates
from axon_eg.ir.torch_import import import_torch
from axon_eg.measure.harness import TORCH_DTYPES
from axon_eg.saturation import saturated
from axon_eg.targets import backend_for

from .entry import CALL

ENTRY = '''

# ===== axon_eg: the kernel as a drop-in module, and the harness entry (fixed) =====
import importlib.util as _axon_eg_util  # noqa: E402
import pathlib as _axon_eg_pathlib  # noqa: E402

import torch as _axon_eg_torch  # noqa: E402

_AXON_EG_INIT = {init!r}
_AXON_EG_SIZES = {constants!r}  # module constants of the reference set for this run (its sizes)
_AXON_EG_ORDER = {order!r}  # ("input", k): the k-th input; ("state", name): the Model's parameter or buffer
_AXON_EG_OUT = {outs!r}  # destination passing: each output's shape and dtype; None: the kernel returns them


def _axon_eg_reference():
    path = _axon_eg_pathlib.Path(__file__).with_name("reference_model.py")
    spec = _axon_eg_util.spec_from_file_location("axon_eg_reference_of_kernel", path)
    mod = _axon_eg_util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name, value in _AXON_EG_SIZES.items():
        setattr(mod, name, value)
    return mod


class {wrapper}(_axon_eg_torch.nn.Module):
    \"\"\"axon_eg's kernel for the reference ``Model`` (``reference_model.py`` beside this file), called as the
    input's ``{wrapper}`` is: built from the same ``__init__`` arguments, it owns the reference's parameters and
    buffers and passes them where the kernel reads them. The kernel is specialized to the shapes it was built
    for (the inputs of the run that chose it).\"\"\"

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.reference = _axon_eg_reference().Model(*args, **kwargs)
        self._axon_eg_state = None

    def forward(self, *inputs):
        if self._axon_eg_state is None or self._axon_eg_state[0] != inputs[0].device:
            named = dict(self.reference.named_parameters())
            named.update(self.reference.named_buffers())
            self._axon_eg_state = (inputs[0].device, {{k: v.detach().contiguous() for k, v in named.items()}})
        state = self._axon_eg_state[1]
        args = [inputs[i] if kind == "input" else state[i] for kind, i in _AXON_EG_ORDER]
        if _AXON_EG_OUT is None:
            return {entry}(*args)
        outs = [_axon_eg_torch.empty(s, dtype=getattr(_axon_eg_torch, d), device=inputs[0].device)
                for s, d in _AXON_EG_OUT]
        {entry}(*args, *outs)
        return outs[0] if len(outs) == 1 else tuple(outs)




def _axon_eg_share(model):
    """Nothing to share: this wrapper reads the reference Model's own parameters."""


''' + CALL


def candidates(ref_path: Path, init: list[Any], inputs: list[dict[str, Any]], hw: Any, k: int,
               saturation_s: float = 1.0, wrapper: str = "ModelNew",
               constants: dict[str, int] | None = None) -> list[tuple[str, str, dict[str, Any]]]:
    """(id, file text, meta) of the k best kernels of the reference ``Model``, each file also defining
    ``wrapper`` (the input's wrapper class name) as a drop-in module; the import's refusal raises (the caller
    records it as a row). ``constants``: module constants of the reference set first (the run's sizes)."""
    spec = importlib.util.spec_from_file_location("axon_eg_triton_reference_for_nugraph", ref_path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name, value in (constants or {}).items():
        setattr(mod, name, value)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = mod.Model(*init).eval()
    with FakeTensorMode(allow_non_fake_inputs=True):
        fakes = tuple(torch.empty(tuple(s["shape"]), dtype=TORCH_DTYPES[s["dtype"]]) for s in inputs)
    program = import_torch(model, fakes, name=f"{ref_path.stem}_reference").program
    roles = dict(program.roles)
    order, user = [], 0
    for spec_in in program.inputs:
        if spec_in.name in roles:
            order.append(("state", spec_in.name))
        else:
            order.append(("input", user))
            user += 1
    backend = backend_for("triton")
    found, summary = enumerate_candidates(saturated(program, saturation_s), hw, k, backend=backend,
                                          fallback=backend.fallback(hw))
    out = []
    for i, c in enumerate(found):
        if c.key in summary.errors:
            continue
        try:
            kern = backend.emit(c, hw, f"nugraph_{i:02d}")
        except Exception:  # noqa: BLE001, S112 - a candidate the backend cannot lower is not offered
            continue
        outs = None if kern.mode == "return" else [
            (list(program.concrete_shape(o)), program.nodes[o].dtype.torch_name) for o in program.outputs]
        text = kern.source + ENTRY.format(init=init, order=order, outs=outs, entry=kern.entry, wrapper=wrapper,
                                           constants=constants or {})
        out.append((f"g{i:02d}", text, {"stage": "nugraph", "params": {
            "plan": c.plan.name, "lowering": kern.meta.get("lowering"), "predicted_us": round(c.predicted_seconds * 1e6, 2),
            "rules": list(c.variant.rules)}}))
    return out


__all__ = ["candidates"]
