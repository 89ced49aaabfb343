"""The benchmark suite: its shape (sizes, kinds, names) and every program against its PyTorch baseline.

Each program is interpreted in float64 (with composites as they are and expanded into primitives) and
compared with its independent PyTorch baseline evaluated in float64, on random inputs and on random
small sizes drawn by hypothesis.
"""

from __future__ import annotations

import types
from collections import Counter

import numpy as np
import pytest
import torch
from benchmarks import suite as suite_module
from benchmarks.suite import SUITE, SuiteProgram, get
from hypothesis import assume, given
from hypothesis import strategies as st

from axon_eg.errors import ProgramError, ShapeError
from axon_eg.ir import ops as O
from axon_eg.ir.dtypes import bf16
from axon_eg.ir.inputs import random_inputs
from axon_eg.ir.interpret import interpret
from axon_eg.ir.program import Program

ENTRIES = pytest.mark.parametrize("entry", SUITE, ids=[e.name for e in SUITE])
seeds = st.integers(min_value=0, max_value=2**32 - 1)


def assert_matches_torch(entry: SuiteProgram, program: Program, seed: int) -> None:
    """interpret(program) == torch_fn in float64, with composites kept and expanded."""
    inputs = random_inputs(program, seed)
    assert all(np.all(x != 0.0) for x in inputs.values()), "random inputs must never be zero"
    tensors = [torch.from_numpy(inputs[spec.name]) for spec in program.inputs]
    want = entry.torch_fn(*tensors)
    assert want.dtype == torch.float64
    want = want.numpy()
    assert np.isfinite(want).all(), f"{entry.name}: the baseline is not finite at {program.bindings}"
    for expand in (False, True):
        got = interpret(program, inputs, expand=expand)
        assert got.shape == want.shape, f"{entry.name} (expand={expand}) at {program.bindings}"
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-10,
                                   err_msg=f"{entry.name} (expand={expand}) at {program.bindings}, seed {seed}")


# ------------------------------------------------------------------------------------------------
# The suite's shape
# ------------------------------------------------------------------------------------------------
def test_suite_has_enough_unique_programs_of_both_kinds():
    names = [e.name for e in SUITE]
    assert len(SUITE) >= 22
    assert len(set(names)) == len(names), Counter(names).most_common(3)
    kinds = Counter(e.kind for e in SUITE)
    assert set(kinds) <= {"single", "multi"}
    assert kinds["single"] >= 11 and kinds["multi"] >= 11, kinds
    assert all(isinstance(e, SuiteProgram) and e.description for e in SUITE)


def test_required_programs_are_present():
    required = {"silu", "gelu", "add", "softmax", "rmsnorm", "layernorm", "cumsum", "rope", "transpose", "sum",
                "matmul", "transpose_matmul", "rmsnorm_matmul", "matmul_bias_gelu", "gated_mlp", "gqa",
                "sum_matmul", "linear_min_sub", "linear_batchnorm", "lora", "residual_rmsnorm", "layernorm_matmul"}
    assert required <= {e.name for e in SUITE}


def test_get_finds_every_program_and_lists_the_names_otherwise():
    for entry in SUITE:
        assert get(entry.name) is entry
    with pytest.raises(KeyError) as info:
        get("no_such_program")
    assert "rmsnorm" in str(info.value) and "no_such_program" in str(info.value)


@ENTRIES
def test_sizes_and_small_bind_every_free_dim(entry: SuiteProgram):
    program = entry.program
    assert not program.bindings, "suite programs are symbolic; sizes live in .sizes and .small"
    assert set(entry.sizes) == program.free_dims
    assert set(entry.small) == program.free_dims
    big, small = entry.bound(small=False), entry.bound()
    assert big.bindings == entry.sizes and small.bindings == entry.small
    assert all(d >= 1 for shape in big.output_shapes() for d in shape)
    assert all(v <= 16 for v in entry.small.values()), "CI sizes must stay tiny"


@ENTRIES
def test_programs_are_bf16_and_expand_to_primitives(entry: SuiteProgram):
    program = entry.program
    assert all(spec.dtype == bf16 for spec in program.inputs)
    assert all(program.nodes[o].dtype == bf16 for o in program.outputs)
    assert all(O.get(n.op).kind is not O.OpKind.COMPOSITE for n in program.expand().nodes)


def test_program_hashes_are_distinct():
    for programs in ([e.program for e in SUITE], [e.bound() for e in SUITE]):
        hashes = [p.hash for p in programs]
        assert len(set(hashes)) == len(hashes)
    assert len({hash(e) for e in SUITE}) == len(SUITE)


def _referenced_functions(fn: types.FunctionType) -> list[types.FunctionType]:
    """``fn`` and the module-level functions of the suite it calls (transitively)."""
    seen, stack = [], [fn]
    while stack:
        f = stack.pop()
        if f in seen:
            continue
        seen.append(f)
        for name in f.__code__.co_names:
            g = f.__globals__.get(name)
            if isinstance(g, types.FunctionType) and g.__module__ == suite_module.__name__:
                stack.append(g)
    return seen


@ENTRIES
def test_baseline_is_plain_torch(entry: SuiteProgram):
    for f in _referenced_functions(entry.torch_fn):
        assert "ax" not in f.__code__.co_names, f"{entry.name}: the baseline {f.__name__} calls axon_eg"
    assert entry.torch_fn.__code__.co_argcount == len(entry.program.inputs)


# ------------------------------------------------------------------------------------------------
# Programs against their baselines
# ------------------------------------------------------------------------------------------------
@ENTRIES
@given(seed=seeds)
def test_interpret_matches_torch_at_small_sizes(entry: SuiteProgram, seed: int):
    assert_matches_torch(entry, entry.bound(), seed)


@ENTRIES
@given(data=st.data(), seed=seeds)
def test_interpret_matches_torch_at_random_sizes(entry: SuiteProgram, data: st.DataObject, seed: int):
    sizes = data.draw(st.fixed_dictionaries({d: st.integers(1, 9) for d in sorted(entry.small)}), label="sizes")
    try:
        program = entry.program.bind(sizes)
    except (ShapeError, ProgramError):
        assume(False)  # e.g. an odd rotary dim
    assert_matches_torch(entry, program, seed)


@ENTRIES
def test_h200_output_shape_and_dtype_match_torch(entry: SuiteProgram):
    big = entry.bound(small=False)
    inputs = [torch.empty(big.concrete_shape(i), dtype=torch.bfloat16, device="meta") for i in big.input_ids]
    out = entry.torch_fn(*inputs)  # meta tensors: shapes only, no memory
    assert [tuple(out.shape)] == big.output_shapes()
    assert out.dtype == torch.bfloat16


# ------------------------------------------------------------------------------------------------
# Helpers other stages use
# ------------------------------------------------------------------------------------------------
@ENTRIES
def test_torch_inputs_follow_random_inputs(entry: SuiteProgram):
    program = entry.bound()
    arrays = random_inputs(program, 3)
    low = entry.torch_inputs(seed=3)
    exact = entry.torch_inputs(seed=3, dtype=torch.float64)
    assert [tuple(t.shape) for t in low] == [program.concrete_shape(i) for i in program.input_ids]
    assert all(t.dtype == torch.bfloat16 and t.device.type == "cpu" for t in low)
    for spec, t in zip(program.inputs, exact):
        np.testing.assert_array_equal(t.numpy(), arrays[spec.name])
    assert all(bool((t != 0).all()) for t in low)


@ENTRIES
def test_torch_module_calls_the_baseline(entry: SuiteProgram):
    module = entry.torch_module()
    assert isinstance(module, torch.nn.Module)
    inputs = entry.torch_inputs(dtype=torch.float64)
    torch.testing.assert_close(module(*inputs), entry.torch_fn(*inputs), rtol=0, atol=0)
