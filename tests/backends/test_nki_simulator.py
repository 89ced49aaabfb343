"""The NKI simulator (``axon_eg.backends.nki.simulator``) runs hand-written kernels in both NKI dialects and
matches float64 NumPy: the tutorial matmul (K/M/N blocking, hoisted loads, PSUM accumulation), an element-wise
kernel, softmax and rmsnorm (activation with reduce_res, tensor_reduce), transposes through the Tensor and
Vector engines and through DMA; hypothesis checks each instruction's semantics on random shapes and values;
planted violations are rejected naming the limit; ``sys.modules`` is left as it was."""

from __future__ import annotations

import math
import sys
import types

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from axon_eg.backends.nki import isa
from axon_eg.backends.nki.isa import NkiLimitError, NkiSimulationError, NkiUninitializedError
from axon_eg.backends.nki.nki_values import NkiLoopIndexError
from axon_eg.backends.nki.simulator import Trace, simulate
from axon_eg.errors import ShapeError
from axon_eg.hw import load

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
CURRENT = "import math\nimport nki\nimport nki.isa as nisa\nimport nki.language as nl\n"
LEGACY = ("import numpy as np\nimport neuronxcc.nki as nki\nimport neuronxcc.nki.isa as nisa\n"
          "import neuronxcc.nki.language as nl\n")


def rand(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype = F32, low: float = 0.25,
         high: float = 2.0, signed: bool = True) -> np.ndarray:
    """Values of magnitude in [low, high] (never zero), random signs, rounded to ``dtype``."""
    x = rng.uniform(low, high, shape)
    if signed:
        x *= rng.choice([-1.0, 1.0], shape)
    return x.astype(dtype)


def f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def close(out: np.ndarray, ref: np.ndarray, dtype: np.dtype, rtol32: float = 1e-5) -> None:
    rtol = 2e-2 if dtype in (BF16, np.dtype(np.float16)) else rtol32
    np.testing.assert_allclose(f64(out), ref, rtol=rtol, atol=rtol)


# ------------------------------------------------------------------------------------------------ matmul
MATMUL_CURRENT = CURRENT + '''
@nki.jit
def matmul_blocked(lhsT, rhs, TILES_IN_BLOCK_M=2, TILES_IN_BLOCK_N=2):
    """The NKI tutorial's blocked matmul: hoisted loads of a block of tiles, K accumulated in PSUM."""
    K, M = lhsT.shape
    _, N = rhs.shape
    TILE_M = nl.tile_size.gemm_stationary_fmax
    TILE_K = nl.tile_size.pmax
    TILE_N = nl.tile_size.gemm_moving_fmax
    BLOCK_M, BLOCK_N = TILE_M * TILES_IN_BLOCK_M, TILE_N * TILES_IN_BLOCK_N
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // BLOCK_M):
        lhsT_tiles = []
        for bm in nl.affine_range(TILES_IN_BLOCK_M):
            inner = []
            for k in nl.affine_range(K // TILE_K):
                t = nl.ndarray(shape=(TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                col = (m * TILES_IN_BLOCK_M + bm) * TILE_M
                nisa.dma_copy(dst=t, src=lhsT[k * TILE_K:(k + 1) * TILE_K, col:col + TILE_M])
                inner.append(t)
            lhsT_tiles.append(inner)
        for n in nl.affine_range(N // BLOCK_N):
            rhs_tiles = []
            for bn in nl.affine_range(TILES_IN_BLOCK_N):
                inner = []
                for k in nl.affine_range(K // TILE_K):
                    t = nl.ndarray(shape=(TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
                    col = (n * TILES_IN_BLOCK_N + bn) * TILE_N
                    nisa.dma_copy(dst=t, src=rhs[k * TILE_K:(k + 1) * TILE_K, col:col + TILE_N])
                    inner.append(t)
                rhs_tiles.append(inner)
            for bm in nl.affine_range(TILES_IN_BLOCK_M):
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    acc = nl.ndarray(shape=(TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(K // TILE_K):
                        nisa.nc_matmul(dst=acc, stationary=lhsT_tiles[bm][k], moving=rhs_tiles[bn][k])
                    tmp = nl.ndarray(shape=acc.shape, dtype=result.dtype, buffer=nl.sbuf)
                    nisa.tensor_copy(dst=tmp, src=acc)
                    row, col = (m * TILES_IN_BLOCK_M + bm) * TILE_M, (n * TILES_IN_BLOCK_N + bn) * TILE_N
                    nisa.dma_copy(dst=result[row:row + TILE_M, col:col + TILE_N], src=tmp)
    return result
'''

MATMUL_LEGACY = LEGACY + '''
@nki.jit
def matmul_psum(lhsT, rhs):
    """Legacy style: K tiles of lhsT hoisted into one [k, par_dim, M] buffer, ``res += nc_matmul`` into PSUM."""
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    i_k, i_m, i_n = nl.arange(128)[:, None], nl.arange(128)[None, :], nl.arange(512)[None, :]
    for m in nl.affine_range(M // 128):
        lhsT_tiles = nl.ndarray((K // 128, nl.par_dim(128), 128), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(K // 128):
            lhsT_tiles[k, i_k, i_m] = nl.load(lhsT[k * 128 + i_k, m * 128 + i_m])
        for n in nl.affine_range(N // 512):
            res = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.sequential_range(K // 128):
                rhs_tile = nl.load(rhs[k * 128 + i_k, n * 512 + i_n])
                res[...] += nisa.nc_matmul(lhsT_tiles[k], rhs_tile)
            res_sb = nl.copy(res, dtype=result.dtype)
            nl.store(result[m * 128 + i_k, n * 512 + i_n], value=res_sb)
    return result
'''


@pytest.mark.parametrize("dtype", [BF16, F32], ids=["bf16", "fp32"])
def test_tutorial_matmul_current_dialect(dtype):
    rng = np.random.default_rng(1)
    lhsT, rhs = rand(rng, (384, 256), dtype), rand(rng, (384, 1024), dtype)
    out, trace = simulate(MATMUL_CURRENT, lhsT, rhs, trace=True)
    assert out.dtype == dtype and out.shape == (256, 1024)
    close(out, f64(lhsT).T @ f64(rhs), dtype, rtol32=1e-4)
    assert trace.counts()["nc_matmul"] == 2 * 2 * 3  # M tiles x N tiles x K tiles
    assert {e.engine for e in trace if e.instruction == "nc_matmul"} == {"tensor"}


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_tutorial_matmul_legacy_dialect(target):
    rng = np.random.default_rng(2)
    lhsT, rhs = rand(rng, (256, 256), BF16), rand(rng, (256, 1024), BF16)
    out, trace = simulate(MATMUL_LEGACY, lhsT, rhs, target=target, trace=True)
    close(out, f64(lhsT).T @ f64(rhs), BF16)
    assert trace.dialect == "legacy" and trace.target == target
    matmuls = [e for e in trace if e.instruction == "nc_matmul"]
    assert len(matmuls) == 2 * 2 * 2 and all(dict(e.attrs)["accumulate"] is True for e in matmuls)
    assert "tensor_tensor" not in trace.counts()  # += on a matmul accumulates in PSUM, no Vector add
    assert "memset" not in trace.counts()  # nl.zeros(..., buffer=nl.psum) declares an empty accumulation bank


# ------------------------------------------------------------------------------------------ element-wise
ELEMENTWISE_CURRENT = CURRENT + '''
@nki.jit
def silu_mul_add(x, y):
    R, C = x.shape
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.static_range(math.ceil(R / 128)):
        rows = min(128, R - i * 128)
        xt = nl.ndarray((rows, C), dtype=x.dtype, buffer=nl.sbuf)
        yt = nl.ndarray((rows, C), dtype=y.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[nl.ds(i * 128, rows), :])
        nisa.dma_copy(dst=yt, src=y[nl.ds(i * 128, rows), :])
        act = nl.ndarray((rows, C), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=act, op=nl.silu, data=xt)
        prod = nl.ndarray((rows, C), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=prod, data1=act, data2=yt, op=nl.multiply)
        res = nl.ndarray((rows, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=res, data=prod, op0=nl.add, operand0=0.5)
        nisa.dma_copy(dst=out[i * 128:i * 128 + rows, :], src=res)
    return out
'''

ELEMENTWISE_LEGACY = LEGACY + '''
@nki.jit
def silu_mul_add(x, y):
    R, C = x.shape
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.static_range((R + 127) // 128):
        rows = min(128, R - i * 128)
        xt = nl.load(x[i * 128:i * 128 + rows, :])
        yt = nl.load(y[i * 128:i * 128 + rows, :])
        act = nisa.activation(op=nl.silu, data=xt, dtype=nl.float32)
        prod = nisa.tensor_tensor(act, yt, op=np.multiply)
        nl.store(out[i * 128:i * 128 + rows, :], value=nisa.tensor_scalar(prod, np.add, 0.5, dtype=x.dtype))
    return out
'''


@pytest.mark.parametrize("source", [ELEMENTWISE_CURRENT, ELEMENTWISE_LEGACY], ids=["current", "legacy"])
@pytest.mark.parametrize("dtype", [BF16, F32], ids=["bf16", "fp32"])
def test_elementwise_kernel(source, dtype):
    rng = np.random.default_rng(3)
    x, y = rand(rng, (300, 700), dtype), rand(rng, (300, 700), dtype)
    out = simulate(source, x, y)
    sig = 1.0 / (1.0 + np.exp(-f64(x)))
    close(out, f64(x) * sig * f64(y) + 0.5, dtype)


# ------------------------------------------------------------------------------------------- row kernels
SOFTMAX_LEGACY = LEGACY + '''
@nki.jit
def softmax(x):
    R, C = x.shape
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    grid = nl.mgrid[0:128, 0:C]
    for i in nl.affine_range(R // 128):
        xt = nl.load(x[i * 128 + grid.p, grid.x])
        neg_max = nisa.tensor_reduce(nl.maximum, xt, axis=(1,), negate=True, keepdims=True, dtype=nl.float32)
        total = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        e = nisa.activation_reduce(op=nl.exp, data=xt, bias=neg_max, reduce_op=nl.add, reduce_res=total, dtype=nl.float32)
        inv = nisa.activation(op=nl.reciprocal, data=total)
        nl.store(out[i * 128 + grid.p, grid.x], value=nisa.tensor_scalar(e, nl.multiply, inv, dtype=x.dtype))
    return out
'''

RMSNORM_CURRENT = CURRENT + '''
@nki.jit
def rmsnorm(x, g):
    R, D = x.shape
    out = nl.ndarray((R, D), dtype=x.dtype, buffer=nl.shared_hbm)
    gt = nl.ndarray((128, D), dtype=g.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=gt, src=g[nl.arange(128)[:, None] * 0, nl.arange(D)[None, :]])  # one row to every partition
    for i in nl.affine_range(R // 128):
        xt = nl.ndarray((128, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[i * 128:(i + 1) * 128, :])
        sq = nl.ndarray((128, D), dtype=nl.float32, buffer=nl.sbuf)
        ss = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=sq, op=nl.square, data=xt, reduce_op=nl.add, reduce_res=ss,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        rstd = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rstd, data=ss, op0=nl.multiply, operand0=1.0 / D, op1=nl.add, operand1=1e-6)
        nisa.activation(dst=rstd, op=nl.rsqrt, data=rstd)
        y = nl.ndarray((128, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=y, op=nl.copy, data=xt, scale=rstd)  # a per-partition scale
        o = nl.ndarray((128, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=o, data1=y, data2=gt, op=nl.multiply)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=o)
    return out
'''


@pytest.mark.parametrize("dtype", [BF16, F32], ids=["bf16", "fp32"])
def test_softmax_legacy(dtype):
    x = rand(np.random.default_rng(4), (256, 1000), dtype, high=4.0)
    out, trace = simulate(SOFTMAX_LEGACY, x, trace=True)
    e = np.exp(f64(x) - f64(x).max(axis=1, keepdims=True))
    close(out, e / e.sum(axis=1, keepdims=True), dtype)
    assert trace.counts()["activation"] == 4 and trace.counts()["tensor_reduce"] == 2


@pytest.mark.parametrize("dtype", [BF16, F32], ids=["bf16", "fp32"])
def test_rmsnorm_current(dtype):
    rng = np.random.default_rng(5)
    x, g = rand(rng, (256, 512), dtype), rand(rng, (1, 512), dtype)
    out = simulate(RMSNORM_CURRENT, x, g)
    ref = f64(x) / np.sqrt((f64(x) ** 2).mean(axis=1, keepdims=True) + 1e-6) * f64(g)
    close(out, ref, dtype, rtol32=1e-4)


# -------------------------------------------------------------------------------------------- transposes
TRANSPOSE_CURRENT = CURRENT + '''
@nki.jit
def transpose(x, T=128, engine="tensor"):
    R, C = x.shape
    out = nl.ndarray((C, R), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(R // T):
        for j in nl.affine_range(C // T):
            t = nl.ndarray((T, T), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[i * T:(i + 1) * T, j * T:(j + 1) * T])
            ts = nl.ndarray((T, T), dtype=x.dtype, buffer=nl.sbuf)
            if engine == "tensor":
                tp = nl.ndarray((T, T), dtype=x.dtype, buffer=nl.psum)
                nisa.nc_transpose(dst=tp, data=t, engine=nisa.engine.tensor)
                nisa.tensor_copy(dst=ts, src=tp)
            elif engine == "vector":
                nisa.nc_transpose(dst=ts, data=t, engine=nisa.engine.vector)
            else:
                nisa.dma_transpose(dst=ts, src=x[i * T:(i + 1) * T, j * T:(j + 1) * T])
            nisa.dma_copy(dst=out[j * T:(j + 1) * T, i * T:(i + 1) * T], src=ts)
    return out
'''

TRANSPOSE_LEGACY = LEGACY + '''
@nki.jit
def transpose(x, T=128, dma=False):
    R, C = x.shape
    out = nl.ndarray((C, R), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(R // T):
        for j in nl.affine_range(C // T):
            if dma:
                ts = nisa.dma_transpose(x[i * T:(i + 1) * T, j * T:(j + 1) * T])
            else:
                ts = nisa.tensor_copy(nisa.nc_transpose(nl.load(x[i * T:(i + 1) * T, j * T:(j + 1) * T])))
            nl.store(out[j * T:(j + 1) * T, i * T:(i + 1) * T], value=ts)
    return out
'''


@pytest.mark.parametrize("engine,tile", [("tensor", 128), ("vector", 32), ("dma", 128)])
def test_transpose_current(engine, tile):
    x = rand(np.random.default_rng(6), (256, 384), BF16)
    out, trace = simulate(TRANSPOSE_CURRENT, x, kernel_kwargs={"T": tile, "engine": engine}, trace=True)
    np.testing.assert_array_equal(f64(out), f64(x).T)
    used = {e.engine for e in trace if e.instruction in ("nc_transpose", "dma_transpose")}
    assert used == {engine}


@pytest.mark.parametrize("dma,tile", [(False, 128), (False, 32), (True, 128)])
def test_transpose_legacy(dma, tile):
    x = rand(np.random.default_rng(7), (128, 256), BF16)
    out, trace = simulate(TRANSPOSE_LEGACY, x, kernel_kwargs={"T": tile, "dma": dma}, trace=True)
    np.testing.assert_array_equal(f64(out), f64(x).T)
    if not dma:  # the Tensor engine for 128x128, the Vector engine for a 32x32 tile
        assert {e.engine for e in trace if e.instruction == "nc_transpose"} == {"tensor" if tile == 128 else "vector"}


def kernel_as_function(x):
    """A plain function (no nki import here): simulate() runs its source against the simulated modules."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.activation(dst=t, op=nl.tanh, data=t, scale=2.0)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_kernel_given_as_a_function_and_its_trace():
    x = rand(np.random.default_rng(8), (128, 256))
    out, trace = simulate(kernel_as_function, x, trace=True)
    np.testing.assert_allclose(out, np.tanh(2.0 * f64(x)), rtol=1e-6)
    assert isinstance(trace, Trace) and [e.instruction for e in trace] == ["dma_copy", "activation", "dma_copy"]
    first = trace.entries[0]
    assert first.engine == "dma" and first.line is not None
    assert {o.name: (o.space, o.nbytes) for o in first.operands} == {"dst": ("sbuf", x.nbytes), "src": ("hbm", x.nbytes)}
    spec = load("trn2")
    dma = spec.value("costs.dma_fixed") + x.nbytes / spec.value("compute.dma.bandwidth_per_engine")
    assert first.seconds == pytest.approx(dma)
    assert trace.entries[1].seconds == pytest.approx(256 / spec.value("compute.engines.scalar.clock"))
    assert trace.busy_seconds()["dma"] == pytest.approx(2 * dma)


# ---------------------------------------------------------------------------------- hypothesis properties
ELEMENTWISE_OPS = CURRENT + '''
@nki.jit
def ops(x, y, v, binary="add", op0="multiply", op1="add", reverse0=False, out_dtype=nl.float32):
    P, F = x.shape
    out = nl.ndarray((2, P, F), dtype=out_dtype, buffer=nl.shared_hbm)
    xt, yt = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf), nl.ndarray((P, F), dtype=y.dtype, buffer=nl.sbuf)
    vt = nl.ndarray((P, 1), dtype=v.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=xt, src=x)
    nisa.dma_copy(dst=yt, src=y)
    nisa.dma_copy(dst=vt, src=v)
    a = nl.ndarray((P, F), dtype=out_dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=a, data1=xt, data2=yt, op=getattr(nl, binary))
    nisa.dma_copy(dst=out[0], src=a)
    b = nl.ndarray((P, F), dtype=out_dtype, buffer=nl.psum)
    nisa.tensor_scalar(dst=b, data=xt, op0=getattr(nl, op0), operand0=vt, reverse0=reverse0, op1=getattr(nl, op1),
                       operand1=0.75)
    c = nl.ndarray((P, F), dtype=out_dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=c, src=b)
    nisa.dma_copy(dst=out[1], src=c)
    return out
'''
NP_ALU = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide, "maximum": np.maximum,
          "minimum": np.minimum}
ALU = sorted(NP_ALU)  # the arithmetic ops (comparisons, bitwise ops, power ...: tests/backends/test_nki_surface.py)
assert set(ALU) < set(isa.ALU_OPS)


@given(p=st.integers(1, 128), f=st.integers(1, 300), seed=st.integers(0, 2**31), binary=st.sampled_from(ALU),
       op0=st.sampled_from(ALU), op1=st.sampled_from(ALU), reverse0=st.booleans(), dtype=st.sampled_from([F32, BF16]))
def test_tensor_tensor_and_tensor_scalar_semantics(p, f, seed, binary, op0, op1, reverse0, dtype):
    rng = np.random.default_rng(seed)
    x, y, v = rand(rng, (p, f), dtype), rand(rng, (p, f), dtype), rand(rng, (p, 1), F32)
    out = simulate(ELEMENTWISE_OPS, x, y, v, kernel_kwargs={"binary": binary, "op0": op0, "op1": op1,
                                                            "reverse0": reverse0, "out_dtype": dtype})
    first = NP_ALU[op0](f64(v), f64(x)) if reverse0 else NP_ALU[op0](f64(x), f64(v))
    first = first.astype(np.float32).astype(np.float64)  # the engines compute in fp32
    close(out[0], NP_ALU[binary](f64(x), f64(y)), dtype, rtol32=1e-6)
    close(out[1], NP_ALU[op1](first, 0.75), dtype, rtol32=1e-5)


ACTIVATION = CURRENT + '''
@nki.jit
def act(x, bias, op="exp", scale=1.0):
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    total_out = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    xt, bt = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf), nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xt, src=x)
    nisa.dma_copy(dst=bt, src=bias)
    yt, total = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf), nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=yt, op=getattr(nl, op), data=xt, bias=bt, scale=scale, reduce_op=nl.add, reduce_res=total,
                    reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nisa.dma_copy(dst=out, src=yt)
    nisa.dma_copy(dst=total_out, src=total)
    return out, total_out
'''
SIGMOID = lambda x: 1.0 / (1.0 + np.exp(-x))  # noqa: E731
ERF = np.vectorize(math.erf)
REFERENCE_ACTIVATIONS = {
    "copy": lambda x: x, "exp": np.exp, "tanh": np.tanh, "sigmoid": SIGMOID, "silu": lambda x: x * SIGMOID(x),
    "gelu": lambda x: 0.5 * x * (1 + ERF(x / np.sqrt(2))), "relu": lambda x: np.maximum(x, 0), "square": np.square,
    "gelu_apprx_tanh": lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
    "abs": np.abs, "erf": ERF, "softplus": lambda x: np.log1p(np.exp(x)),
    "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "reciprocal": lambda x: 1 / x}
POSITIVE_DOMAIN = {"log", "sqrt", "rsqrt", "reciprocal"}


@given(p=st.integers(1, 128), f=st.integers(1, 300), seed=st.integers(0, 2**31),
       op=st.sampled_from(sorted(REFERENCE_ACTIVATIONS)), scale=st.sampled_from([1.0, 0.5, -1.5]),
       dtype=st.sampled_from([F32, BF16]))
def test_activation_semantics(p, f, seed, op, scale, dtype):
    rng = np.random.default_rng(seed)
    positive = op in POSITIVE_DOMAIN
    x = rand(rng, (p, f), dtype, signed=not positive)
    bias = rand(rng, (p, 1), F32, low=0.1, high=0.5, signed=not positive)
    scale = abs(scale) if positive else scale
    y, total = simulate(ACTIVATION, x, bias, kernel_kwargs={"op": op, "scale": scale})
    z = REFERENCE_ACTIVATIONS[op](f64(x) * scale + f64(bias))
    close(y, z, dtype, rtol32=1e-5)
    # reduce_res sums the fp32 activation values, before they are rounded to dst's dtype
    np.testing.assert_allclose(total, z.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-4)


MATMUL = CURRENT + '''
@nki.jit
def mm(a, b, repeats=1):
    K, M = a.shape[1:]
    N = b.shape[2]
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    for r in nl.affine_range(repeats):
        at, bt = nl.ndarray((K, M), dtype=a.dtype, buffer=nl.sbuf), nl.ndarray((K, N), dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=at, src=a[r])
        nisa.dma_copy(dst=bt, src=b[r])
        nisa.nc_matmul(dst=acc, stationary=at, moving=bt)
    res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out
'''


@given(k=st.integers(1, 128), m=st.integers(1, 128), n=st.integers(1, 512), repeats=st.integers(1, 3),
       seed=st.integers(0, 2**31), dtype=st.sampled_from([F32, BF16]))
def test_nc_matmul_semantics(k, m, n, repeats, seed, dtype):
    rng = np.random.default_rng(seed)
    a, b = rand(rng, (repeats, k, m), dtype), rand(rng, (repeats, k, n), dtype)
    out = simulate(MATMUL, a, b, kernel_kwargs={"repeats": repeats})
    ref = np.einsum("rkm,rkn->mn", f64(a), f64(b))
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * math.sqrt(k * repeats))


REDUCE = LEGACY + '''
@nki.jit
def red(x, op="add", axis=(2,), negate=False, keepdims=False):
    t = nl.load(x)
    r = nisa.tensor_reduce(getattr(nl, op), t, axis=axis, negate=negate, keepdims=keepdims, dtype=nl.float32)
    out = nl.ndarray(r.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=r)
    return out
'''


@given(shape=st.tuples(st.integers(1, 128), st.integers(1, 9), st.integers(1, 40)), first=st.sampled_from([1, 2]),
       op=st.sampled_from(["add", "maximum", "minimum"]), negate=st.booleans(), keepdims=st.booleans(),
       seed=st.integers(0, 2**31))
def test_tensor_reduce_semantics(shape, first, op, negate, keepdims, seed):
    x = rand(np.random.default_rng(seed), shape)
    axis = tuple(range(first, 3))
    out = simulate(REDUCE, x, kernel_kwargs={"op": op, "axis": axis, "negate": negate, "keepdims": keepdims})
    ref = {"add": np.sum, "maximum": np.max, "minimum": np.min}[op](f64(x), axis=axis, keepdims=keepdims)
    np.testing.assert_allclose(out, -ref if negate else ref, rtol=1e-5, atol=1e-5)


TRANSPOSE_ONE = CURRENT + '''
@nki.jit
def tr(x, engine="tensor"):
    P, F = x.shape
    out = nl.ndarray((F, P), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    res = nl.ndarray((F, P), dtype=x.dtype, buffer=nl.sbuf)
    if engine == "dma":
        nisa.dma_transpose(dst=res, src=x)
    else:
        mid = nl.ndarray((F, P), dtype=x.dtype, buffer=nl.psum if engine == "tensor" else nl.sbuf)
        nisa.nc_transpose(dst=mid, data=t, engine=getattr(nisa.engine, engine))
        nisa.tensor_copy(dst=res, src=mid)
    nisa.dma_copy(dst=out, src=res)
    return out
'''


@given(engine=st.sampled_from(["tensor", "vector", "dma"]), p=st.integers(1, 128), f=st.integers(1, 128),
       seed=st.integers(0, 2**31), dtype=st.sampled_from([BF16, np.dtype(np.float16)]))
def test_transpose_semantics(engine, p, f, seed, dtype):
    if engine == "vector":
        p, f = 1 + p % 32, 1 + f % 32
    x = rand(np.random.default_rng(seed), (p, f), dtype)
    np.testing.assert_array_equal(simulate(TRANSPOSE_ONE, x, kernel_kwargs={"engine": engine}), x.T)


IOTA = CURRENT + '''
@nki.jit
def io(x, pattern=((1, 4),), offset=0, channel_multiplier=0):
    P = x.shape[0]
    F = math.prod(n for _, n in pattern)
    t = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.iota(dst=t, pattern=pattern, offset=offset, channel_multiplier=channel_multiplier)
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out
'''


@given(p=st.integers(1, 128), pattern=st.lists(st.tuples(st.integers(-3, 5), st.integers(1, 6)), min_size=1, max_size=4),
       offset=st.integers(-10, 10), channel_multiplier=st.integers(-4, 4))
def test_iota_semantics(p, pattern, offset, channel_multiplier):
    out = simulate(IOTA, np.ones((p, 1), np.float32), kernel_kwargs={
        "pattern": pattern, "offset": offset, "channel_multiplier": channel_multiplier})
    steps, nums = zip(*pattern)
    free = sum(np.arange(n).reshape([-1 if j == i else 1 for j in range(len(nums))]) * s
               for i, (s, n) in enumerate(zip(steps, nums)))
    ref = offset + channel_multiplier * np.arange(p)[:, None] + np.reshape(free, (1, -1))
    np.testing.assert_array_equal(out, ref)


CAST = CURRENT + '''
@nki.jit
def cast(x, dtype=nl.bfloat16):
    t = nl.ndarray(x.shape, dtype=dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    out = nl.ndarray(x.shape, dtype=dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out
'''


@given(p=st.integers(1, 128), f=st.integers(1, 64), seed=st.integers(0, 2**31),
       dtype=st.sampled_from([BF16, np.dtype(np.float16)]))
def test_stores_to_low_precision_round_to_nearest_even(p, f, seed, dtype):
    x = rand(np.random.default_rng(seed), (p, f), F32, low=1e-3, high=100.0)
    out = simulate(CAST, x, kernel_kwargs={"dtype": dtype})
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, x.astype(dtype))


BIG_MATMUL = CURRENT + '''
@nki.jit
def big(a, b):
    s = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    m = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=a)
    nisa.dma_copy(dst=m, src=b)
    acc = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=s, moving=m)
    return a
'''


@given(k=st.integers(1, 128), m=st.integers(1, 128), n=st.integers(513, 1024))
def test_any_moving_free_size_over_512_is_refused(k, m, n):
    with pytest.raises(NkiLimitError, match=rf"nc_matmul: moving free size {n} > 512 \(limits.matmul.moving_free_max"):
        simulate(BIG_MATMUL, np.ones((k, m), BF16), np.ones((k, n), BF16))


# ------------------------------------------------------------------------------------ planted violations
def planted(body: str, header: str = CURRENT) -> str:
    lines = "\n".join("    " + line for line in body.strip().splitlines())
    return f"{header}\n@nki.jit\ndef kernel(a, b):\n{lines}\n    return a\n"


A, B = np.ones((128, 128), np.float32), np.ones((128, 1024), np.float32)


@pytest.mark.parametrize("body,error,message", [
    ("t = nl.ndarray((256, 64), dtype=a.dtype, buffer=nl.sbuf)",
     NkiLimitError, r"partition size 256 > 128 \(limits.partition_max on trn2\)"),
    ("s = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)\nm = nl.ndarray((128, 1024), dtype=a.dtype, buffer=nl.sbuf)\n"
     "nisa.dma_copy(dst=s, src=a)\nnisa.dma_copy(dst=m, src=b)\n"
     "p = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)\nnisa.nc_matmul(dst=p, stationary=s, moving=m)",
     NkiLimitError, r"^nc_matmul: moving free size 1024 > 512 \(limits.matmul.moving_free_max on trn2\)"),
    ("banks = [nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum) for _ in range(9)]",
     NkiLimitError, r"nl.zeros: psum\d+@line\d+ PSUM banks live 9 > 8 \(memory.psum.banks on trn2\)"),
    ("s = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)\nnisa.dma_copy(dst=s, src=a)\n"
     "o = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)\nnisa.nc_matmul(dst=o, stationary=s, moving=s)",
     NkiLimitError, r"nc_matmul: dst memory sbuf not in \{psum\} \(the tensor engine .* writes only PSUM\)"),
    ("s = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)\nnisa.dma_copy(dst=s, src=a)\n"
     "p = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.psum)\nnisa.tensor_copy(dst=p, src=s)\n"
     "o = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)\n"
     "nisa.tensor_copy(dst=o, src=p, engine=nisa.engine.gpsimd)",
     NkiLimitError, r"tensor_copy: src memory psum not in \{sbuf\} \(the gpsimd engine cannot access PSUM\)"),
    ("s = nl.ndarray((128, 6000), dtype=nl.bfloat16, buffer=nl.sbuf)\nnisa.memset(dst=s, value=1.0)\n"
     "p = nl.ndarray((128, 6000), dtype=nl.bfloat16, buffer=nl.psum)\nnisa.tensor_copy(dst=p, src=s)",
     NkiLimitError, r"tensor_copy: dst free size in PSUM 6000 > 4096 \(limits.vector.free_max_psum on trn2\)"),
    ("s = nl.ndarray((128, 70000), dtype=nl.bfloat16, buffer=nl.sbuf)\nnisa.memset(dst=s, value=1.0)",
     NkiLimitError, r"memset: dst free size in SBUF 70000 > 65536 \(limits.vector.free_max_sbuf on trn2\)"),
    ("tiles = [nl.ndarray((128, 16384), dtype=nl.float32, buffer=nl.sbuf) for _ in range(4)]\n"
     "for t in tiles:\n    nisa.memset(dst=t, value=0.0)",
     NkiLimitError, r"memset: sbuf\d+@line\d+ SBUF bytes per partition live 262144 > 229376 "
                    r"\(memory.sbuf.per_partition on trn2\)"),
    ("s = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)\nnisa.dma_copy(dst=s, src=a)\n"
     "m = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.sbuf)\nnisa.dma_copy(dst=m, src=b[:, 0:512])\n"
     "p = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)\n"
     "nisa.nc_matmul(dst=p[:, 256:768], stationary=s, moving=m)",
     NkiLimitError, r"nc_matmul: dst .* spans PSUM banks 0\.\.1 .* \(memory.psum.bank on trn2\)"),
    ("s = nl.ndarray((64, 64), dtype=a.dtype, buffer=nl.sbuf)\nnisa.dma_copy(dst=s, src=a[0:64, 0:64])\n"
     "o = nl.ndarray((64, 64), dtype=a.dtype, buffer=nl.sbuf)\nnisa.nc_transpose(dst=o, data=s, engine=nisa.engine.vector)",
     NkiLimitError, r"nc_transpose: data partition size 64 > 32 \(limits.transpose.vector_engine_max on trn2\)"),
    ("s = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)\nnisa.dma_copy(dst=s, src=a)\n"
     "r = nl.ndarray((1, 128), dtype=a.dtype, buffer=nl.sbuf)\nnisa.tensor_reduce(dst=r, op=nl.add, data=s, axis=0)",
     NkiLimitError, r"tensor_reduce: axis \[0\] includes axis 0, the partition axis"),
    ("s = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)\nnisa.dma_copy(dst=s, src=a)\n"
     "r = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.sbuf)\n"
     "nisa.activation(dst=s, op=nl.exp, data=s, reduce_op=nl.maximum, reduce_res=r, reduce_cmd=nisa.reduce_cmd.reset_reduce)",
     NkiLimitError, r"activation: reduce_op maximum is not supported"),
    ("s = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)\nnisa.dma_copy(dst=s, src=a)\n"
     "nisa.activation(dst=s, op=nl.exp, data=s, bias=0.5)",
     NkiLimitError, r"activation: bias must be a \[128, 1\] per-partition tile"),
    ("s = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)\nnisa.dma_copy(dst=s, src=a)\n"
     "r = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.sbuf)\n"
     "nisa.activation(dst=s, op=nl.exp, data=s, reduce_op=nl.add, reduce_res=r)",
     NkiUninitializedError, r"reduce_cmd=idle uses the Scalar engine reduce registers"),
    ("s = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)\nt = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)\n"
     "nisa.activation(dst=t, op=nl.exp, data=s)",
     NkiUninitializedError, r"activation: data reads 16384 of 16384 elements that no instruction wrote"),
    ("s = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)\nnisa.dma_copy(dst=s, src=a)\n"
     "o = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)\nnisa.tensor_tensor(dst=o, data1=s, data2=s, op=nl.add)",
     ShapeError, r"tensor_tensor: data1 \[128, 128\] and dst \[128, 64\] must have the same"),
    ("s = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)\nnisa.dma_copy(dst=s, src=a)\n"
     "nisa.dma_copy(dst=s, src=s[nl.arange(128)[None, :], nl.arange(128)[:, None]])",
     NkiSimulationError, r"does not keep the partition axis"),
    ("t = nl.exp(a)", NkiLimitError, r"activation: data memory hbm not in \{psum, sbuf\}"),  # tiles, not HBM
    ("t = nl.gather_flattened(a, a)", NotImplementedError, r"nki.language.gather_flattened is not supported"),
    ("t = nl.ndarray((128, 4), dtype=nl.tfloat32, buffer=nl.sbuf)", NotImplementedError,
     r"nki.language.tfloat32 is not supported"),
], ids=["partition-256", "moving-free-1024", "psum-banks", "tensor-engine-writes-sbuf", "gpsimd-reads-psum",
        "psum-free-size", "sbuf-free-size", "sbuf-capacity", "matmul-spans-banks", "vector-transpose-64",
        "reduce-partition-axis", "activation-reduce-max", "scalar-bias", "reduce-registers-unset", "read-unwritten",
        "shape-mismatch", "partition-not-axis-0", "nl-function-on-hbm", "unknown-api", "unknown-dtype"])
def test_planted_violations_are_refused(body, error, message):
    """Each planted mistake raises its error, naming the instruction, operand, limit and hardware key."""
    with pytest.raises(error, match=message) as info:
        simulate(planted(body), A, B)
    if not isinstance(info.value, NotImplementedError):
        assert any("line" in note for note in getattr(info.value, "__notes__", []))


def test_limit_error_carries_its_fields():
    with pytest.raises(NkiLimitError) as info:
        simulate(BIG_MATMUL, np.ones((128, 128), BF16), np.ones((128, 1024), BF16))
    e = info.value
    assert (e.instruction, e.operand, e.limit, e.value, e.key, e.target) == (
        "nc_matmul", "moving", 512, 1024, "limits.matmul.moving_free_max", "trn2")


def test_legacy_tensor_engine_writing_sbuf_is_refused():
    body = "t = nl.load(a)\nsb = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)\nsb[...] = nisa.nc_matmul(t, t)"
    with pytest.raises(NkiLimitError, match=r"nc_matmul: dst memory sbuf not in \{psum\}"):
        simulate(planted(body, LEGACY), A, B)


LEGACY_IOTA = LEGACY + '''
@nki.jit
def ramp(x):
    expr_a, expr_b = nl.arange(0, 512)[None, :], nl.arange(0, 128)[:, None]
    e = nisa.iota(expr_a + 5 + expr_b * 2, dtype=nl.int32)
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out[expr_b, expr_a], nisa.tensor_copy(e, dtype=nl.float32))
    return out
'''


def test_legacy_iota_takes_an_index_expression():
    out = simulate(LEGACY_IOTA, np.ones((1, 1), np.float32))
    np.testing.assert_array_equal(out, 5 + np.arange(512)[None, :] + 2 * np.arange(128)[:, None])


def test_dma_transpose_needs_trn2():
    x = rand(np.random.default_rng(9), (128, 128), BF16)
    with pytest.raises(NkiLimitError, match=r"dma_transpose: not available on trn1 \(features.dma_transpose is false"):
        simulate(TRANSPOSE_LEGACY, x, target="trn1", kernel_kwargs={"dma": True})
    with pytest.raises(NkiLimitError, match=r"dma_transpose: src dtype float32 is not a 2-byte dtype"):
        simulate(TRANSPOSE_LEGACY, x.astype(np.float32), target="trn2", kernel_kwargs={"dma": True})


def test_unwritten_output_is_detected():
    body = ("out = nl.ndarray((256, 64), dtype=a.dtype, buffer=nl.shared_hbm)\n"
            "t = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)\nnisa.dma_copy(dst=t, src=a[:, 0:64])\n"
            "nisa.dma_copy(dst=out[0:128, :], src=t)\nreturn out")
    with pytest.raises(NkiUninitializedError, match=r"8192 of 16384 elements were never written \(NaN\), first at \(128, 0\)"):
        simulate(planted(body), A, B)


def test_current_dialect_is_refused_on_trn1():
    with pytest.raises(NkiSimulationError, match=r"trn1 runs only the legacy dialect"):
        simulate(ELEMENTWISE_CURRENT, np.ones((4, 4), np.float32), np.ones((4, 4), np.float32), target="trn1")


def test_float64_inputs_are_refused():
    with pytest.raises(Exception, match=r"kernel input 0: float64 is not an NKI dtype"):
        simulate(ELEMENTWISE_CURRENT, np.ones((4, 4)), np.ones((4, 4)))


# ------------------------------------------------------------------------------------------- sys.modules
def nki_modules() -> dict[str, object]:
    return {k: v for k, v in sys.modules.items() if k.partition(".")[0] in ("nki", "neuronxcc")}


PEEK = CURRENT + '''
import sys

@nki.jit
def peek(a):
    assert getattr(sys.modules["nki"], "__axon_nki_fake__", False) == expect_fake
    assert nl.tile_size.pmax == 128
    return a
'''


def test_sys_modules_restored_after_success_and_failure():
    before = nki_modules()
    simulate(ELEMENTWISE_LEGACY, np.ones((4, 4), np.float32), np.ones((4, 4), np.float32))
    assert nki_modules() == before
    with pytest.raises(NkiLimitError):
        simulate(planted("t = nl.ndarray((256, 64), dtype=a.dtype, buffer=nl.sbuf)"), A, B)
    assert nki_modules() == before
    with pytest.raises(ZeroDivisionError):
        simulate(planted("x = 1 / 0"), A, B)
    assert nki_modules() == before
    simulate(PEEK.replace("expect_fake", "True"), A)  # installed while the kernel runs
    assert nki_modules() == before


def test_a_real_nki_is_never_shadowed(monkeypatch):
    real = types.ModuleType("nki")
    monkeypatch.setitem(sys.modules, "nki", real)
    simulate(PEEK.replace("expect_fake", "False"), A)  # the kernel still gets the simulated modules
    assert sys.modules["nki"] is real


def test_every_instruction_has_semantics_checks_and_a_cost():
    spec = load("trn2")
    for name, instr in isa.INSTRUCTIONS.items():
        assert instr.engines and set(instr.engines) <= set(isa.ENGINES), name
        assert callable(instr.semantics) and callable(instr.rule) and callable(instr.cycles) and instr.doc and instr.api
        assert set(instr.reads) | set(instr.writes), name
    assert set(isa.INSTRUCTIONS) == {"load", "store", "dma_copy", "dma_transpose", "nc_matmul", "nc_transpose",
                                     "activation", "tensor_tensor", "tensor_scalar", "tensor_reduce", "tensor_copy",
                                     "memset", "iota", "reciprocal", "scalar_tensor_tensor", "tensor_scalar_reduce",
                                     "tensor_copy_predicated", "tensor_partition_reduce", "bn_stats", "bn_aggr", "max8",
                                     "nc_find_index8", "nc_match_replace8", "select_reduce", "range_select", "dropout", "rng",
                                     "tensor_tensor_scan",
                                     "tensor_scalar_cumulative",
                                     "affine_select"}
    ops = {"stationary": isa.Operand((128, 128), BF16, "sbuf"), "moving": isa.Operand((128, 512), BF16, "sbuf"),
           "dst": isa.Operand((128, 512), F32, "psum")}
    rules = isa.check("nc_matmul", ops, {"accumulate": None}, spec, "tensor")
    assert isa.latency(rules) == pytest.approx(512 / spec.value("compute.engines.tensor.clock"))
    fp32 = {**ops, "stationary": isa.Operand((128, 128), F32, "sbuf"), "moving": isa.Operand((128, 32), F32, "sbuf"),
            "dst": isa.Operand((128, 32), F32, "psum")}
    rules = isa.check("nc_matmul", fp32, {"accumulate": None}, spec, "tensor")
    assert isa.latency(rules) == pytest.approx(64 * 4 / spec.value("compute.engines.tensor.clock"))


ROW_SUM_IN_CHUNKS = CURRENT + '''
@nki.jit
def row_sum(x, chunk=256):
    P, F = x.shape
    out = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    xt = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=xt, src=x)
    e = nl.ndarray((P, chunk), dtype=nl.float32, buffer=nl.sbuf)
    total = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    for c in nl.static_range(F // chunk):
        last = c == F // chunk - 1
        nisa.activation(dst=e, op=nl.exp, data=xt[:, c * chunk:(c + 1) * chunk], reduce_op=nl.add,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce if c == 0 else nisa.reduce_cmd.reduce,
                        reduce_res=total if last else None)
    nisa.dma_copy(dst=out, src=total)
    return out
'''


def test_reduce_registers_accumulate_across_activations():
    x = rand(np.random.default_rng(10), (64, 1024))
    out, trace = simulate(ROW_SUM_IN_CHUNKS, x, trace=True)
    np.testing.assert_allclose(out, np.exp(f64(x)).sum(axis=1, keepdims=True), rtol=1e-5)
    assert trace.counts()["activation"] == 4


ACCUMULATE = CURRENT + '''
@nki.jit
def twice(a, b, accumulate=None):
    s, m = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf), nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=a)
    nisa.dma_copy(dst=m, src=b)
    acc = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=s, moving=m, accumulate=False)
    nisa.nc_matmul(dst=acc, stationary=s, moving=m, accumulate=accumulate)
    res = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    out = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=res)
    return out
'''


@pytest.mark.parametrize("accumulate,times", [(None, 2), (True, 2), (False, 1)])
def test_matmul_accumulate_modes(accumulate, times):
    """The second matmul into a written PSUM tile adds (True, or None: auto-detect) or overwrites (False)."""
    rng = np.random.default_rng(11)
    a, b = rand(rng, (64, 32), BF16), rand(rng, (64, 96), BF16)
    out = simulate(ACCUMULATE, a, b, kernel_kwargs={"accumulate": accumulate})
    np.testing.assert_allclose(out, times * (f64(a).T @ f64(b)), rtol=1e-5)


def test_legacy_plus_equals_on_a_vector_result_is_a_vector_add():
    body = ("t = nl.load(a)\nacc = nl.zeros((128, 128), nl.float32, buffer=nl.sbuf)\n"
            "acc[...] += nisa.activation(op=nl.exp, data=t)\nacc[...] += t")
    _, trace = simulate(planted(body, LEGACY), A, B, trace=True)
    assert [e.instruction for e in trace] == ["load", "memset", "activation", "tensor_tensor", "tensor_tensor"]
    assert {e.engine for e in trace if e.instruction == "tensor_tensor"} == {"vector"}


def test_a_mask_on_a_matmul_is_refused_cleanly():
    body = ("i = nl.arange(128)[:, None]\nt = nl.load(a)\n"
            "r = nisa.nc_matmul(t, t, mask=(i < 5))")
    with pytest.raises(NotImplementedError, match=r"nisa.nc_matmul: mask=<index expression \[128, 1\]> is not supported"):
        simulate(planted(body, LEGACY), A, B)


def test_trace_rows_and_the_instruction_table():
    pl = pytest.importorskip("polars")
    x = rand(np.random.default_rng(12), (128, 256))
    _, trace = simulate(kernel_as_function, x, trace=True)
    frame = pl.DataFrame(trace.rows())
    assert frame["hbm_bytes"].sum() == 2 * x.nbytes and frame["engine"].to_list() == ["dma", "scalar", "dma"]
    assert [r["instruction"] for r in isa.table()] == list(isa.INSTRUCTIONS)


def test_accumulating_onto_unwritten_psum_is_refused():
    body = ("s = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)\nnisa.dma_copy(dst=s, src=a)\n"
            "p = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)\n"
            "nisa.nc_matmul(dst=p, stationary=s, moving=s, accumulate=True)")
    with pytest.raises(NkiUninitializedError, match=r"nc_matmul: dst \(accumulate=True\) reads 16384 of 16384 elements"):
        simulate(planted(body), A, B)


BIG_TILES_IN_A_LOOP = CURRENT + '''
@nki.jit
def big_tiles(x, iterations=3):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(iterations):
        t = nl.ndarray((128, 30000), dtype=nl.float32, buffer=nl.sbuf)  # 120000 B: two would overflow 224 KiB
        nisa.memset(dst=t, value=float(i))
        acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        nisa.memset(dst=acc, value=1.0)
    nisa.dma_copy(dst=out, src=t[:, 0:4])
    return out
'''


def test_a_loop_reuses_the_memory_of_the_tiles_it_drops():
    """Tiles live from their first write to their last reference: one 120 KB tile per iteration fits."""
    out = simulate(BIG_TILES_IN_A_LOOP, np.ones((128, 4), np.float32))
    np.testing.assert_array_equal(out, np.full((128, 4), 2.0))


# ------------------------------------------------------------------------------------ symbolic loop indices
TAIL_ROWS = CURRENT + '''
@nki.jit
def copy_rows(x):
    R, C = x.shape
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.LOOP(math.ceil(R / 128)):
        rows = min(128, R - i * 128)
        t = nl.ndarray((rows, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * 128:i * 128 + rows, :])
        nisa.dma_copy(dst=out[i * 128:i * 128 + rows, :], src=t)
    return out
'''


@pytest.mark.parametrize("loop", ["affine_range", "sequential_range"])
def test_python_min_on_a_symbolic_loop_index_is_rejected(loop):
    """affine_range / sequential_range indices are symbolic on a NeuronCore: min(), comparisons and if fail."""
    x = rand(np.random.default_rng(12), (200, 64))
    with pytest.raises(NkiLoopIndexError, match=rf"nl\.{loop} loop index.*loop with nl\.static_range.*or.*mask"):
        simulate(TAIL_ROWS.replace("LOOP", loop), x)


def test_python_min_on_a_static_range_index_works():
    x = rand(np.random.default_rng(12), (200, 64))
    np.testing.assert_array_equal(simulate(TAIL_ROWS.replace("LOOP", "static_range"), x), x)


def test_symbolic_loop_index_arithmetic_and_indexing():
    from axon_eg.backends.nki.nki_values import LoopIndex
    i = LoopIndex(3, "affine_range")
    j = (i * 128 + 5) // 2 % 100 - 1
    assert isinstance(j, LoopIndex) and int(j) == (3 * 128 + 5) // 2 % 100 - 1
    assert list(range(i)) == [0, 1, 2] and [10, 11, 12, 13][i] == 13
    for refused in (lambda: i < 4, lambda: i == 3, lambda: bool(i), lambda: max(i, 1), lambda: min(2, i + 1)):
        with pytest.raises(NkiLoopIndexError, match="nl.affine_range loop index"):
            refused()
