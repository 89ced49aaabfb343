"""The documented NKI surface beyond the emitter's subset (issue 23): every element-wise ALU op and activation
function through ``nl.*``, the composite ``nl`` functions (``where``, ``all``, ``prod``, ``var``, ``softmax``,
``rms_norm``, ``expand_dims``, ``invert``, ``logical_not``), the further ``nisa`` instructions (``reciprocal``,
``scalar_tensor_tensor``, ``tensor_scalar_reduce``, ``tensor_copy_predicated``, ``tensor_partition_reduce``,
``bn_stats``/``bn_aggr``, ``max8``/``nc_find_index8``, ``tensor_tensor_scan``, ``affine_select``), SPMD grids,
fp8 and bool dtypes, and their limits: each in the simulator against NumPy on random non-zero values."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from axon_eg.backends.nki import isa
from axon_eg.backends.nki.isa import NkiLimitError, NkiSimulationError
from axon_eg.backends.nki.simulator import simulate
from axon_eg.semantics.isa import declarations as D

HEADERS = {"legacy": "import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\nimport neuronxcc.nki.isa as nisa\n",
           "current": "import nki\nimport nki.language as nl\nimport nki.isa as nisa\n"}
TARGET = {"legacy": "trn1", "current": "trn2"}


def kernel(body: str, dialect: str = "legacy", args: str = "a, b") -> str:
    lines = "\n".join("    " + line for line in body.strip().splitlines())
    return f"{HEADERS[dialect]}\n@nki.jit\ndef kernel({args}):\n{lines}\n"


def values(rng: np.random.Generator, shape: tuple[int, ...], low: float = 0.5, high: float = 2.0) -> np.ndarray:
    return (rng.uniform(low, high, shape) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)


shapes = st.tuples(st.integers(1, 128), st.integers(1, 96))
dialects = st.sampled_from(["legacy", "current"])

BINARY = {"power": lambda x, y: np.power(np.abs(x), y), "fmod": np.fmod, "mod": np.mod, "equal": np.equal,
          "not_equal": np.not_equal, "greater": np.greater, "greater_equal": np.greater_equal, "less": np.less,
          "less_equal": np.less_equal, "logical_and": np.logical_and, "logical_or": np.logical_or,
          "logical_xor": np.logical_xor, "add": np.add, "subtract": np.subtract, "multiply": np.multiply,
          "divide": np.divide, "maximum": np.maximum, "minimum": np.minimum}
INTEGER = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
           "left_shift": np.left_shift, "right_shift": np.right_shift}


def test_every_declared_alu_op_has_a_reference_here():
    assert set(BINARY) | set(INTEGER) == set(D.ALU_OPS)


@settings(max_examples=25, deadline=None)
@given(op=st.sampled_from(sorted(BINARY)), shape=shapes, seed=st.integers(0, 2**31), dialect=dialects)
def test_binary_float_ops_match_numpy(op, shape, seed, dialect):
    rng = np.random.default_rng(seed)
    a, b = values(rng, shape), values(rng, shape)
    if op == "power":
        a = np.abs(a)
    b[:, ::3] = a[:, ::3]  # some equal pairs, so comparisons see both outcomes
    src = kernel(f"out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)\n"
                 f"nl.store(out, value=nl.{op}(nl.load(a), nl.load(b), dtype=nl.float32))\nreturn out", dialect)
    got = simulate(src, a, b, target=TARGET[dialect])
    want = BINARY[op](a.astype(np.float64), b.astype(np.float64)).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


@settings(max_examples=15, deadline=None)
@given(op=st.sampled_from(sorted(INTEGER)), shape=shapes, seed=st.integers(0, 2**31), dialect=dialects)
def test_bitwise_ops_match_numpy_on_integers(op, shape, seed, dialect):
    rng = np.random.default_rng(seed)
    a = rng.integers(1, 1000, shape).astype(np.int32)
    b = rng.integers(1, 8, shape).astype(np.int32)
    src = kernel(f"out = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.shared_hbm)\n"
                 f"nl.store(out, value=nl.{op}(nl.load(a), nl.load(b), dtype=nl.int32))\nreturn out", dialect)
    np.testing.assert_array_equal(simulate(src, a, b, target=TARGET[dialect]), INTEGER[op](a, b))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


UNARY = {"sin": np.sin, "cos": np.cos, "tan": np.tan, "arctan": np.arctan, "ceil": np.ceil, "floor": np.floor,
         "trunc": np.trunc, "sign": np.sign, "mish": lambda x: x * np.tanh(np.log1p(np.exp(x))),
         "gelu_dx": lambda x: 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
                              + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi),
         "gelu_apprx_sigmoid": lambda x: x * _sigmoid(1.702 * x),
         "gelu_apprx_sigmoid_dx": lambda x: _sigmoid(1.702 * x) + 1.702 * x * _sigmoid(1.702 * x) * (1 - _sigmoid(1.702 * x)),
         "silu_dx": lambda x: _sigmoid(x) + x * _sigmoid(x) * (1 - _sigmoid(x)),
         "erf_dx": lambda x: 2 / math.sqrt(math.pi) * np.exp(-x * x)}


def test_every_kernel_only_activation_has_a_reference_here():
    assert set(UNARY) == set(D.ACTIVATION_FUNCTIONS) - set(D.PROVEN_ACTIVATION_FUNCTIONS)


@settings(max_examples=25, deadline=None)
@given(op=st.sampled_from(sorted(UNARY)), shape=shapes, seed=st.integers(0, 2**31), dialect=dialects)
def test_activation_functions_match_numpy_and_run_on_the_scalar_engine(op, shape, seed, dialect):
    a = values(np.random.default_rng(seed), shape, 0.1, 1.4)  # inside tan's branch
    src = kernel(f"out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)\n"
                 f"nl.store(out, value=nl.{op}(nl.load(a)))\nreturn out", dialect, "a")
    got, trace = simulate(src, a, target=TARGET[dialect], trace=True)
    np.testing.assert_allclose(got, UNARY[op](a.astype(np.float64)), rtol=2e-5, atol=2e-6)
    assert [(e.instruction, e.engine) for e in trace if e.engine != "dma"] == [("activation", "scalar")]


@settings(max_examples=20, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**31), dialect=dialects)
def test_composites_match_numpy(shape, seed, dialect):
    rng = np.random.default_rng(seed)
    a, b = values(rng, shape), values(rng, shape)
    w = values(rng, shape)
    src = kernel("""
x, y, w = nl.load(a), nl.load(b), nl.load(c)
outs = [nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm) for _ in range(4)]
cols = [nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm) for _ in range(3)]
nl.store(outs[0], value=nl.where(nl.greater(x, y), x, y))
nl.store(outs[1], value=nl.softmax(x, axis=1))
nl.store(outs[2], value=nl.rms_norm(x, w, axis=1, n=a.shape[1], epsilon=1e-5))
nl.store(outs[3], value=nl.logical_not(nl.less(x, 0.0)))
nl.store(cols[0], value=nl.expand_dims(nl.var(x, axis=1), 1))
nl.store(cols[1], value=nl.prod(y, axis=1, keepdims=True))
nl.store(cols[2], value=nl.expand_dims(nl.all(nl.greater(x, -5.0), axis=1, dtype=nl.float32), 1))
return (*outs, *cols)""", dialect, "a, b, c")
    got = simulate(src, a, b, w, target=TARGET[dialect])
    x, y, w64 = (v.astype(np.float64) for v in (a, b, w))
    e = np.exp(x - x.max(1, keepdims=True))
    want = [np.maximum(x, y), e / e.sum(1, keepdims=True), x / np.sqrt((x * x).mean(1, keepdims=True) + 1e-5) * w64,
            (x >= 0).astype(float), x.var(1, keepdims=True), y.prod(1, keepdims=True), np.ones((shape[0], 1))]
    for g, want_i in zip(got, want):
        np.testing.assert_allclose(g, want_i, rtol=5e-5, atol=1e-6)


def test_invert_flips_every_bit_of_signed_and_unsigned_integers():
    for dtype, nl_name in ((np.int32, "int32"), (np.uint8, "uint8")):
        a = np.arange(1, 129, dtype=dtype).reshape(128, 1)
        src = kernel(f"out = nl.ndarray(a.shape, dtype=nl.{nl_name}, buffer=nl.shared_hbm)\n"
                     f"nl.store(out, value=nl.invert(nl.load(a)))\nreturn out", "legacy", "a")
        np.testing.assert_array_equal(simulate(src, a, target="trn1"), ~a)


# -- the further instructions, in the current dialect's destination-passing style --------------------------
def current(body: str, args: str = "a, b") -> str:
    return kernel(body, "current", args)


@settings(max_examples=15, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**31))
def test_vector_engine_instructions_match_numpy(shape, seed):
    rng = np.random.default_rng(seed)
    a, b = values(rng, shape), values(rng, shape)
    p, f = shape
    src = current(f"""
x = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
y = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
nisa.dma_copy(dst=x, src=a)
nisa.dma_copy(dst=y, src=b)
r = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
nisa.reciprocal(dst=r, data=x)
t = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
nisa.scalar_tensor_tensor(dst=t, data=x, op0=nl.multiply, operand0=3.0, op1=nl.subtract, operand1=y, reverse1=True)
s = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
rs = nl.ndarray(({p}, 1), dtype=nl.float32, buffer=nl.sbuf)
nisa.tensor_scalar_reduce(dst=s, data=x, op0=nl.add, operand0=1.0, reduce_op=nl.maximum, reduce_res=rs)
pr = nl.ndarray(a.shape, dtype=nl.uint8, buffer=nl.sbuf)
nisa.tensor_scalar(dst=pr, data=x, op0=nl.greater, operand0=0.0)
c = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
nisa.tensor_copy(dst=c, src=y)
nisa.tensor_copy_predicated(dst=c, src=x, predicate=pr)
pt = nl.ndarray((1, {f}), dtype=nl.float32, buffer=nl.sbuf)
nisa.tensor_partition_reduce(dst=pt, op=nl.add, data=x)
sc = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
nisa.tensor_tensor_scan(dst=sc, data0=y, data1=x,
                        initial=0.0, op0=nl.multiply, op1=nl.add)
outs = []
for tile in (r, t, s, rs, c, pt, sc):
    o = nl.ndarray(tile.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=o, src=tile)
    outs.append(o)
return tuple(outs)""")
    got, trace = simulate(src, a, b, target="trn2", trace=True)
    x, y = a.astype(np.float64), b.astype(np.float64)
    scan = np.zeros_like(x)
    prev = np.zeros(p)
    for i in range(f):
        prev = y[:, i] * prev + x[:, i]
        scan[:, i] = prev
    want = [1 / x, y - 3 * x, x + 1, (x + 1).max(1, keepdims=True), np.where(x > 0, x, y), x.sum(0, keepdims=True), scan]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    engines = {e.instruction: e.engine for e in trace}
    for name in ("reciprocal", "scalar_tensor_tensor", "tensor_scalar_reduce", "tensor_copy_predicated",
                 "tensor_tensor_scan"):
        assert engines[name] == "vector" and all(e.seconds > 0 for e in trace if e.instruction == name)
    assert engines["tensor_partition_reduce"] == "gpsimd"


@settings(max_examples=15, deadline=None)
@given(p=st.integers(1, 128), chunks=st.integers(1, 3), tail=st.integers(2, 512), seed=st.integers(0, 2**31))
def test_bn_stats_and_bn_aggr_give_the_mean_and_variance_of_long_rows(p, chunks, tail, seed):
    """As the docs' example: one bn_stats per 512-element chunk into one SBUF tensor, one bn_aggr over it."""
    f = 512 * (chunks - 1) + tail
    a = values(np.random.default_rng(seed), (p, f)) + 3.0
    src = current(f"""
x = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
nisa.dma_copy(dst=x, src=a)
stats = nl.ndarray(({p}, 6 * {chunks}), dtype=nl.float32, buffer=nl.sbuf)
for i in nl.static_range({chunks}):
    width = min(512, {f} - 512 * i)
    nisa.bn_stats(dst=stats[:, 6 * i:6 * i + 6], data=x[:, 512 * i:512 * i + width])
mv = nl.ndarray(({p}, 2), dtype=nl.float32, buffer=nl.sbuf)
nisa.bn_aggr(dst=mv, data=stats)
out = nl.ndarray(({p}, 2), dtype=nl.float32, buffer=nl.shared_hbm)
nisa.dma_copy(dst=out, src=mv)
return out""", "a")
    got = simulate(src, a, target="trn2")
    x = a.astype(np.float64)
    np.testing.assert_allclose(got, np.stack([x.mean(1), x.var(1)], 1), rtol=1e-4, atol=1e-5)


def test_bn_stats_refuses_more_than_512_elements_per_partition():
    src = current("""
x = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
nisa.dma_copy(dst=x, src=a)
s = nl.ndarray((128, 6), dtype=nl.float32, buffer=nl.sbuf)
nisa.bn_stats(dst=s, data=x)
return a""", "a")
    with pytest.raises(NkiLimitError, match=r"bn_stats: data free size 513 > 512 \(limits.vector.bn_stats_free_max on trn2\)"):
        simulate(src, np.ones((128, 513), np.float32), target="trn2")


@settings(max_examples=15, deadline=None)
@given(p=st.integers(1, 128), f=st.integers(8, 300), seed=st.integers(0, 2**31))
def test_max8_and_find_index8_give_the_top_eight_and_where_they_are(p, f, seed):
    rng = np.random.default_rng(seed)
    a = np.stack([rng.permutation(f) for _ in range(p)]).astype(np.float32) + 1.0  # distinct per partition
    src = current(f"""
x = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
nisa.dma_copy(dst=x, src=a)
top = nl.ndarray(({p}, 8), dtype=nl.float32, buffer=nl.sbuf)
nisa.max8(dst=top, src=x)
idx = nl.ndarray(({p}, 8), dtype=nl.uint32, buffer=nl.sbuf)
nisa.nc_find_index8(dst=idx, data=x, vals=top)
o1 = nl.ndarray(({p}, 8), dtype=nl.float32, buffer=nl.shared_hbm)
o2 = nl.ndarray(({p}, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
nisa.dma_copy(dst=o1, src=top)
nisa.dma_copy(dst=o2, src=idx)
return o1, o2""", "a")
    top, idx = simulate(src, a, target="trn2")
    order = np.argsort(-a, axis=1)[:, :8]
    np.testing.assert_array_equal(idx, order)
    np.testing.assert_array_equal(top, np.take_along_axis(a, order, 1))


def test_max8_needs_eight_elements():
    src = current("""
x = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
nisa.dma_copy(dst=x, src=a)
top = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)
nisa.max8(dst=top, src=x)
return a""", "a")
    with pytest.raises(NkiLimitError, match=r"max8: src free size 7 < 8"):
        simulate(src, np.ones((4, 7), np.float32), target="trn2")


@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 128), seed=st.integers(0, 2**31), dialect=dialects)
def test_affine_select_makes_the_causal_mask(n, seed, dialect):
    a = values(np.random.default_rng(seed), (n, n))
    if dialect == "current":  # keep where p - j >= 0: offset 0, p * 1 + j * -1
        body = (f"x = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)\nnisa.dma_copy(dst=x, src=a)\n"
                f"y = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)\n"
                f"nisa.affine_select(dst=y, pattern=[[-1, {n}]], channel_multiplier=1, on_true_tile=x, "
                f"on_false_value=-9984.0, cmp_op=nl.greater_equal)\n")
    else:
        body = (f"i_p = nl.arange({n})[:, None]\ni_f = nl.arange({n})[None, :]\n"
                f"y = nisa.affine_select(i_p - i_f >= 0, nl.load(a), -9984.0)\n")
    src = kernel(body + "out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)\n"
                        "nl.store(out, value=y)\nreturn out", dialect, "a")
    np.testing.assert_array_equal(simulate(src, a, target=TARGET[dialect]), np.where(np.tri(n, dtype=bool), a, -9984.0))


@settings(max_examples=10, deadline=None)
@given(g0=st.integers(1, 3), g1=st.integers(1, 3), seed=st.integers(0, 2**31))
def test_an_spmd_grid_runs_each_program_on_its_own_tile(g0, g1, seed):
    a = values(np.random.default_rng(seed), (128 * g0, 64 * g1))
    src = kernel("""
out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
i, j = nl.program_id(0), nl.program_id(1)
assert nl.num_programs(0) * 128 == a.shape[0] and nl.program_ndim() == 2
t = nl.load(a[i * 128:(i + 1) * 128, j * 64:(j + 1) * 64])
nl.store(out[i * 128:(i + 1) * 128, j * 64:(j + 1) * 64], value=nl.multiply(t, 2.0))
return out""", "legacy", "a")
    np.testing.assert_array_equal(simulate(src, a, target="trn1", grid=(g0, g1)), 2 * a)
    with pytest.raises(NkiSimulationError, match=r"never written|program_id\(1\): the launch grid"):
        simulate(src, a, target="trn1", grid=(g0,))


def test_fp8_and_bool_tiles_round_as_the_dtype_does():
    a = np.linspace(-3, 3, 128 * 16, dtype=np.float32).reshape(128, 16)
    for nl_name in ("float8_e4m3", "float8_e5m2", "float8_e4m3fn"):
        src = kernel(f"t = nl.copy(nl.load(a), dtype=nl.{nl_name})\nout = nl.ndarray(a.shape, dtype=nl.float32, "
                     f"buffer=nl.shared_hbm)\nnl.store(out, value=nl.copy(t, dtype=nl.float32))\nreturn out",
                     "legacy", "a")
        np.testing.assert_array_equal(simulate(src, a, target="trn1"), a.astype(getattr(ml_dtypes, nl_name)).astype(np.float32))
    src = kernel("out = nl.ndarray(a.shape, dtype=nl.bool_, buffer=nl.shared_hbm)\n"
                 "nl.store(out, value=nl.greater(nl.load(a), 0.0, dtype=nl.bool_))\nreturn out", "legacy", "a")
    np.testing.assert_array_equal(simulate(src, a, target="trn1"), a > 0)
    assert isa.dtype_name(np.dtype(ml_dtypes.float8_e4m3)) == "float8_e4m3"


def test_constants_dynamic_ranges_and_no_reorder():
    src = current("""
eye = nl.shared_identity_matrix(n=4, dtype=nl.float32)
k = nl.shared_constant(np.arange(8, dtype=np.float32).reshape(4, 2), dtype=nl.float32)
out = nl.ndarray((4, 6), dtype=nl.float32, buffer=nl.shared_hbm)
with nl.no_reorder():
    for j in nl.dynamic_range(0, 4, 2):
        t = nl.load(eye[:, j:j + 2])
        nl.store(out[:, j:j + 2], t)
nl.store(out[:, 4:6], nl.load(k))
return out""", "a")
    got = simulate("import numpy as np\n" + src, np.ones((1, 1), np.float32), target="trn2")
    np.testing.assert_array_equal(got, np.hstack([np.eye(4), np.arange(8).reshape(4, 2)]))


@settings(max_examples=15, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**31), load=st.booleans())
def test_tensor_scalar_cumulative_is_a_running_reduction_per_partition(shape, seed, load):
    a = values(np.random.default_rng(seed), shape)
    start = ", imm1=5.0, reduce_cmd=nisa.reduce_cmd.load_reduce" if load else ""
    src = current(f"""
x = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
nisa.dma_copy(dst=x, src=a)
c = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
nisa.tensor_scalar_cumulative(dst=c, src=x, op0=nl.multiply, op1=nl.add, imm0=2.0{start})
m = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
nisa.tensor_scalar_cumulative(dst=m, src=x, op0=nl.add, op1=nl.maximum, imm0=0.0)
o1 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
o2 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
nisa.dma_copy(dst=o1, src=c)
nisa.dma_copy(dst=o2, src=m)
return o1, o2""", "a")
    total, running_max = simulate(src, a, target="trn2")
    x = a.astype(np.float64)
    np.testing.assert_allclose(total, (5.0 if load else 0.0) + np.cumsum(2 * x, axis=1), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(running_max, np.maximum.accumulate(a, axis=1))


def test_vector_arithmetic_instructions_refuse_bitvec_ops():
    src = current("""
x = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
nisa.dma_copy(dst=x, src=a)
t = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
nisa.scalar_tensor_tensor(dst=t, data=x, op0=nl.bitwise_and, operand0=1.0, op1=nl.add, operand1=x)
return a""", "a")
    with pytest.raises(NkiSimulationError, match=r"scalar_tensor_tensor: op0='bitwise_and' is not one of"):
        simulate(src, np.ones((4, 4), np.float32), target="trn2")


def test_duplicate_values_pair_with_distinct_occurrences_as_the_docs_order_them():
    """The docs' example: data [1, 2, 3, 4, 8 x 7], vals [3, 8 x 7]: nc_find_index8 pairs the duplicates with
    their occurrences ascending, nc_match_replace8 descending (it takes vals 7 .. 0)."""
    data = np.array([[1, 2, 3, 4] + [8] * 7], np.float32)
    vals = np.array([[3] + [8] * 7], np.float32)
    src = current("""
d = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
v = nl.ndarray(b.shape, dtype=nl.float32, buffer=nl.sbuf)
nisa.dma_copy(dst=d, src=a)
nisa.dma_copy(dst=v, src=b)
found = nl.ndarray((1, 8), dtype=nl.uint32, buffer=nl.sbuf)
nisa.nc_find_index8(dst=found, data=d, vals=v)
replaced = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
where = nl.ndarray((1, 8), dtype=nl.uint32, buffer=nl.sbuf)
nisa.nc_match_replace8(dst=replaced, data=d, vals=v, imm=-1.0, dst_idx=where)
outs = []
for t in (found, replaced, where):
    o = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=o, src=t)
    outs.append(o)
return tuple(outs)""")
    found, replaced, where = simulate(src, data, vals, target="trn2")
    assert found.tolist() == [[2, 4, 5, 6, 7, 8, 9, 10]]
    assert where.tolist() == [[2, 10, 9, 8, 7, 6, 5, 4]]
    assert replaced.tolist() == [[1, 2, -1, 4] + [-1] * 7]


@settings(max_examples=10, deadline=None)
@given(p=st.integers(1, 128), f=st.integers(16, 200), seed=st.integers(0, 2**31))
def test_top_16_by_max8_and_match_replace8(p, f, seed):
    """The docs' top-k pattern: max8, replace those eight by -inf, max8 again."""
    a = values(np.random.default_rng(seed), (p, f))
    src = current(f"""
x = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
nisa.dma_copy(dst=x, src=a)
top = nl.ndarray(({p}, 16), dtype=nl.float32, buffer=nl.sbuf)
nisa.max8(dst=top[:, 0:8], src=x)
rest = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
nisa.nc_match_replace8(dst=rest, data=x, vals=top[:, 0:8], imm=-3.0e38)
nisa.max8(dst=top[:, 8:16], src=rest)
out = nl.ndarray(({p}, 16), dtype=nl.float32, buffer=nl.shared_hbm)
nisa.dma_copy(dst=out, src=top)
return out""", "a")
    np.testing.assert_array_equal(simulate(src, a, target="trn2"), -np.sort(-a, axis=1)[:, :16])


@settings(max_examples=15, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**31), reverse=st.booleans())
def test_select_reduce_and_range_select_match_numpy(shape, seed, reverse):
    rng = np.random.default_rng(seed)
    p, f = shape
    a = values(rng, shape)
    lo = rng.integers(0, f, (p, 1)).astype(np.float32)
    hi = lo + rng.integers(1, f + 1, (p, 1)).astype(np.float32)
    src = current(f"""
x = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
nisa.dma_copy(dst=x, src=a)
pred = nl.ndarray(a.shape, dtype=nl.uint8, buffer=nl.sbuf)
nisa.tensor_scalar(dst=pred, data=x, op0=nl.greater, operand0=0.0)
sel = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
top = nl.ndarray(({p}, 1), dtype=nl.float32, buffer=nl.sbuf)
nisa.select_reduce(dst=sel, predicate=pred, on_true=x, on_false=-7.0, reduce_res=top,
                   reduce_cmd=nisa.reduce_cmd.reset_reduce, reverse_pred={reverse})
b0 = nl.ndarray(({p}, 1), dtype=nl.float32, buffer=nl.sbuf)
b1 = nl.ndarray(({p}, 1), dtype=nl.float32, buffer=nl.sbuf)
nisa.dma_copy(dst=b0, src=lo)
nisa.dma_copy(dst=b1, src=hi)
rng_ = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
rmax = nl.ndarray(({p}, 1), dtype=nl.float32, buffer=nl.sbuf)
nisa.range_select(dst=rng_, on_true_tile=x, comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=b0, bound1=b1,
                  reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_res=rmax, reduce_op=nl.maximum,
                  on_false_value=-3.4028234663852886e38)
outs = []
for t in (sel, top, rng_, rmax):
    o = nl.ndarray(t.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=o, src=t)
    outs.append(o)
return tuple(outs)""", "a, lo, hi")
    sel, top, ranged, rmax = simulate(src, a, lo, hi, target="trn2")
    keep = (a <= 0) if reverse else (a > 0)
    want_sel = np.where(keep, a, -7.0)
    np.testing.assert_array_equal(sel, want_sel)
    np.testing.assert_array_equal(top[:, 0], want_sel.max(1))
    i = np.arange(f)[None, :]
    want_range = np.where((i >= lo) & (i < hi), a, np.finfo(np.float32).min)
    np.testing.assert_array_equal(ranged, want_range)
    np.testing.assert_array_equal(rmax[:, 0], want_range.max(1))


def test_range_select_needs_neuroncore_v3_and_the_fp32_min_fill():
    body = """
x = nl.load(a)
b = nl.load(a[:, 0:1])
y = nisa.range_select(on_true_tile=x, comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=b, bound1=b{fill})
return a"""
    with pytest.raises(NkiLimitError, match=r"range_select: not available on trn1 \(features.neuroncore_v3 is false"):
        simulate(kernel(body.format(fill=""), "legacy", "a"), np.ones((4, 4), np.float32), target="trn1")
    with pytest.raises(NkiLimitError, match=r"range_select: on_false_value must be FP32_MIN"):
        simulate(kernel(body.format(fill=", on_false_value=0.0"), "legacy", "a"), np.ones((4, 4), np.float32),
                 target="trn2", dialect="legacy")



DROPOUT = """
out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
nl.random_seed({seed})
nl.store(out, value=nl.dropout(nl.load(a), {rate}))
return out"""


@settings(max_examples=10, deadline=None)
@given(rate=st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]), seed=st.integers(0, 2**31), dialect=dialects)
def test_dropout_zeroes_about_rate_of_the_elements_and_keeps_the_rest_as_they_are(rate, seed, dialect):
    a = values(np.random.default_rng(seed), (128, 512))
    if dialect == "current":  # the current dialect's seed is a [1, 1] tile
        seed_expr = f"nl.full((1, 1), {seed % 1000}, dtype=nl.int32)"
    else:
        seed_expr = str(seed)
    got = simulate(kernel(DROPOUT.format(seed=seed_expr, rate=rate), dialect, "a"), a, target=TARGET[dialect])
    dropped = got == 0
    assert abs(dropped.mean() - rate) < 0.02
    np.testing.assert_array_equal(got[~dropped], a[~dropped])
    again = simulate(kernel(DROPOUT.format(seed=seed_expr, rate=rate), dialect, "a"), a, target=TARGET[dialect])
    np.testing.assert_array_equal(again, got)  # one seed, one result


def test_dropout_takes_a_probability_per_partition_and_refuses_a_bad_one():
    a = values(np.random.default_rng(1), (128, 2000))
    src = current("""
x = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
nisa.dma_copy(dst=x, src=a)
p = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
nisa.dma_copy(dst=p, src=b)
y = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
nisa.dropout(dst=y, data=x, prob=p)
out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
nisa.dma_copy(dst=out, src=y)
return out""")
    prob = np.linspace(0, 1, 128, dtype=np.float32).reshape(128, 1)
    got = simulate(src, a, prob, target="trn2")
    np.testing.assert_allclose((got == 0).mean(axis=1), prob[:, 0], atol=0.05)
    with pytest.raises(NkiSimulationError, match=r"dropout: prob 1.5 is not a probability"):
        simulate(kernel(DROPOUT.format(seed=0, rate=1.5), "legacy", "a"), a, target="trn1")



def test_rand_and_rng_draw_from_the_seeded_generator():
    src = current("""
seed = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
nisa.memset(dst=seed, value=7)
nisa.set_rng_seed(src_seeds=seed)
u = nl.rand((128, 256), dtype=nl.float32)
bits = nl.ndarray((128, 64), dtype=nl.uint8, buffer=nl.sbuf)
nisa.rng(dst=bits, engine=nisa.gpsimd_engine)
o1 = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
o2 = nl.ndarray((128, 64), dtype=nl.uint8, buffer=nl.shared_hbm)
nl.store(o1, u)
nisa.dma_copy(dst=o2, src=bits)
return o1, o2""", "a")
    u, bits = simulate(src, np.ones((1, 1), np.float32), target="trn2")
    assert u.min() >= 0.0 and u.max() < 1.0 and abs(u.mean() - 0.5) < 0.01
    assert bits.dtype == np.uint8 and bits.min() < 16 and bits.max() > 240
    again = simulate(src, np.ones((1, 1), np.float32), target="trn2")
    np.testing.assert_array_equal(again[0], u)
    other = simulate(src.replace("value=7", "value=8"), np.ones((1, 1), np.float32), target="trn2")
    assert not np.array_equal(other[0], u)
    from axon_eg.hw import load  # the legacy dialect (trn1's) has no rng: the rule itself, on a trn1 spec

    dst = {"dst": isa.Operand((4, 4), np.dtype(np.uint16), "sbuf")}
    with pytest.raises(NkiLimitError, match=r"rng: the GpSimd engine's generator needs NeuronCore-v3"):
        isa.check("rng", dst, {}, load("trn1"), "gpsimd")
    isa.check("rng", dst, {}, load("trn1"), "vector")



def test_where_takes_any_nonzero_condition_as_true():
    a = np.array([[0.5, 0.0, -0.25, 2.0]] * 4, np.float32)
    src = kernel("out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)\n"
                 "nl.store(out, value=nl.where(nl.load(a), 1.0, -1.0, dtype=nl.float32))\nreturn out", "legacy", "a")
    np.testing.assert_array_equal(simulate(src, a, target="trn1"), np.where(a != 0, 1.0, -1.0))
