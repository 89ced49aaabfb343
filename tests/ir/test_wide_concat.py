"""n-ary joins of any arity (issue 49): torch.cat / torch.stack of 1 to 64 tensors import, and a concat wider than
the νGraph's constructors (``schema.MAX_VARIADIC``) enters it as a balanced tree of concats (``Program.nest_wide``:
exact, concat is associative), from which extraction and the whole pipeline still give the original's values."""

from __future__ import annotations

import math
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # the selected kernel runs here, on the CPU

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import axon_eg as ax
from axon_eg.egraph.nugraph import Limits, NuGraph
from axon_eg.egraph.schema import MAX_VARIADIC
from axon_eg.ir import ops as O
from axon_eg.ir.builder import Builder
from axon_eg.ir.inputs import random_inputs
from axon_eg.rules_discovered.store import load_rules

SIZES = st.sampled_from([1, 2, 3, 5])  # 1 and odd sizes


class Join(torch.nn.Module):
    """``torch.cat`` of the inputs along ``cat_dim`` and ``torch.stack`` of equally shaped ones along ``stack_dim``
    (doubled, so an element-wise op reads each join)."""

    def __init__(self, n_cat: int, cat_dim: int, stack_dim: int):
        super().__init__()
        self.n_cat, self.cat_dim, self.stack_dim = n_cat, cat_dim, stack_dim

    def forward(self, *xs):
        return (torch.cat(xs[:self.n_cat], dim=self.cat_dim) * 2,
                torch.relu(torch.stack(xs[self.n_cat:], dim=self.stack_dim)))


@st.composite
def joins(draw):
    """A Join of 1 to 64 tensors per join, rank 1 to 3, its axes drawn negative too, and never-zero float32 inputs."""
    rank = draw(st.integers(1, 3))
    base = draw(st.lists(SIZES, min_size=rank, max_size=rank))
    cat_dim = draw(st.integers(-rank, rank - 1))
    stack_dim = draw(st.integers(-rank - 1, rank))
    n_cat, n_stack = draw(st.integers(1, 64)), draw(st.integers(1, 64))
    shapes = [tuple(draw(SIZES) if i == cat_dim % rank else d for i, d in enumerate(base)) for _ in range(n_cat)]
    shapes += [tuple(base)] * n_stack
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    inputs = []
    for shape in shapes:
        x = rng.standard_normal(shape)
        x[x == 0.0] = 1.0
        inputs.append(torch.from_numpy(x).float())
    return Join(n_cat, cat_dim, stack_dim), tuple(inputs)


def _outputs(program, inputs):
    out = ax.interpret(program, inputs)
    return out if isinstance(out, tuple) else (out,)


def _widest(program) -> int:
    return max(len(n.inputs) for n in program.nodes if n.op == "concat")


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(joins())
def test_cat_and_stack_of_any_arity_import_and_extract_exactly(case):
    module, inputs = case
    program = ax.from_torch(module, inputs)
    with torch.no_grad():
        want = module(*[x.double() for x in inputs])
    got = _outputs(program, [x.double().numpy() for x in inputs])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w.numpy())  # joins, doubling and relu are exact in float64

    graph = NuGraph(program, load_rules())
    assert _widest(graph.program) <= MAX_VARIADIC
    graph.saturate(Limits(iterations=3, nodes=5_000, seconds=0.5))
    variants = graph.extract(2)
    assert variants
    values = random_inputs(program, seed=1)
    for variant in variants:
        for g, w in zip(_outputs(variant.program, values), _outputs(program, values), strict=True):
            np.testing.assert_array_equal(g, w)


def _wide(n: int, rows: int | str = 2) -> tuple[Builder, list, object]:
    """A builder with ``n`` inputs (rows, 1 + i % 3) and their concat along the last axis."""
    b = Builder(f"concat{n}")
    xs = [b.input(f"x{i}", (rows, 1 + i % 3), "fp32") for i in range(n)]
    return b, xs, b.emit("concat", *xs, axis=-1)


@pytest.mark.parametrize("n, max_inputs", [(9, 8), (35, 8), (64, 8), (65, 8), (7, 2), (64, 4)])
def test_nest_wide_is_a_balanced_tree_of_consecutive_groups(n, max_inputs):
    b, xs, cat = _wide(n)
    program = b.build(b.emit("relu", cat))
    nested = program.nest_wide(max_inputs)
    concats = [i for i, node in enumerate(nested.nodes) if node.op == "concat"]
    assert all(len(nested.nodes[i].inputs) <= max_inputs for i in concats)
    assert all(nested.nodes[i].attrs["axis"] == 1 for i in concats)

    def leaves(i: int) -> list[int]:  # the inputs under node i, left to right, and the depth
        node = nested.nodes[i]
        return [i] if node.op != "concat" else [j for k in node.inputs for j in leaves(k)]

    def depth(i: int) -> int:
        node = nested.nodes[i]
        return 0 if node.op != "concat" else 1 + max(depth(k) for k in node.inputs)

    top = nested.nodes[nested.outputs[0]].inputs[0]
    assert [nested.nodes[i].attrs["name"] for i in leaves(top)] == [f"x{i}" for i in range(n)]
    assert depth(top) == math.ceil(math.log(n, max_inputs) - 1e-9)
    sizes = [len(leaves(k)) for k in nested.nodes[top].inputs]  # balanced: group sizes differ by at most one
    assert len(sizes) == max_inputs and max(sizes) - min(sizes) <= 1
    values = random_inputs(program, seed=0)
    np.testing.assert_array_equal(_outputs(nested, values)[0], _outputs(program, values)[0])
    assert nested.output_shapes() == program.output_shapes()


def test_nest_wide_keeps_narrow_programs_and_symbolic_dims():
    b, xs, cat = _wide(MAX_VARIADIC)
    narrow = b.build(cat)
    assert narrow.nest_wide(MAX_VARIADIC) is narrow
    with pytest.raises(ValueError, match="max_inputs"):
        narrow.nest_wide(1)
    b, xs, cat = _wide(20, rows="M")  # symbolic rows, bound later
    rows = b.emit("concat", *[xs[0]] * 4, *xs[::3], axis=0)  # 11 tensors (M, 1) along M, one of them 5 times
    program = b.build([b.emit("exp", cat), rows]).bind(M=3)
    nested = program.nest_wide(MAX_VARIADIC)
    assert _widest(nested) <= MAX_VARIADIC and nested.bindings == {"M": 3}
    assert [nested.nodes[o].shape for o in nested.outputs] == [program.nodes[o].shape for o in program.outputs]
    values = random_inputs(program, seed=0)
    for got, want in zip(_outputs(nested, values), _outputs(program, values), strict=True):
        np.testing.assert_array_equal(got, want)
    assert O.nestable() == ("concat",)


def test_mixed_dtypes_are_cast_to_the_promoted_dtype_before_nesting():
    """int64 next to fp16 in one group would make an fp16 inner concat, rounding the integers; the node converts
    each input to its promoted dtype (fp32), and so does every node of the tree."""
    b = Builder("mixed")
    dtypes = ["int64", "fp16", "fp32", "bool"]
    xs = [b.input(f"x{i}", (2, 1 + i % 3), dtypes[i % 4]) for i in range(11)]
    program = b.build(b.emit("concat", *xs, axis=1))
    nested = program.nest_wide(4)
    assert _widest(nested) <= 4 and nested.nodes[nested.outputs[0]].dtype.name == "fp32"
    assert {n.dtype.name for n in nested.nodes if n.op == "concat"} == {"fp32"}
    assert sum(n.op == "cast" for n in nested.nodes) == 8
    values = random_inputs(program, seed=0)
    np.testing.assert_array_equal(_outputs(nested, values)[0], _outputs(program, values)[0])


def test_a_35_input_concat_runs_end_to_end(tmp_path, monkeypatch):
    """DenseNet's widest join: 35 tensors concatenated, then an element-wise op, through the whole pipeline."""
    from axon_eg import pipeline
    from axon_eg.backends.kernel import input_specs
    from axon_eg.measure import harness

    monkeypatch.setenv("AXON_EG_FORCE_CPU", "1")
    b, xs, cat = _wide(35)
    program = b.build(b.emit("relu", cat))
    result = pipeline.saturate_and_extract(program, k=1, cache_dir=tmp_path, device="cpu", saturation_s=0.3)
    assert result.best.kind == "candidate"
    inputs = harness.make_inputs(input_specs(program), 0)
    got = result.best(*inputs)
    want = ax.interpret(program, [x.double().numpy() for x in inputs])
    np.testing.assert_allclose(got.double().numpy(), want, rtol=1e-6, atol=1e-6)
