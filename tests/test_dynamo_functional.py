"""In-place ops never block a region (issue 49): the exported graph is functionalized before it is cut into
regions, so ``nn.ReLU(inplace=True)`` after a cut, ``y += ...`` and ``x.mul_(2)`` become out-of-place ops
inside regions; a write the caller can see (a graph input really mutated) is still made. Under the Triton
interpreter against eager in float64."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import axon_eg as ax  # noqa: E402
from axon_eg import dynamo  # noqa: E402

OPTS = {"k": 1, "saturation_s": 0.3}


class BasicBlock(torch.nn.Module):
    """torchvision's ResNet basic block with a projection shortcut, as people write it: in-place ReLU and
    an in-place residual add after the second batch norm."""

    def __init__(self, cin: int = 3, cout: int = 6):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(cout)
        self.relu = torch.nn.ReLU(inplace=True)
        self.conv2 = torch.nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(cout)
        self.down = torch.nn.Conv2d(cin, cout, 1, bias=False)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += self.down(x)
        return self.relu(out)


def _randomized(module: torch.nn.Module) -> torch.nn.Module:
    """Batch-norm statistics away from the identity, so the test can see them."""
    torch.manual_seed(0)
    for m in module.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)
    return module.eval()


def _refused_for_writes(regions) -> list[str]:
    return [r.line() for r in regions if r.why_torch and "in place" in r.why_torch]


@pytest.mark.parametrize("region_ops", [2, 24])
def test_a_resnet_block_with_in_place_relu_imports_at_any_cut(tmp_path, region_ops):
    block = _randomized(BasicBlock())
    x = torch.randn(2, 3, 5, 7) + 0.1
    fast = ax.optimize(block, (x,), cache_dir=str(tmp_path), region_ops=region_ops, **OPTS)
    assert not _refused_for_writes(fast.report), [r.line() for r in fast.report]
    assert any(r.kernel for r in fast.report), [r.line() for r in fast.report]
    with torch.no_grad():
        want = block.double()(x.double())
        block.float()
        got = fast(x)
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)


class WritesItsInput(torch.nn.Module):
    def forward(self, x, y):
        x.mul_(2)
        y = torch.sigmoid(y)
        y.add_(x)
        return torch.tanh(y) * 3


def test_a_write_to_a_graph_input_is_still_seen_by_the_caller(tmp_path):
    m = WritesItsInput()
    x, y = torch.randn(3, 7), torch.randn(3, 7)
    fast = ax.optimize(m, (x.clone(), y.clone()), cache_dir=str(tmp_path), region_ops=2, **OPTS)
    assert not _refused_for_writes(fast.report) and all(r.kernel for r in fast.report), [r.line() for r in fast.report]
    eager_x, fast_x = x.clone(), x.clone()
    with torch.no_grad():
        want, got = m(eager_x, y.clone()), fast(fast_x, y.clone())
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fast_x, eager_x)  # x was doubled in place, as eager does
    for r in fast.report:  # verbose's lines say where the time went
        assert r.phase1_s is not None and r.seconds >= r.phase1_s >= 0 and "phase 1 " in r.line(), r.line()


def test_the_backend_takes_in_place_ops_too(tmp_path):
    torch._dynamo.reset()
    block = _randomized(BasicBlock())
    x = torch.randn(1, 3, 4, 4) + 0.1
    compiled = torch.compile(block, backend="axon_eg", options={**OPTS, "cache_dir": str(tmp_path), "region_ops": 3})
    with torch.no_grad():
        got, want = compiled(x), block(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    regions = [r for r in dynamo.Compiled.made[-1].report[next(iter(dynamo.Compiled.made[-1].report))]]
    assert regions and not _refused_for_writes(regions), [r.line() for r in regions]
    torch._dynamo.reset()


IN_PLACE = {"relu": torch.relu_, "sigmoid": torch.sigmoid_, "tanh": torch.tanh_,
            "add": lambda t: t.add_(0.5), "mul": lambda t: t.mul_(1.5), "clamp": lambda t: t.clamp_(-1.0, 1.0)}
OUT_OF_PLACE = {"relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
                "add": lambda t: t + 0.5, "mul": lambda t: t * 1.5, "clamp": lambda t: t.clamp(-1.0, 1.0)}


class Chain(torch.nn.Module):
    """A linear layer, then a chain of element-wise ops, each written in place or not."""

    def __init__(self, steps: list[tuple[str, bool]], width: int):
        super().__init__()
        self.linear = torch.nn.Linear(width, width)
        self.steps = steps

    def forward(self, x):
        y = self.linear(x)
        for op, in_place in self.steps:
            y = IN_PLACE[op](y) if in_place else OUT_OF_PLACE[op](y)
        return y


@pytest.mark.slow  # seconds of interpreted kernels or compiles: make test-slow (CI) runs it
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(st.tuples(st.sampled_from(sorted(IN_PLACE)), st.booleans()), min_size=1, max_size=5),
       width=st.sampled_from([1, 3, 8]), rows=st.sampled_from([1, 2, 5]), region_ops=st.integers(1, 4))
def test_random_chains_with_in_place_ops_at_random_cuts_match_eager(tmp_path_factory, steps, width, rows, region_ops):
    torch.manual_seed(0)
    m = Chain(steps, width).eval()
    x = torch.rand(rows, width) + 0.25
    fast = ax.optimize(m, (x,), cache_dir=str(tmp_path_factory.mktemp("chain")), region_ops=region_ops, **OPTS)
    assert not _refused_for_writes(fast.report), [r.line() for r in fast.report]
    with torch.no_grad():
        torch.testing.assert_close(fast(x), m(x), rtol=1e-5, atol=1e-5)


class Positions(torch.nn.Module):
    """Hugging Face style: positions made in forward (``torch.arange``), a buffer the importer makes, not an
    input the caller passes."""

    def forward(self, x):
        pos = torch.arange(x.shape[1], device=x.device)
        return torch.sigmoid(x) * 2 + pos.to(x.dtype) * 0.5


def test_a_region_with_a_tensor_made_in_forward_gets_it(tmp_path):
    m = Positions()
    x = torch.randn(3, 9)
    fast = ax.optimize(m, (x,), cache_dir=str(tmp_path), **OPTS)
    assert all(r.kernel for r in fast.report), [r.line() for r in fast.report]
    with torch.no_grad():
        torch.testing.assert_close(fast(x), m(x), rtol=1e-5, atol=1e-5)
    saved = fast.save(tmp_path / "model_new.py")
    import importlib.util

    spec = importlib.util.spec_from_file_location("positions_new", saved)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with torch.no_grad():
        torch.testing.assert_close(mod.ModelNew.from_module(m)(x), m(x), rtol=1e-5, atol=1e-5)
