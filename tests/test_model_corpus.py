"""The model corpus (``benchmarks/models``, issue 49): every registered model builds at its small config,
runs eagerly in float64 and in its own dtype with finite outputs that agree, and ``torch.export`` takes it;
the registry holds at least 25 models of our own across at least 10 families. Third-party entries (timm,
transformers) are skipped where their package is not installed. The slow tier runs every corpus model through
``torch.compile(backend="axon_eg")`` and ``ax.optimize(...).save()`` under the Triton interpreter against the
model in float64 (the saved file in a fresh process)."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from benchmarks.models import CONFIGS, MODELS, OPTIONAL, ModelSpec  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

ALL = sorted(MODELS) + sorted(OPTIONAL)

TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 5e-2}
"""Largest error relative to the output's largest magnitude, against the model in float64."""


def _spec(name: str) -> ModelSpec:
    if name in OPTIONAL:
        pytest.skip(f"{name} needs the optional package {OPTIONAL[name]!r}")
    return MODELS[name]


def _float64(args: tuple) -> tuple:
    return tuple(a.double() if a.is_floating_point() else a for a in args)


def _tensors(out) -> list[torch.Tensor]:
    """The floating tensors a forward returns (a tensor, a tuple, a Hugging Face ``ModelOutput``)."""
    return [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def _relative_error(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    assert len(got) == len(want) and got
    return max(((g.double() - w).abs().max() / w.abs().max().clamp_min(1e-12)).item() for g, w in zip(got, want))


def test_the_corpus_has_25_models_of_our_own_across_10_families():
    ours = [s for s in MODELS.values() if s.source == "ours"]
    assert len(ours) >= 25, sorted(s.name for s in ours)
    assert len({s.family for s in ours}) >= 10, sorted({s.family for s in ours})
    assert {torch.float32, torch.bfloat16} <= {s.dtype for s in ours}
    for name, spec in MODELS.items():
        assert spec.name == name and spec.description and spec.source in ("ours", "timm", "transformers"), spec
    assert set(OPTIONAL.values()) <= {"timm", "transformers"}


@pytest.mark.parametrize("name", ALL)
def test_a_corpus_model_builds_runs_and_exports(name):
    spec = _spec(name)
    model = spec.build("small")
    assert not model.training
    args = spec.inputs("small", 0)
    assert all(a.numel() <= 8192 for a in args), [tuple(a.shape) for a in args]
    assert all(a.dtype == spec.dtype for a in args if a.is_floating_point())
    assert all(p.dtype == spec.dtype for p in model.parameters())
    with torch.no_grad():
        out = _tensors(model(*args))
        assert out and all(t.dtype == spec.dtype and torch.isfinite(t).all() for t in out), name
        reference = spec.build("small").double()  # seeded: the same weights
        want = _tensors(reference(*_float64(args)))
    assert all(torch.isfinite(t).all() for t in want), name
    assert _relative_error(out, want) < TOLERANCE[spec.dtype], name
    exported = torch.export.export(model, args)
    assert any(n.op == "call_function" for n in exported.graph.nodes)


def test_builds_and_inputs_are_seeded():
    spec = MODELS["resnet_basic_stage"]
    a, b = spec.build("small"), spec.build("small")
    for (k, p), (_, q) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(p, q), k
    assert all(torch.equal(x, y) for x, y in zip(spec.inputs("small", 3), spec.inputs("small", 3)))
    assert not torch.equal(spec.inputs("small", 3)[0], spec.inputs("small", 4)[0])
    with pytest.raises(ValueError, match="config"):
        spec.build("medium")
    assert CONFIGS == ("small", "real")


SAVED_CHECK = """
import json, sys
import torch
from torch.utils._pytree import tree_leaves
sys.path.insert(0, sys.argv[3])
from benchmarks.models import MODELS
from benchmarks.models.third_party import torchvision_importable
torchvision_importable()  # as the corpus builds them: a torchvision that cannot load its ops here still imports
import importlib.util
spec = importlib.util.spec_from_file_location("model_new_under_test", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
model_spec = MODELS[sys.argv[2]]
model = model_spec.build("small")
args = model_spec.inputs("small", 0)
floats = lambda out: [t for t in tree_leaves(out.to_tuple() if hasattr(out, "to_tuple") else out)
                      if isinstance(t, torch.Tensor) and t.is_floating_point()]
with torch.no_grad():
    got = floats(mod.ModelNew.from_module(model)(*args))
    want = floats(model_spec.build("small").double()(*(a.double() if a.is_floating_point() else a for a in args)))
err = max(((g.double() - w).abs().max() / w.abs().max().clamp_min(1e-12)).item() for g, w in zip(got, want))
print("AXON_SAVED", json.dumps({"err": err, "n": len(got), "axon_eg": [m for m in sys.modules if m.split(".")[0] == "axon_eg"]}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_every_corpus_model_through_the_backend_and_its_saved_file_matches_float64(name, tmp_path):
    """Each corpus model at its small config under the Triton interpreter: ``torch.compile(model,
    backend="axon_eg")`` (the hybrid: Inductor around the kept regions) and ``ax.optimize(...).save()``, the
    saved file run in a fresh process that never imports axon_eg, both against the model in float64. A region
    axon_eg refuses is Inductor's code and not a failure; a wrong result is."""
    import subprocess
    import sys
    from pathlib import Path

    import axon_eg as ax

    spec = _spec(name)
    model = spec.build("small")
    args = spec.inputs("small", 0)
    opts = {"k": 1, "saturation_s": 0.3, "cache_dir": str(tmp_path / "cache")}
    with torch.no_grad():
        want = _tensors(spec.build("small").double()(*_float64(args)))
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="axon_eg", options=opts)
        got = _tensors(compiled(*args))
    assert _relative_error(got, want) < TOLERANCE[spec.dtype], name
    torch._dynamo.reset()
    fast = ax.optimize(model, args, **opts)  # the regions' phase 1 is in the cache now
    lines = [r.line() for r in fast.report]
    with torch.no_grad():
        assert _relative_error(_tensors(fast(*args)), want) < TOLERANCE[spec.dtype], lines
    saved = fast.save(tmp_path / "model_new.py")
    root = str(Path(__file__).resolve().parent.parent)
    proc = subprocess.run([sys.executable, "-c", SAVED_CHECK, str(saved), name, root], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "TRITON_INTERPRET": "1"})
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("AXON_SAVED")), None)
    assert line is not None, proc.stderr[-3000:]
    result = __import__("json").loads(line.split(" ", 1)[1])
    assert result["axon_eg"] == [] and result["n"] == len(want), result
    assert result["err"] < TOLERANCE[spec.dtype], (result, lines)
