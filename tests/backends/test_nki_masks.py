"""Masks (legacy ``neuronxcc.nki``): index expressions that reach past a tensor on the last partial tile, with
a ``mask=`` that leaves those elements out, as the NKI tutorials write partial tiles."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from axon_eg.backends.nki.isa import NkiSimulationError, NkiUninitializedError
from axon_eg.backends.nki.simulator import simulate

HEADER = "import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\nimport neuronxcc.nki.isa as nisa\n"

ROWS = HEADER + '''
@nki.jit
def kernel(a, b):
    """out = (a + b) * rowsum(a + b), and rowmax(a) in a second output: 128-row tiles, the last one partial."""
    n, m = a.shape
    out = nl.ndarray((n, m), dtype=a.dtype, buffer=nl.shared_hbm)
    top = nl.ndarray((n, 1), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(m)[None, :]
    for k in nl.affine_range((n + 127) // 128):
        rows = k * 128 + i_p < n
        x = nl.load(a[k * 128 + i_p, i_f], mask=rows)
        y = nl.load(b[k * 128 + i_p, i_f], mask=rows)
        z = nl.add(x, y, mask=rows)
        s = nl.sum(z, axis=1, keepdims=True, mask=rows)
        w = nisa.tensor_scalar(z, nl.multiply, s, mask=rows)
        nl.store(out[k * 128 + i_p, i_f], value=w, mask=rows)
        t = nisa.tensor_reduce(nl.max, x, axis=1, keepdims=True, mask=rows)
        nl.store(top[k * 128 + i_p, 0], value=t, mask=rows)
    return out, top
'''

COLUMNS = HEADER + '''
@nki.jit
def kernel(a):
    """Row minimum and exp over the first m of each 512-column chunk: a free-axis mask on the last chunk."""
    n, m = a.shape
    out = nl.ndarray((n, m), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(n)[:, None]
    i_f = nl.arange(512)[None, :]
    for j in nl.affine_range((m + 511) // 512):
        cols = j * 512 + i_f < m
        x = nl.load(a[i_p, j * 512 + i_f], mask=cols)
        e = nisa.activation(nl.exp, x, mask=cols)
        nl.store(out[i_p, j * 512 + i_f], value=e, mask=cols)
    return out
'''


def values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return (rng.uniform(0.25, 1.0, shape) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 300), m=st.integers(1, 40), seed=st.integers(0, 2**31), target=st.sampled_from(["trn1", "trn2"]))
def test_masked_partial_row_tiles_match_numpy(n, m, seed, target):
    rng = np.random.default_rng(seed)
    a, b = values(rng, (n, m)), values(rng, (n, m))
    out, top = simulate(ROWS, a, b, target=target)
    z = a.astype(np.float64) + b
    np.testing.assert_allclose(out, z * z.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(top[:, 0], a.max(axis=1))


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 128), m=st.integers(1, 1200), seed=st.integers(0, 2**31))
def test_masked_partial_column_chunks_match_numpy(n, m, seed):
    a = values(np.random.default_rng(seed), (n, m))
    np.testing.assert_allclose(simulate(COLUMNS, a, target="trn2"), np.exp(a.astype(np.float64)), rtol=1e-5)


def test_an_index_past_the_tensor_without_a_mask_names_the_line():
    src = ROWS.replace("x = nl.load(a[k * 128 + i_p, i_f], mask=rows)", "x = nl.load(a[k * 128 + i_p, i_f])")
    with pytest.raises(IndexError, match=r"load: src .* indexes 2240 elements past input0 \[200, 40\] \(first at "
                                         r"\(72, 0\)\); leave them out with mask=") as info:
        simulate(src, np.ones((200, 40), np.float32), np.ones((200, 40), np.float32))
    assert any("line 15" in n for n in info.value.__notes__)


def test_a_mask_that_keeps_elements_past_the_tensor_is_refused():
    src = ROWS.replace("x = nl.load(a[k * 128 + i_p, i_f], mask=rows)",
                       "x = nl.load(a[k * 128 + i_p, i_f], mask=(k * 128 + i_p < n + 1))")
    with pytest.raises(IndexError, match=r"load: src .* indexes 40 elements past input0 \[200, 40\] \(first at "
                                         r"\(72, 0\)\) that the mask does not leave out"):
        simulate(src, np.ones((200, 40), np.float32), np.ones((200, 40), np.float32))


def test_reading_what_the_mask_left_unwritten_is_refused():
    src = ROWS.replace("z = nl.add(x, y, mask=rows)", "z = nl.add(x, y)")
    with pytest.raises(NkiUninitializedError, match=r"tensor_tensor: data1 reads 3360 of 5120 elements that no "
                                                    r"instruction wrote"):
        simulate(src, np.ones((300, 40), np.float32), np.ones((300, 40), np.float32))


def test_a_masked_store_leaves_the_rest_of_the_output_alone():
    src = HEADER + '''
@nki.jit
def kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(8)[None, :]
    x = nl.load(a)
    nl.store(out, value=nl.negative(x))
    nl.store(out[i_p, i_f], value=x, mask=(i_f < 3) & (i_p >= 100))
    return out
'''
    a = values(np.random.default_rng(0), (128, 8))
    want = -a
    want[100:, :3] = a[100:, :3]
    np.testing.assert_array_equal(simulate(src, a), want)


def test_masks_are_legacy_only_and_must_be_boolean():
    current = ("import nki\nimport nki.language as nl\n\n@nki.jit\ndef kernel(a):\n"
               "    t = nl.load(a, mask=True)\n    return a\n")
    with pytest.raises(NkiSimulationError, match=r"nl.load: mask= is legacy NKI"):
        simulate(current, np.ones((4, 4), np.float32))
    legacy = HEADER + "\n@nki.jit\ndef kernel(a):\n    t = nl.load(a, mask=nl.arange(4)[:, None] + 1)\n    return a\n"
    with pytest.raises(NkiSimulationError, match=r"nl.load: mask must be a boolean expression"):
        simulate(legacy, np.ones((4, 4), np.float32))
    shaped = HEADER + "\n@nki.jit\ndef kernel(a):\n    t = nl.load(a, mask=nl.arange(3)[:, None] < 2)\n    return a\n"
    with pytest.raises(NkiSimulationError, match=r"load: mask of shape \[3, 1\] does not fit src of shape \[4, 4\]"):
        simulate(shaped, np.ones((4, 4), np.float32))
