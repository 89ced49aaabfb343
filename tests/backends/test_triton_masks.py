"""Boolean masks and integer tensors through the Triton backend, checked against the float64 reference
by the fixed harness under TRITON_INTERPRET=1: comparisons, logic and ``where`` fused into one element-wise
kernel (booleans as 0.0 / 1.0 in fp32, a bool output stored as bool and compared exactly), and groups that
read an integer tensor left to torch with the reason said."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import axon_eg as ax  # noqa: E402
from axon_eg.backends.kernel import input_specs as harness_specs  # noqa: E402
from axon_eg.backends.triton.emit import INTEGERS, emit  # noqa: E402
from axon_eg.hw import load  # noqa: E402
from axon_eg.ir.torch_import import from_torch  # noqa: E402
from axon_eg.measure import harness  # noqa: E402
from axon_eg.testing.kernels import candidate_for, run_kernel  # noqa: E402

H200 = load("h200")
EXAMPLES = int(os.environ.get("AXON_EG_TRITON_EXAMPLES", "40")) // 4


class Masked(torch.nn.Module):
    """A masked select and fill, a threshold, and the mask they leave (a second, bool output)."""

    def __init__(self, t: float):
        super().__init__()
        self.t = t

    def forward(self, x, y, mask):
        keep = mask & (x > self.t) | torch.logical_not(mask) & (y <= x)
        out = torch.where(keep, x * 2.0, y) + x.masked_fill(~mask, -1.0) + (x >= y).float()
        return out, keep ^ (y > 0)


@settings(max_examples=max(2, EXAMPLES), deadline=None)
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=3), t=st.floats(-1.0, 1.0),
       broadcast=st.booleans())
def test_masks_fuse_into_one_kernel_and_match_exactly(tmp_path_factory, shape, t, broadcast):
    x = torch.randn(*shape)
    y = torch.randn(*shape[1:]) if broadcast and len(shape) > 1 else torch.randn(*shape)
    mask = torch.rand(*shape) < 0.5
    program = from_torch(Masked(t), (x, y, mask))
    assert [s.dtype.name for s in program.inputs] == ["fp32", "fp32", "bool"]
    assert [program.nodes[o].dtype.name for o in program.outputs] == ["fp32", "bool"]
    kernel = emit(candidate_for(program, H200), H200, "k")
    assert kernel.meta["lowering"] == "triton:1", kernel.source
    out = run_kernel(kernel, program.expand(), tmp_path_factory.mktemp("k"))
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


class CountAndScale(torch.nn.Module):
    """Integer inputs: a scale by an integer tensor, and a count of a mask (int64 output)."""

    def forward(self, x, n):
        return x * n.float() + (n > 2).float(), (x > 0).sum(dim=-1)


def test_groups_reading_integers_stay_in_torch_and_are_right(tmp_path):
    program = from_torch(CountAndScale(), (torch.randn(3, 5), torch.arange(15).reshape(3, 5)))
    assert [program.nodes[o].dtype.name for o in program.outputs] == ["fp32", "int64"]
    kernel = emit(candidate_for(program, H200), H200, "k")
    assert kernel.meta["lowering"].startswith("torch") and INTEGERS.split(":")[0] in kernel.source
    out = run_kernel(kernel, program.expand(), tmp_path)
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


def test_the_harness_draws_masks_and_small_nonzero_integers_and_compares_them_exactly():
    specs = [("m", (4, 6), "bool"), ("n", (4, 6), "int64"), ("k", (5,), "int32")]
    m, n, k = harness.make_inputs(specs, seed=3)
    assert m.dtype == torch.bool and 0 < int(m.sum()) < m.numel()
    assert n.dtype == torch.int64 and k.dtype == torch.int32
    assert bool(((n.abs() >= 1) & (n.abs() <= 8)).all()) and bool((k != 0).all())
    assert harness.compare(m, m.double(), 0.0)[0] == "ok"
    flipped = m.clone()
    flipped[0, 0] = ~flipped[0, 0]
    assert harness.compare(flipped, m.double(), 0.0)[0] == "over"


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_other_integer_dtypes_are_refused_with_one_line(dtype):
    with pytest.raises(ax.errors.DtypeError, match=dtype):
        ax.Tensor[4, dtype]


class Indexed(torch.nn.Module):
    """Class-index targets, an embedding lookup and an argmax: integer inputs drawn in range by the harness."""

    def __init__(self, classes: int, dim: int):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(classes, dim))

    def forward(self, x, target, tokens):
        loss = torch.nn.functional.cross_entropy(x, target, label_smoothing=0.1)
        return loss + torch.nn.functional.embedding(tokens, self.table).sum(), x.argmax(dim=1)


@settings(max_examples=max(2, EXAMPLES // 2), deadline=None)
@given(n=st.integers(1, 7), classes=st.integers(1, 9), dim=st.integers(1, 5))
def test_index_inputs_are_drawn_in_range_and_the_kernels_match(tmp_path_factory, n, classes, dim):
    program = from_torch(Indexed(classes, dim), (torch.randn(n, classes), torch.randint(0, classes, (n,)),
                                                 torch.randint(0, classes, (2, 3))))
    specs = {s["name"]: s for s in harness_specs(program)}
    assert specs["target"]["high"] == classes and specs["tokens"]["high"] == classes
    kernel = emit(candidate_for(program, H200), H200, "k")
    out = run_kernel(kernel, program.expand(), tmp_path_factory.mktemp("k"))
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


class Sorted(torch.nn.Module):
    """sort / topk (torch's kernels, library groups) with our element-wise kernels around them, their indices,
    and bit operations on an integer input."""

    def __init__(self, k: int, axis: int, descending: bool):
        super().__init__()
        self.k, self.axis, self.descending = k, axis, descending

    def forward(self, x, n):
        values, order = torch.sort(torch.tanh(x) * 3.0, dim=self.axis, descending=self.descending)
        top = torch.topk(x.exp(), self.k, dim=self.axis).values
        bits = (n & 6) ^ (n << 2) | ~n
        return values + 1.0, top.sum(dim=self.axis) * 0.5, order, bits


@settings(max_examples=max(2, EXAMPLES // 2), deadline=None)
@given(shape=st.lists(st.integers(1, 7), min_size=2, max_size=3), data=st.data())
def test_sorting_and_bit_operations_run_and_match(tmp_path_factory, shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    k = data.draw(st.integers(1, shape[axis]))
    module = Sorted(k, axis, data.draw(st.booleans()))
    program = from_torch(module, (torch.randn(*shape), torch.randint(-9, 9, shape)))
    assert {"sort", "argsort", "topk", "bitwise_xor"} <= {node.op for node in program.nodes}
    kernel = emit(candidate_for(program, H200), H200, "k")
    assert "torch.sort(" in kernel.source and "torch.topk(" in kernel.source
    out = run_kernel(kernel, program.expand(), tmp_path_factory.mktemp("k"))
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


class Gathered(torch.nn.Module):
    """Reads at integer indices: gather, take_along_dim (with and without dim), index_select and an embedding
    (2-d token ids, through a reshape), each fused with element-wise work around it."""

    def __init__(self, classes: int, dim: int):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(classes, dim))

    def forward(self, x, picks, tokens):
        rows = torch.nn.functional.embedding(tokens, self.table) * 2.0
        chosen = torch.gather(torch.tanh(x), 1, picks) + torch.take_along_dim(x, picks, dim=1)
        flat = torch.take_along_dim(x.exp(), picks)
        return rows + 1.0, chosen, flat, torch.index_select(x, 1, tokens[0]) - 0.5


@settings(max_examples=max(2, EXAMPLES // 2), deadline=None)
@given(n=st.integers(1, 6), classes=st.integers(1, 8), dim=st.integers(1, 5), width=st.integers(1, 4),
       length=st.integers(1, 4))
def test_gathers_load_their_indices_as_integers_in_triton_and_match(tmp_path_factory, n, classes, dim, width, length):
    """The index is loaded as an integer and addresses the gathered tensor inside our element-wise kernels
    (no group of these falls back to torch), exactly equal to the float64 reference."""
    program = from_torch(Gathered(classes, dim), (torch.randn(n, classes), torch.randint(0, classes, (n, width)),
                                                  torch.randint(0, classes, (2, length))))
    kernel = emit(candidate_for(program, H200), H200, "k")
    assert kernel.meta["lowering"].startswith("triton:") and "torch" not in kernel.meta["lowering"], kernel.source
    assert "ix" in kernel.source and "INTEGERS" not in kernel.source
    out = run_kernel(kernel, program.expand(), tmp_path_factory.mktemp("k"))
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


class Rounded(torch.nn.Module):
    """Rounding, sign and the trigonometric functions fused in one element-wise kernel (halves included:
    torch.round takes them to the even integer)."""

    def forward(self, x):
        return (torch.floor(x) + torch.ceil(x) * 2.0 + torch.round(x) * 3.0 + torch.trunc(x) * 5.0 + torch.sign(x)
                + torch.sin(x) + torch.cos(x * 0.5))


@settings(max_examples=max(2, EXAMPLES // 2), deadline=None)
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=3), halves=st.booleans())
def test_rounding_and_trigonometry_in_one_kernel_match(tmp_path_factory, shape, halves):
    x = torch.randn(*shape) * 4.0
    program = from_torch(Rounded(), (torch.round(x * 2.0) / 2.0 if halves else x,))
    kernel = emit(candidate_for(program, H200), H200, "k")
    assert kernel.meta["lowering"] == "triton:1", kernel.source
    assert "tl.floor(" in kernel.source and "tl.sin(" in kernel.source
    out = run_kernel(kernel, program.expand(), tmp_path_factory.mktemp("k"))
    assert out.status == "ok", f"{out.error}\n{kernel.source}"


def test_round_takes_halves_to_even_and_keeps_large_values(tmp_path):
    """The rounding expression itself (under TRITON_INTERPRET=1) on the values that matter: halves of both signs,
    just below a half, odd integers past 2**23 (where x + 0.5 would round), huge values."""
    import importlib.util

    import numpy as np

    from axon_eg.backends.triton.tl_expressions import ELEMENTWISE

    path = tmp_path / "round_kernel.py"
    path.write_text(f"""
import triton
import triton.language as tl


@triton.jit
def k(x, out, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    v = tl.load(x + offs)
    tl.store(out + offs, {ELEMENTWISE['round'](['v'], {})})
""")
    spec = importlib.util.spec_from_file_location("round_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    values = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 2.0**23 + 1, -(2.0**23) - 3, 3.7, -3.7, 0.0,
                           1e30, -1e30, 2.0**22 + 0.5, 7.5], dtype=torch.float32)
    out = torch.empty_like(values)
    module.k[(1,)](values, out, BLOCK=16)
    np.testing.assert_array_equal(out.numpy(), torch.round(values).numpy())


class EmbeddingBag(torch.nn.Module):
    """Token embeddings averaged over the sequence: the lookup fuses into the reduction that reads it."""

    def __init__(self, vocab: int, dim: int):
        super().__init__()
        self.table = torch.nn.Embedding(vocab, dim)

    def forward(self, tokens, x):
        return self.table(tokens).mean(dim=1) * x + torch.gather(x, 1, tokens[:, :1]).sum(dim=1, keepdim=True)


@settings(max_examples=max(2, EXAMPLES // 2), deadline=None)
@given(batch=st.integers(1, 4), length=st.integers(1, 7), vocab=st.integers(1, 9), dim=st.integers(1, 6),
       block=st.sampled_from([None, 4]))
def test_a_gather_fuses_into_the_reduction_that_reads_it(tmp_path_factory, batch, length, vocab, dim, block):
    """A gather is element-wise work for the fusion planner: a plan with the embedding lookup inside the row
    reduction (the gathered rows never written) lowers to Triton alone (its index loaded as an integer, the
    reduction's chunk loop where BLOCK_N is short) and equals the float64 reference."""
    from axon_eg.extract.fusion import REDUCTION, plans

    program = from_torch(EmbeddingBag(vocab, dim), (torch.randint(0, vocab, (batch, length)), torch.randn(batch, dim)))
    expanded = program.expand()
    fused = [k for k, p in enumerate(plans(expanded)) if any(
        g.kind == REDUCTION and {"index_select", "mean"} <= {expanded.nodes[n].op for n in g.nodes} for g in p.groups)]
    assert fused, [[(g.kind, g.nodes) for g in p.groups] for p in plans(expanded)]
    kernel = emit(candidate_for(program, H200, fused[0], {"BLOCK_N": block} if block else None), H200, "k")
    assert kernel.meta["lowering"].startswith("triton:") and "torch" not in kernel.meta["lowering"], kernel.source
    out = run_kernel(kernel, expanded, tmp_path_factory.mktemp("k"))
    assert out.status == "ok", f"{out.error}\n{kernel.source}"
