"""Issue 49, deliverable 3 (conv folds) end to end: a torchvision-style block, Conv2d (3x3, padding 1, no bias)
-> BatchNorm2d (eval, random running statistics, weight and bias) -> ReLU, through ``ax.from_torch`` and
``saturate_and_extract`` on the CPU (Triton interpreter): the νGraph holds the folded form (the conv's weight
scaled, no batchnorm arithmetic on the activation), its extraction cost ranks it first when the activation is
larger than the weight (and the unfolded one first when the weight is larger), and the folded form's kernel,
like every measured candidate, agrees with float64."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # kernels run here, on the CPU

import copy

import numpy as np
import pytest
import torch
from torch import nn

import axon_eg as ax
from axon_eg import pipeline
from axon_eg.extract.candidates import enumerate_all
from axon_eg.hw import load
from axon_eg.ir.interpret import interpret
from axon_eg.ir.torch_import import import_torch
from axon_eg.targets import backend_for, backend_for_hw
from axon_eg.testing.kernels import load_kernel

os.environ["AXON_EG_FORCE_CPU"] = "1"

FOLD = "batchnorm_folded_into_conv2d"


def _block(c_in: int, c_out: int, size: int, batch: int, seed: int = 0) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(seed)
    module = nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()).eval()
    with torch.no_grad():
        bn = module[1]
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.normal_()
        bn.bias.normal_()
    return module, torch.randn(batch, c_in, size, size)


def _is_folded(program) -> bool:
    """One conv whose weight is a product, and no rsqrt / sub over the activation (4-d values)."""
    convs = [n for n in program.nodes if n.op == "conv2d"]
    if len(convs) != 1 or program.nodes[convs[0].inputs[1]].op != "mul":
        return False
    return not any(n.op in ("rsqrt", "sub") and len(n.shape) == 4 for n in program.nodes)


def _float64(module: nn.Module, x: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return copy.deepcopy(module).double()(x.double()).numpy()


@pytest.mark.parametrize("c_in, c_out", [(3, 16), (5, 8)])
def test_conv_bn_relu_folds_ranks_first_and_matches_float64(c_in: int, c_out: int, tmp_path) -> None:
    module, x = _block(c_in, c_out, size=16, batch=2)
    imported = import_torch(module, (x,))
    program = imported.program
    want = _float64(module, x)
    np.testing.assert_allclose(interpret(program, {**imported.state, "input": x.numpy()}), want, rtol=1e-7, atol=1e-9)

    result = pipeline.saturate_and_extract(program, k=4, cache_dir=tmp_path, device="cpu", saturation_s=2.0)
    assert set(result.table["status"]) == {"ok"}, result.summary()  # every measured kernel agrees with float64

    variants = result.nugraph.extract(3)
    assert _is_folded(variants[0].program) and FOLD in variants[0].rules  # the activation is the larger one
    assert not _is_folded(result.nugraph.original)
    folded = variants[0].program
    inputs = {**imported.state, "input": x.numpy()}
    np.testing.assert_allclose(interpret(folded, inputs), want, rtol=1e-7, atol=1e-9)

    # the folded form's own kernel (emitted as the pipeline emits candidates) against float64
    hw = load("h200")
    ranked, _ = enumerate_all(result.nugraph, hw, 8, backend=backend_for_hw(hw))
    candidate = next(c for c in ranked if _is_folded(c.variant.program))
    kernel = backend_for("triton").emit(candidate, hw, "folded")
    entry = load_kernel(kernel, tmp_path)
    args = [torch.from_numpy(np.ascontiguousarray(inputs[s.name], dtype=np.float32)) for s in program.inputs]
    out = torch.empty(want.shape, dtype=torch.float32)
    entry(*args, out)
    np.testing.assert_allclose(out.double().numpy(), want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_the_unfolded_form_stays_cheapest_when_the_weight_is_larger() -> None:
    """A 32 -> 32 channel 3x3 conv on a 2x2 image: scaling the weight (9216 elements) costs more than scaling
    the activation (128), so the νGraph's cheapest variant keeps the batchnorm on the activation."""
    from axon_eg.egraph.nugraph import Limits, NuGraph
    from axon_eg.rules_discovered.store import load_rules

    module, x = _block(32, 32, size=2, batch=1)
    program = ax.from_torch(module, (x,))
    graph = NuGraph(program, load_rules())
    graph.saturate(Limits(iterations=10, seconds=20))
    assert graph.report.matches_per_rule.get(FOLD, 0) > 0  # the folded form is there ...
    assert not _is_folded(graph.extract(1)[0].program)  # ... and not the cheapest
