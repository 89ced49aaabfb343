"""NKI kernels written the way the NKI documentation and tutorials write them (``tests/data/nki_corpus``, issue 23),
each run in the simulator against NumPy on random inputs (hypothesis over sizes and values, never zeros): vector
add, a tiled matmul with hoisted loads in both dialects, a transpose, softmax, layer norm, RMS norm and fused
self-attention; an RMS norm over any row count with masks on its partial tile (legacy) and the tutorial's layer
norm on ``bn_stats`` / ``bn_aggr`` (current). A kernel that uses only API both dialects document runs in both:
the legacy file is the current one with its imports swapped (``import neuronxcc.nki as nki``), as a user ports
it. Every kernel also passes the documented-API check of its dialect."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from axon_eg.backends.nki import api
from axon_eg.backends.nki.simulator import simulate

CORPUS = Path(__file__).resolve().parents[1] / "data" / "nki_corpus"
TARGET = {"current": "trn2", "legacy": "trn1"}
SWAP = (("import nki.isa as nisa", "import neuronxcc.nki.isa as nisa"),
        ("import nki.language as nl", "import neuronxcc.nki.language as nl"), ("import nki\n", "import neuronxcc.nki as nki\n"))
SHARED = ["vector_add", "transpose", "softmax", "attention"]  # documented alike in both dialects


def source(name: str, dialect: str) -> str:
    path = CORPUS / f"{name}.py"
    if path.exists():  # one file for both dialects
        text = path.read_text()
        if dialect == "legacy":
            for a, b in SWAP:
                text = text.replace(a, b)
        return text
    return (CORPUS / f"{name}_{dialect}.py").read_text()


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _values(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)  # never zero


def case(name: str, data: st.DataObject) -> tuple[list[np.ndarray], np.ndarray]:
    """Random inputs of a corpus kernel (sizes the kernel's tiling takes) and the NumPy result."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    blocks = data.draw(st.integers(1, 3), label="row tiles")
    cols = data.draw(st.sampled_from([1, 7, 64, 200]), label="columns")
    if name == "vector_add":
        a, b = _values(rng, 128 * blocks, cols), _values(rng, 128 * blocks, cols)
        return [a, b], a + b
    if name == "transpose":
        x = _values(rng, data.draw(st.integers(1, 128), label="rows"), data.draw(st.integers(1, 128), label="cols"))
        return [x], x.T
    if name == "softmax":
        x = _values(rng, 128 * blocks, cols) * 3
        return [x], _softmax(x.astype(np.float64))
    if name == "rmsnorm_masked":  # any row count: the last tile partial
        x, w = _values(rng, data.draw(st.integers(1, 300), label="rows"), cols), _values(rng, cols)
        x64 = x.astype(np.float64)
        return [x, w], x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-6) * w
    if name == "layernorm_bn":  # rows longer than one bn_stats chunk (512) too
        cols = data.draw(st.sampled_from([2, 7, 513, 1100]), label="bn columns")
        x, w, b = _values(rng, 128 * blocks, cols) + 2.0, _values(rng, cols), _values(rng, cols)
        x64 = x.astype(np.float64)
        c = x64 - x64.mean(-1, keepdims=True)
        return [x, w, b], c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * w + b
    if name.startswith("rmsnorm"):
        x, w = _values(rng, 128 * blocks, cols), _values(rng, cols)
        x64 = x.astype(np.float64)
        return [x, w], x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-6) * w
    if name.startswith("layernorm"):
        x, w, b = _values(rng, 128 * blocks, cols), _values(rng, cols), _values(rng, cols)
        x64 = x.astype(np.float64)
        c = x64 - x64.mean(-1, keepdims=True)
        return [x, w, b], c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * w + b
    if name == "attention":
        d, seq = data.draw(st.sampled_from([16, 64, 128]), label="d"), data.draw(st.integers(1, 128), label="seq")
        q, k, v = _values(rng, seq, d), _values(rng, seq, d), _values(rng, seq, d)
        p = _softmax(q.astype(np.float64) @ k.T.astype(np.float64) / np.sqrt(d))
        return [np.ascontiguousarray(q.T), np.ascontiguousarray(k.T), v], p @ v
    if name.startswith("matmul"):
        k, m = 128 * data.draw(st.integers(1, 3), label="K tiles"), 128 * data.draw(st.integers(1, 2), label="M tiles")
        n = 512 * data.draw(st.integers(1, 2), label="N tiles")
        lhs_t, rhs = _values(rng, k, m), _values(rng, k, n)
        return [lhs_t, rhs], lhs_t.T.astype(np.float64) @ rhs.astype(np.float64)
    raise AssertionError(name)


KERNELS = [(n, d) for n in SHARED for d in ("current", "legacy")] + [
    ("matmul", "current"), ("matmul", "legacy"), ("rmsnorm", "current"), ("rmsnorm", "legacy"),
    ("layernorm", "current"), ("layernorm", "legacy"), ("rmsnorm_masked", "legacy"), ("layernorm_bn", "current")]


@pytest.mark.parametrize("name, dialect", KERNELS, ids=[f"{n}-{d}" for n, d in KERNELS])
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_corpus_kernel_matches_numpy_in_its_dialect(name, dialect, data):
    inputs, want = case(name, data)
    got = simulate(source(name, dialect), *inputs, target=TARGET[dialect])
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=2e-4, atol=2e-4 * scale)


@pytest.mark.parametrize("name, dialect", KERNELS, ids=[f"{n}-{d}" for n, d in KERNELS])
def test_every_corpus_kernel_uses_documented_api_of_its_dialect(name, dialect):
    text = source(name, dialect)
    assert list(api.uses(text, dialect))
    assert api.check_calls(text, dialect) == []


def test_high_level_calls_are_traced_as_the_instructions_they_run_with_engine_and_latency():
    """``nl.exp`` / ``nl.max`` / ``nl.matmul`` ... are recorded in the trace as the instructions the compiler
    picks for them (the Trainium cost model reads that trace): engine, operands, a latency from the hardware file."""
    rng = np.random.default_rng(0)
    q, k, v = _values(rng, 64, 32), _values(rng, 64, 32), _values(rng, 64, 32)
    _, trace = simulate(source("attention", "current"), np.ascontiguousarray(q.T), np.ascontiguousarray(k.T), v,
                        target="trn2", trace=True)
    seen = {(e.instruction, e.engine) for e in trace.entries}
    assert {("nc_matmul", "tensor"), ("activation", "scalar"), ("tensor_reduce", "vector")} <= seen, seen
    assert all(e.seconds > 0 for e in trace.entries)
