"""The importer's index arithmetic (issue 49's corpus gaps) against torch in float64, as properties over random
shapes (sizes 1 and odd among them) and never-zero values: advanced indexing by integer tensors, torch.roll,
torch.diff, F.interpolate in every mode (taps read from torch itself), the recurrent cells; what is refused
says why; and the corpus models have no aten op the importer lacks."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from axon_eg.errors import UnsupportedOperation
from axon_eg.ir.interpret import interpret
from axon_eg.ir.torch_import import from_torch, import_torch

SIZES = st.sampled_from([1, 2, 3, 5])
SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class Fn(nn.Module):
    def __init__(self, fn, **modules):
        super().__init__()
        self.fn = fn
        for k, v in modules.items():
            setattr(self, k, v)

    def forward(self, *xs):
        return self.fn(self, *xs)


def values(draw, shape: tuple[int, ...], dtype=torch.float32) -> torch.Tensor:
    """Never-zero N(0, 1) values, seeded by hypothesis."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal(shape)
    x[x == 0.0] = 1.0
    return torch.from_numpy(x).to(dtype)


def compare(module: nn.Module, inputs: tuple, rtol: float = 1e-10, atol: float = 1e-12):
    """The imported program interpreted in float64 against the module run in float64; returns the program."""
    with torch.no_grad():
        want = copy.deepcopy(module).double()(*[x.double() if x.is_floating_point() else x for x in inputs])
    imported = import_torch(module, inputs)
    users = [s.name for s in imported.program.inputs if s.role == "input"]
    feed = {**imported.state, **{u: x.double().numpy() if x.is_floating_point() else x.numpy()
                                 for u, x in zip(users, inputs)}}
    got = interpret(imported.program, feed)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=rtol, atol=atol)
    return imported.program


def ops(program) -> list[str]:
    return [n.op for n in program.nodes if n.op not in ("input", "constant")]


# -- advanced indexing ------------------------------------------------------------------------------------
@st.composite
def indexings(draw):
    """x of rank 1-4 and an index list over its leading axes: None (the whole axis) or an integer tensor (int64 or
    int32, entries in [-n, n)), the tensors' shapes broadcasting to one block shape of rank 0-2."""
    shape = tuple(draw(st.lists(SIZES, min_size=1, max_size=4)))
    block = tuple(draw(st.lists(SIZES, min_size=0, max_size=2)))
    count = draw(st.integers(1, len(shape)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    indices = []
    for k in range(count):
        if k and draw(st.booleans()) and draw(st.booleans()):
            indices.append(None)
            continue
        keep = len(block) - draw(st.integers(0, len(block)))  # fewer leading dims broadcast too
        ishape = tuple(d if draw(st.booleans()) else 1 for d in block[len(block) - keep:])
        dtype = draw(st.sampled_from([torch.int64, torch.int32]))
        indices.append(torch.from_numpy(rng.integers(-shape[k], shape[k], ishape)).to(dtype))
    if all(i is None for i in indices):
        indices[0] = torch.from_numpy(rng.integers(-shape[0], shape[0], block))
    return values(draw, shape), indices


@SETTINGS
@given(indexings())
def test_advanced_indexing_is_numpys_rule_as_one_gather(case):
    x, indices = case
    tensors = [i for i in indices if i is not None]
    where = [k for k, i in enumerate(indices) if i is not None]

    def f(m, x, *ix):
        full = [None] * len(indices)
        for k, i in zip(where, ix):
            full[k] = i
        return torch.ops.aten.index.Tensor(x, full) * 2

    if tensors[-1].ndim == 0 and torch.broadcast_shapes(*(i.shape for i in tensors)):
        with pytest.raises(UnsupportedOperation, match=r"aten\.index\.Tensor.*0-d index tensor after"):
            from_torch(Fn(f), (x, *tensors))  # torch.export's shape for it is the last index's: wrong
        return
    program = compare(Fn(f), (x, *tensors), rtol=0, atol=0)
    assert ops(program).count("index_select") == 1  # the indexed axes merged, their indices combined


def test_constant_indices_are_not_wrapped_and_a_mask_index_is_refused():
    def f(m, x):
        n = x.shape[0]
        return x[torch.arange(n)[:, None], torch.arange(n - 1, -1, -1)]

    program = compare(Fn(f), (torch.randn(3, 3),), rtol=0, atol=0)
    assert "where" not in ops(program)  # torch.arange's values are constants of the program, none negative
    with pytest.raises(UnsupportedOperation, match=r"aten\.index\.Tensor.*boolean mask.*data-dependent"):
        from_torch(Fn(lambda m, x: x[x[:, 0] > 0]), (torch.randn(3, 2),))


# -- roll and diff ---------------------------------------------------------------------------------------
@st.composite
def rolls_and_diffs(draw):
    shape = tuple(draw(st.lists(SIZES, min_size=1, max_size=3)))
    axes = draw(st.lists(st.integers(-len(shape), len(shape) - 1), min_size=0, max_size=len(shape), unique_by=lambda
                         a: a % len(shape)))
    shifts = [draw(st.integers(-7, 7)) for _ in axes] or [draw(st.integers(-7, 7))]
    dim = draw(st.integers(-len(shape), len(shape) - 1))
    size = shape[dim]
    extra = [draw(st.integers(0, 2)) for _ in range(2)]
    n = draw(st.integers(0, size + sum(extra) - 1))
    pieces = [values(draw, tuple(e if k == dim % len(shape) else d for k, d in enumerate(shape))) if e else None
              for e in extra]
    return values(draw, shape), axes, shifts, dim, n, pieces


@SETTINGS
@given(rolls_and_diffs())
def test_roll_and_diff_match_torch(case):
    x, axes, shifts, dim, n, (before, after) = case
    given_pieces = [p for p in (before, after) if p is not None]

    def f(m, x, *pieces):
        it = iter(pieces)
        pre = next(it) if before is not None else None
        post = next(it) if after is not None else None
        rolled = torch.roll(x, shifts, axes) if axes else torch.roll(x, shifts[0])
        return rolled, torch.diff(x, n=n, dim=dim, prepend=pre, append=post), torch.diff(x > 0, dim=dim) \
            if x.shape[dim] > 1 else x

    compare(Fn(f), (x, *given_pieces), rtol=0, atol=0)


def test_a_difference_of_nothing_is_refused():
    with pytest.raises(UnsupportedOperation, match=r"aten\.diff.*empty"):
        from_torch(Fn(lambda m, x: torch.diff(x, n=3)), (torch.randn(2, 3),))


# -- resampling --------------------------------------------------------------------------------------------
MODES = [("nearest", 1), ("nearest", 2), ("nearest", 3), ("nearest-exact", 1), ("nearest-exact", 2),
         ("nearest-exact", 3), ("linear", 1), ("bilinear", 2), ("trilinear", 3), ("bicubic", 2), ("bilinear-aa", 2),
         ("bicubic-aa", 2)]


@st.composite
def interpolations(draw):
    mode, n = draw(st.sampled_from(MODES))
    shape = tuple(draw(st.lists(SIZES, min_size=2 + n, max_size=2 + n)))
    how: dict = {}
    if draw(st.booleans()):
        how["size"] = [draw(st.integers(1, 9)) for _ in range(n)]
        if mode.endswith("-aa") and how["size"][-1] == 1:
            how["size"][-1] = 2  # refused (see below)
    else:
        scales = [draw(st.sampled_from([0.4, 0.5, 0.75, 1.0, 1.3, 1.5, 2.0, 2.5, 3.0])) for _ in range(n)]
        how["scale_factor"] = [s if math.floor(d * s) >= (2 if mode.endswith("-aa") and k == n - 1 else 1) else 2.0
                               for k, (d, s) in enumerate(zip(shape[2:], scales))]
        how["recompute_scale_factor"] = draw(st.sampled_from([None, True]))
    if "linear" in mode or "cubic" in mode:
        how["align_corners"] = draw(st.booleans())
    if mode.endswith("-aa"):
        how["antialias"] = True
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    return values(draw, shape, dtype), mode.removesuffix("-aa"), how


@SETTINGS
@given(interpolations())
def test_interpolate_matches_torch(case):
    x, mode, how = case
    compare(Fn(lambda m, x: F.interpolate(x, mode=mode, **how)), (x,))


def test_integer_nearest_upsampling_is_a_broadcast_and_low_precision_computes_in_float32():
    program = compare(Fn(lambda m, x: F.interpolate(x, scale_factor=(2, 3))), (torch.randn(1, 2, 3, 5),), 0, 0)
    assert "index_select" not in ops(program) and ops(program).count("broadcast_to") == 2
    x = torch.randn(1, 2, 3, 5).to(torch.bfloat16)
    program = from_torch(Fn(lambda m, x: F.interpolate(x, scale_factor=2, mode="bilinear")), (x,))
    casts = [n.dtype.name for n in program.nodes if n.op == "cast"]
    assert casts == ["fp32", "bf16"] and program.nodes[program.outputs[0]].dtype.name == "bf16"


def test_antialiased_resampling_to_width_one_is_refused():
    with pytest.raises(UnsupportedOperation, match=r"_upsample_bilinear2d_aa.*width of 1"):
        from_torch(Fn(lambda m, x: F.interpolate(x, size=(5, 1), mode="bilinear", antialias=True)),
                   (torch.randn(1, 2, 3, 4),))


# -- recurrent cells ---------------------------------------------------------------------------------------
@st.composite
def cells(draw):
    batch = tuple(draw(st.lists(SIZES, min_size=0, max_size=1)))
    i, h = draw(SIZES), draw(SIZES)
    return (draw(st.sampled_from(["lstm", "gru", "tanh", "relu"])), draw(st.booleans()), i, h,
            values(draw, batch + (i,)), values(draw, batch + (h,)), values(draw, batch + (h,)))


@SETTINGS
@given(cells())
def test_recurrent_cells_match_torch(case):
    kind, bias, i, h, x, hx, cx = case
    torch.manual_seed(0)
    if kind == "lstm":
        cell = nn.LSTMCell(i, h, bias)
        module = Fn(lambda m, x, hx, cx: m.cell(x, (hx, cx)), cell=cell)
        inputs: tuple = (x, hx, cx)
    else:
        cell = nn.GRUCell(i, h, bias) if kind == "gru" else nn.RNNCell(i, h, bias, nonlinearity=kind)
        module = Fn(lambda m, x, hx: m.cell(x, hx), cell=cell)
        inputs = (x, hx)
    program = compare(module, inputs)
    assert ops(program).count("linear") == 2


# -- the corpus ------------------------------------------------------------------------------------------
CORPUS = ["unet_interpolate", "swin_block_pair", "lstmcell_decoder", "diffusion_resblock", "hf_bert", "hf_gpt2",
          "hf_llama"]


@pytest.mark.parametrize("name", CORPUS)
def test_corpus_models_that_needed_these_ops_have_none_unhandled(name):
    """benchmarks/importer_gaps.py's worklist was, before: index.Tensor (hf_bert, hf_gpt2, hf_llama, swin),
    diff (hf_gpt2, hf_llama), lstm_cell (lstmcell_decoder), roll (swin), upsample_bilinear2d.vec
    (unet_interpolate); and in the training IR, to.dtype_layout / to.device (diffusion_resblock, the hf models)."""
    pytest.importorskip("benchmarks.models")
    from benchmarks.importer_gaps import unhandled
    from benchmarks.models import MODELS

    if name not in MODELS:
        pytest.skip(f"{name} needs an optional package")
    assert unhandled(name) == set() and unhandled(name, raw=True) == set()


def test_a_recurrent_cell_counts_as_its_two_contractions_in_the_partition():
    """``aten_table.contracts`` counts what an op imports as: the dynamo partition, which caps contractions per
    region (3), then puts one LSTM step (two linears) and its head linear in a region, not four steps (eleven)."""
    from axon_eg import dynamo, partition
    from axon_eg.ir.aten_table import contracts

    assert contracts("aten.lstm_cell.default") == contracts("aten.gru_cell.default") == 2
    assert contracts("aten.linear.default") == 1 and contracts("aten.index.Tensor") == 0
    pytest.importorskip("benchmarks.models")
    from benchmarks.models import MODELS

    spec = MODELS["lstmcell_decoder"]
    exported = dynamo.functional(torch.export.export(spec.build("small"), tuple(spec.inputs("small", 0))))
    regions = [m for name, m in partition.partition(exported.module()).named_children() if name.startswith("fused_")]
    cells = [sum(n.target is torch.ops.aten.lstm_cell.default for n in m.graph.nodes) for m in regions]
    assert sum(cells) == 4 and max(cells) == 1
