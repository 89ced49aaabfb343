"""The ``tensor_descriptors`` stage (``axon_eg.triton_in.descriptors``), on the CPU under Triton 3.9's interpreter,
which runs ``tl.make_tensor_descriptor`` loads and stores itself (bounds ``0 <= offset + i < shape`` on every
dimension, zeros read out of bounds, out-of-bounds stores dropped) and asserts TMA's alignment rules (16-byte
base, non-last strides and last-dimension offsets; at least 16 bytes of last block dimension).

- the interpreter's descriptor semantics, checked directly (zero fill, dropped stores, the alignment asserts);
- the corpus kernels it rewrites give their reference's results and exactly the input's (hypothesis over
  shapes with 1 and odd sizes, random nonzero values): with the interpreter as it is, every dimension that
  is a row pitch (a stride, or the ``row * n_cols`` of a base) is a multiple of 4 float32 elements; with its
  16-byte asserts lifted (:func:`unaligned_descriptors`; bounds and zero fill stay the interpreter's), odd
  pitches too, and as it is a misaligned pitch fails (what the measurement cascade records). Exactly the
  input's even where a transposed tile meets ``tl.dot``: the interpreter's ``tl.trans`` is made a contiguous
  copy (:func:`contiguous_transposes`; NumPy sums a transposed view's products in another order, one ulp off);
- accesses it cannot prove (non-zero ``other``, non-affine or non-arange indices, offsets that may be
  negative, loop-carried indices, other masks, no stride-1 dimension, cache hints) stay as written; a kernel
  with nothing to rewrite is not detected; nothing outside the kernels changes;
- mutations of its output (a lost ``tl.trans``, swapped offsets, a wrong bound) are caught by these checks.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import contextlib  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from axon_eg.backends.triton import interpreter  # noqa: E402
from axon_eg.hw import load as load_hw  # noqa: E402
from axon_eg.testing.kernels import import_file  # noqa: E402
from axon_eg.triton_in import load  # noqa: E402
from axon_eg.triton_in.descriptors import TensorDescriptors, accesses, tensor_descriptors_supported  # noqa: E402
from axon_eg.triton_in.stages import wrapper_unchanged  # noqa: E402

interpreter.apply()

CORPUS = Path(__file__).resolve().parent.parent / "benchmarks" / "triton_inputs"
STAGE = TensorDescriptors()


@contextlib.contextmanager
def unaligned_descriptors() -> Iterator[None]:
    """The interpreter's descriptors without its 16-byte asserts (base, non-last strides, last offset): the
    same pointers and bounds mask (``0 <= offset + i < shape`` per dimension), so a rewritten kernel's indices
    and bounds can be checked at odd sizes. A GPU refuses those sizes; nothing else is relaxed."""
    from triton.runtime.interpreter import TensorDescHandle, TensorHandle

    def validate(self: Any) -> None:
        assert len(self.strides) == self.ndim == len(self.block_shape) >= 1
        assert self.strides[-1].data.item() == 1, "last dim must be contiguous"

    def materialize_pointers(self: Any, offsets: list[Any]) -> tuple[Any, Any]:
        itemsize = self.base.dtype.element_ty.primitive_bitwidth // 8
        ptrs = np.broadcast_to(self.base.data, self.block_shape)
        masks = np.ones(self.block_shape, dtype=bool)
        for dim in range(self.ndim):
            shape = [1] * self.ndim
            shape[dim] = self.block_shape[dim]
            off = (offsets[dim].data + np.arange(self.block_shape[dim])).reshape(shape)
            ptrs = ptrs + (itemsize * off * self.strides[dim].data).astype(np.uint64)
            masks = masks & (0 <= off) & (off < self.shape[dim].data)
        return TensorHandle(ptrs, self.base.dtype.scalar), TensorHandle(masks, tl.int1)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(TensorDescHandle, "validate", validate)
        mp.setattr(TensorDescHandle, "materialize_pointers", materialize_pointers)
        yield


@contextlib.contextmanager
def contiguous_transposes() -> Iterator[None]:
    """The interpreter's ``tl.trans`` as a contiguous copy rather than a NumPy view: the values are the same,
    but ``np.matmul`` sums a transposed view's products in another order (one float32 ulp apart), which would
    hide whether a transposed descriptor tile fed to ``tl.dot`` is exactly the pointer-loaded one."""
    from triton.runtime.interpreter import InterpreterBuilder, TensorHandle

    def create_trans(self: Any, arg: Any, perm: Any) -> Any:
        return TensorHandle(np.ascontiguousarray(np.transpose(arg.data, perm)), arg.dtype.scalar)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(InterpreterBuilder, "create_trans", create_trans)
        yield


# ---------------------------------------------------------------------------------------------------------
# What the interpreter does with descriptors


@triton.jit
def _window(x_ptr, y_ptr, M, N, stride, off_m, off_n, BM: tl.constexpr, BN: tl.constexpr):
    """y[off_m:, off_n:] block = x's [M, N] window block + 1, through descriptors over [M, N] (stride)."""
    tile = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[stride, 1], block_shape=[BM, BN]).load([off_m, off_n])
    tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[stride, 1], block_shape=[BM, BN]).store(
        [off_m, off_n], tl.broadcast_to(tl.cast(tile + 1, y_ptr.dtype.element_ty), (BM, BN)))


@triton.jit
def _line(x_ptr, y_ptr, n, off, B: tl.constexpr):
    t = tl.make_tensor_descriptor(x_ptr, shape=[n], strides=[1], block_shape=[B]).load([off])
    tl.make_tensor_descriptor(y_ptr, shape=[n], strides=[1], block_shape=[B]).store([off], t * 2)


@triton.jit
def _peek(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    t = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN]).load([0, 0])
    tl.store(out_ptr + tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :], t)


def test_the_interpreter_zero_fills_descriptor_loads_drops_stores_out_of_bounds_and_asserts_alignment():
    assert tensor_descriptors_supported()
    x, y = torch.randn(16, 24), torch.full((16, 24), -7.0)
    _window[(1,)](x, y, 5, 12, 24, 4, 8, BM=8, BN=8)  # rows 4..11 of 5, cols 8..15 of 12: a corner in bounds
    want = torch.full((16, 24), -7.0)
    want[4:5, 8:12] = x[4:5, 8:12] + 1
    assert torch.equal(y, want)  # the stores outside [5, 12] dropped
    x = torch.randn(16)
    y = torch.full((16,), -7.0)
    _line[(1,)](x, y, 11, 8, B=8)  # elements 8..15 of 11
    assert torch.equal(y[8:11], x[8:11] * 2) and torch.equal(y[:8], torch.full((8,), -7.0)) and \
        torch.equal(y[11:], torch.full((5,), -7.0))

    x, out = torch.randn(3, 4) + 10, torch.full((4, 8), -7.0)
    _peek[(1,)](x, out, 3, 4, BM=4, BN=8)
    want = torch.zeros(4, 8)
    want[:3, :4] = x
    assert torch.equal(out, want)  # read as zeros out of bounds
    with pytest.raises(Exception, match="stride must be 16-byte aligned"):
        _window[(1,)](torch.randn(5, 7), torch.empty(5, 7), 5, 7, 7, 0, 0, BM=8, BN=8)
    with pytest.raises(Exception, match="block offset start must be 16-byte aligned"):
        _window[(1,)](torch.randn(16, 24), torch.empty(16, 24), 16, 24, 24, 0, 3, BM=8, BN=8)
    with pytest.raises(Exception, match="at least 16 bytes in the last dimension"):
        _line[(1,)](torch.randn(8), torch.empty(8), 8, 0, B=2)
    with unaligned_descriptors():  # the asserts lifted: the same bounds
        x, y = torch.randn(5, 7), torch.full((5, 7), -7.0)
        _window[(1,)](x, y, 5, 7, 7, 0, 3, BM=8, BN=8)
        assert torch.equal(y[:, 3:], x[:, 3:] + 1) and torch.equal(y[:, :3], torch.full((5, 3), -7.0))


# ---------------------------------------------------------------------------------------------------------
# The corpus

_MODULES: dict[tuple[str, str | None, str | None], Any] = {}


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("descriptors")


def _module(directory: Path, path: Path, kernel: str | None, text: str | None = None,
            mutate: Callable[[str], str] | None = None, tag: str = "") -> Any:
    """``path`` (or ``text`` read as ``path``) imported from ``directory``, with ``kernel`` rewritten by the
    stage (None: as it is), then ``mutate``d (named by ``tag``)."""
    key = (str(path), kernel, tag or None)
    if key not in _MODULES:
        tf = load(path, text)
        out = tf.text if kernel is None else STAGE.apply(tf, {"kernel": kernel})
        assert wrapper_unchanged(tf, out) is None
        if mutate is not None:
            mutated = mutate(out)
            assert mutated != out, tag
            out = mutated
        name = f"descriptors_{path.stem}_{kernel or 'input'}{tag}"
        file = directory / f"{name}.py"
        file.write_text(out)
        _MODULES[key] = import_file(file, name)
    return _MODULES[key]


def _nonzero(gen: torch.Generator, *shape: int) -> torch.Tensor:
    """Random values bounded away from zero, either sign."""
    sign = torch.randint(0, 2, shape, generator=gen) * 2 - 1
    return (torch.rand(shape, generator=gen) + 0.25) * sign


size = st.one_of(st.just(1), st.integers(1, 70))
pitch = st.integers(1, 18).map(lambda k: 4 * k)  # a row pitch the interpreter accepts: 16-byte float32 rows
odd = st.one_of(st.just(1), st.integers(1, 70))  # any pitch (under unaligned_descriptors)

# Each case: (file, its reference file or None for KernelBench form, init args and inputs from draws, a
# generator and the strategy of row pitches).
Inputs = tuple[list[Any], list[torch.Tensor]]
Build = Callable[[st.DataObject, torch.Generator, st.SearchStrategy[int]], Inputs]


def _matmul(data: st.DataObject, gen: torch.Generator, p: st.SearchStrategy[int]) -> Inputs:
    m, k, n = data.draw(size), data.draw(p), data.draw(p)
    return [], [_nonzero(gen, m, k), _nonzero(gen, k, n)]


def _gemm(data: st.DataObject, gen: torch.Generator, p: st.SearchStrategy[int]) -> Inputs:
    m, k, n = data.draw(size), data.draw(p), data.draw(p)
    return [k, n], [_nonzero(gen, m, k)]


def _flat(data: st.DataObject, gen: torch.Generator, p: st.SearchStrategy[int]) -> Inputs:
    """bias_gelu: one flat 1-D descriptor per buffer at offsets of 128 elements, any shape."""
    rows, cols = data.draw(st.integers(1, 9)), data.draw(st.one_of(st.just(1), st.integers(1, 300)))
    return [cols], [_nonzero(gen, rows, cols)]


def _two(data: st.DataObject, gen: torch.Generator, p: st.SearchStrategy[int]) -> Inputs:
    rows, cols = data.draw(st.integers(1, 9)), data.draw(st.one_of(st.just(1), st.integers(1, 700)))
    return [], [_nonzero(gen, rows, cols), _nonzero(gen, rows, cols)]


def _rows(init: bool, at_least: int = 1) -> Build:
    """A [rows, cols] input whose rows are a base ``x_ptr + row * n_cols``: cols a row pitch (at least
    ``at_least``: a block of ``next_power_of_2(cols)`` has 16 bytes from 4 floats on); ``init``: [cols]."""

    def build(data: st.DataObject, gen: torch.Generator, p: st.SearchStrategy[int]) -> Inputs:
        rows, cols = data.draw(st.integers(1, 7)), data.draw(p.filter(lambda c: c >= at_least))
        return [cols] if init else [], [_nonzero(gen, rows, cols)]

    return build


def _attention(data: st.DataObject, gen: torch.Generator, p: st.SearchStrategy[int]) -> Inputs:
    b, h, s = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)), data.draw(st.integers(1, 12))
    d = data.draw(p.filter(lambda v: 3 <= v <= 24))
    return [], [_nonzero(gen, b, h, s, d) for _ in range(3)]


CASES: dict[str, tuple[str | None, Build]] = {
    "matmul_t2t": ("matmul_ref", _matmul),
    "gemm_bias_relu_kb": (None, _gemm),
    "bias_gelu_t2t": ("bias_gelu_ref", _flat),
    "silu_mul_kb": (None, _two),
    "rmsnorm_t2t": ("rmsnorm_ref", _rows(True, 3)),
    "layernorm_kb": (None, _rows(True)),
    "rowsum_kb": (None, _rows(False)),
    "rowvar_fp64_kb": (None, _rows(False)),
    "softmax_online_t2t": ("softmax_online_ref", _rows(False)),
    "attention_kb": (None, _attention),
}
POINTS = [(f, k) for f in CASES for k in STAGE.detect(load(CORPUS / f"{f}.py"))]  # every kernel it rewrites
PITCHED = [(f, k) for f, k in POINTS if CASES[f][1] not in (_flat, _two)]  # sizes that are row pitches


def test_each_corpus_case_offers_one_point_per_kernel_and_none_off_gpus():
    assert POINTS == [("matmul_t2t", "matmul_kernel"), ("gemm_bias_relu_kb", "gemm_bias_relu_kernel"),
                      ("bias_gelu_t2t", "bias_gelu_kernel"), ("silu_mul_kb", "silu_kernel"),
                      ("silu_mul_kb", "mul_kernel"), ("rmsnorm_t2t", "rmsnorm_kernel"),
                      ("layernorm_kb", "layernorm_kernel"), ("rowsum_kb", "rowsum_kernel"),
                      ("rowvar_fp64_kb", "rowvar_kernel"), ("softmax_online_t2t", "softmax_kernel"),
                      ("attention_kb", "attention_row_kernel")]
    assert STAGE.name == "tensor_descriptors" and STAGE.after == ("dtype_correction",)
    # offered only where descriptors feed a tensor-core product (the measured losses are in the docstring)
    offered = [(f, p["kernel"]) for f in CASES for p in STAGE.space(load(CORPUS / f"{f}.py"), load_hw("h200"))]
    assert offered == [("matmul_t2t", "matmul_kernel"), ("gemm_bias_relu_kb", "gemm_bias_relu_kernel")]
    assert STAGE.space(load(CORPUS / "matmul_t2t.py"), load_hw("trn2")) == []
    assert STAGE.detect(load(CORPUS / "colsum_kb.py")) == []  # a column walk: its only stride is n_cols


def _run(scratch: Path, case: str, kernel: str, data: st.DataObject, p: st.SearchStrategy[int],
         mutate: Callable[[str], str] | None = None, tag: str = "") -> tuple[Any, Any, Any]:
    """(the rewritten kernel's result, the reference's in float64, the input's) on drawn inputs."""
    ref_name, build = CASES[case]
    path = CORPUS / f"{case}.py"
    mod, original = _module(scratch, path, kernel, mutate=mutate, tag=tag), _module(scratch, path, None)
    ref_mod = original if ref_name is None else import_file(CORPUS / f"{ref_name}.py", f"descriptors_{ref_name}")
    wrapper = "ModelNew" if ref_name is None else "Model"
    seed = data.draw(st.integers(0, 2**16))
    init, xs = build(data, torch.Generator().manual_seed(seed), p)
    torch.manual_seed(seed)
    ref = ref_mod.Model(*init).double()
    torch.manual_seed(seed)
    new = getattr(mod, wrapper)(*init)
    torch.manual_seed(seed)
    old = getattr(original, wrapper)(*init)
    with torch.no_grad(), contiguous_transposes():
        want = ref(*[x.double() for x in xs])
        input_got = old(*xs)
        got = new(*xs)
    return got, want, input_got


def _same(got: torch.Tensor, want: torch.Tensor, input_got: torch.Tensor) -> None:
    assert torch.allclose(got.double(), want, rtol=1e-4, atol=1e-4), float((got.double() - want).abs().max())
    assert torch.equal(got, input_got), "the rewritten kernel does not compute exactly what the input computes"


@pytest.mark.parametrize("case, kernel", POINTS, ids=[f"{c}-{k}" for c, k in POINTS])
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_rewritten_corpus_kernels_compute_the_reference_and_exactly_the_input(scratch, case, kernel, data):
    _same(*_run(scratch, case, kernel, data, pitch))


@pytest.mark.parametrize("case, kernel", PITCHED, ids=[f"{c}-{k}" for c, k in PITCHED])
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_at_odd_row_pitches_the_indices_and_bounds_still_hold(scratch, case, kernel, data):
    with unaligned_descriptors():
        _same(*_run(scratch, case, kernel, data, odd))


def test_a_misaligned_row_pitch_fails_under_the_interpreter_as_it_would_on_a_gpu(scratch):
    mod = _module(scratch, CORPUS / "rmsnorm_t2t.py", "rmsnorm_kernel")
    with pytest.raises(Exception, match="16-byte aligned"):
        mod.Model(6)(torch.randn(2, 6))  # row 1's base is 24 bytes in


MUTATIONS = [  # (case, kernel, tag, mutation of the stage's output): each must be caught
    ("gemm_bias_relu_kb", "gemm_bias_relu_kernel", "_notrans",  # the transposed tile not transposed back
     lambda t: t.replace("tl.trans(tl.make_tensor_descriptor(w_ptr", "(tl.make_tensor_descriptor(w_ptr")),
    ("gemm_bias_relu_kb", "gemm_bias_relu_kernel", "_swapped",  # the view's offsets in the tile's order
     lambda t: t.replace(".load([pid_n * BLOCK_N, k0])", ".load([k0, pid_n * BLOCK_N])")),
    ("matmul_t2t", "matmul_kernel", "_bound",  # a bound one short
     lambda t: t.replace("shape=[M, K]", "shape=[M, K - 1]")),
    ("softmax_online_t2t", "softmax_kernel", "_other",  # a load padding with -inf read with zeros instead
     lambda t: t.replace('x = tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=-float("inf"))',
                         "x = tl.make_tensor_descriptor(x_ptr + row * n_cols, shape=[n_cols], strides=[1], "
                         "block_shape=[BLOCK]).load([c0])", 1)),
]


@pytest.mark.parametrize("case, kernel, tag, mutate", MUTATIONS, ids=[m[2] for m in MUTATIONS])
def test_mutations_of_the_output_are_caught(scratch, case, kernel, tag, mutate):
    caught = []

    @settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        got, want, input_got = _run(scratch, case, kernel, data, st.just(44), mutate, tag)
        caught.append(not (torch.allclose(got.double(), want, rtol=1e-4, atol=1e-4) and torch.equal(got, input_got)))

    run()
    assert all(caught), caught


def test_what_the_corpus_kernels_become():
    by = {(a.kernel, a.line): a for a in accesses(load(CORPUS / "gemm_bias_relu_kb.py"))}
    w = by[("gemm_bias_relu_kernel", 22)]  # w_ptr + rn[None, :] * K + rk[:, None]: dim 0 is rk, stride 1
    assert w.descriptor == ("tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[K, 1], "
                            "block_shape=[BLOCK_N, BLOCK_K])")
    assert w.transposed and w.offsets == ("pid_n * BLOCK_N", "k0") and w.bounded == (0, 1)
    gemm = STAGE.apply(load(CORPUS / "gemm_bias_relu_kb.py"), {"kernel": "gemm_bias_relu_kernel"})
    assert f"        w = tl.trans({w.descriptor}.load([pid_n * BLOCK_N, k0]))\n" in gemm  # other=0.0
    assert ("    tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N]).store("
            "[pid_m * BLOCK_M, pid_n * BLOCK_N], tl.broadcast_to(tl.cast(acc, c_ptr.dtype.element_ty), "
            "(BLOCK_M, BLOCK_N)))\n") in gemm
    kept = [(a.kernel, a.line, a.why) for a in accesses(load(CORPUS / "bias_gelu_t2t.py")) if a.descriptor is None]
    assert kept == [("bias_gelu_kernel", 12, "pointer term 'offs % n_cols' is neither a scalar nor an index "
                     "(times a scalar stride)")]
    text = STAGE.apply(load(CORPUS / "silu_mul_kb.py"), {"kernel": "silu_kernel"})
    assert "    x = tl.make_tensor_descriptor(x_ptr, shape=[n], strides=[1], block_shape=[BLOCK]).load(" \
           "[tl.program_id(0) * BLOCK])\n" in text  # no other: masked lanes were undefined, zeros will do
    assert "a = tl.load(a_ptr + offs, mask=offs < n)" in text  # the other kernel is another point
    rms = STAGE.apply(load(CORPUS / "rmsnorm_t2t.py"), {"kernel": "rmsnorm_kernel"})
    assert "tl.make_tensor_descriptor(x_ptr + row * n_cols, shape=[n_cols], strides=[1], block_shape=[BLOCK])" \
           ".load([0])" in rms  # the scalar terms are the base
    softmax = load(CORPUS / "softmax_online_t2t.py")
    assert [a.op for a in accesses(softmax) if a.descriptor] == ["store"]  # its loads pad with -inf
    col = [(a.line, a.why) for a in accesses(load(CORPUS / "colsum_kb.py"))]
    assert col == [(17, "the index rows has stride n_cols (a tensor descriptor's last stride must be 1)"),
                   (18, "no index term")]


def test_output_differs_from_the_input_only_in_the_rewritten_calls():
    for path in sorted(CORPUS.glob("*_kb.py")) + sorted(CORPUS.glob("*_t2t.py")):
        tf = load(path)
        for point in STAGE.space(tf, load_hw("h200")):
            text = STAGE.apply(tf, point)
            assert wrapper_unchanged(tf, text) is None, path
            old, new = tf.text.splitlines(), text.splitlines()
            assert len(old) == len(new)
            changed = [i for i, (a, b) in enumerate(zip(old, new)) if a != b]
            assert changed
            lines = {a.line - 1 for a in accesses(tf) if a.kernel == point["kernel"] and a.descriptor}
            assert set(changed) == lines, path
            assert "make_block_ptr" not in text and "boundary_check" not in text


# ---------------------------------------------------------------------------------------------------------
# Accesses it cannot prove, and the forms it reads

PROBE = '''"""Probe kernels of the tensor_descriptors tests."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def kept_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """Nothing here is provably an affine tile with a bounds mask: the kernel is not detected."""
    cols = tl.arange(0, BLOCK)
    lo = tl.load(x_ptr + cols, mask=cols < n, other=float("-inf"))
    shifted = tl.program_id(0) * BLOCK - 1 + tl.arange(0, BLOCK)
    prev = tl.load(x_ptr + 1 + shifted, mask=shifted < n - 1, other=0.0)
    wrapped = tl.load(x_ptr + (cols + 1) % n, mask=cols < n, other=0.0)
    twice = cols * 2
    even = tl.load(x_ptr + twice, mask=twice < n, other=0.0)
    le = tl.load(x_ptr + cols, mask=cols <= n - 1, other=0.0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    offs = tl.arange(0, BLOCK)
    for _ in range(0, 2):
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        offs = offs + 1
    hint = tl.load(x_ptr + cols, mask=cols < n, other=0.0, cache_modifier=".cg")
    tl.store(y_ptr + 1 + shifted, tl.maximum(lo, 0.0) + prev + wrapped + even + le + acc + hint, mask=shifted < n - 1)


@triton.jit
def tile_kernel(x_ptr, s_ptr, y_ptr, z_ptr, M, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """y = z = (x * s).T of an [M, BLOCK_N] x: a one-dimension mask, no mask, transposed loads and stores."""
    rm = tl.arange(0, BLOCK_M) + tl.program_id(0) * BLOCK_M
    rn = tl.arange(0, BLOCK_N)
    mask_m = M > rm[:, None]
    x = tl.load(x_ptr + BLOCK_N * rm[:, None] + rn[None, :], mask=mask_m, other=0)
    s = tl.load(s_ptr + rn)
    xt = tl.load(x_ptr + rm[None, :] * BLOCK_N + rn[:, None], mask=rm[None, :] < M)
    tl.store(y_ptr + rm[None, :] + rn[:, None] * M, xt * s[:, None], mask=rm[None, :] < M)
    tl.store(z_ptr + rm[:, None] + rn[None, :] * M, x * s[None, :], mask=mask_m)


class Model(nn.Module):
    def forward(self, x, s):
        m, n = x.shape
        y = torch.empty((n, m), device=x.device, dtype=x.dtype)
        z = torch.empty((n, m), device=x.device, dtype=x.dtype)
        tile_kernel[(triton.cdiv(m, 16),)](x, s, y, z, m, BLOCK_M=16, BLOCK_N=n)
        flat = x.reshape(-1)
        w = torch.empty_like(flat)
        kept_kernel[(1,)](flat, w, flat.numel(), BLOCK=triton.next_power_of_2(flat.numel()))
        return y, z, w
'''
PROBE_PATH = Path(__file__).resolve().parent / "descriptors_probe.py"  # never written: the name load() reports

STRIDES = '''"""Strides a descriptor cannot take, and an unmasked offset that may be negative (read, never run)."""
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def strides_kernel(x_ptr, y_ptr, n, m, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    c = tl.arange(0, BLOCK)
    column = tl.load(x_ptr + r * m + 3, mask=r < n, other=0.0)
    neither = tl.load(x_ptr + r[:, None] * m + c[None, :] * n)
    both = tl.load(x_ptr + r[:, None] + c[None, :])
    back = tl.program_id(0) * BLOCK - BLOCK + tl.arange(0, BLOCK)
    before = tl.load(x_ptr + back)
    tl.store(y_ptr + r[:, None] * 1 + c[None, :] * m, neither + both + column[:, None] + before[None, :])


class Model(nn.Module):
    def forward(self, x):
        strides_kernel[(1,)](x, x, 1, 1, BLOCK=16)
        return x
'''


def test_accesses_it_cannot_prove_stay_as_written_and_such_a_kernel_is_not_detected():
    tf = load(PROBE_PATH, PROBE)
    assert all(a.descriptor is None for a in accesses(tf) if a.kernel == "kept_kernel")
    reasons = [a.why for a in accesses(tf) if a.kernel == "kept_kernel"]
    assert reasons == [
        'other=float("-inf") is not zero (a descriptor load reads zeros out of bounds)',
        "the offset of shifted is not provably non-negative (a descriptor also checks >= 0)",
        "pointer term '(cols + 1) % n' is neither a scalar nor an index (times a scalar stride)",
        "twice is not assigned tl.arange(0, B) (+ offset) where it is used",
        "mask comparison 'cols <= n - 1' is not R < D",
        "offs is not assigned tl.arange(0, B) (+ offset) where it is used",  # loop-carried
        "cache_modifier has no tensor-descriptor counterpart",
        "the offset of shifted is not provably non-negative (a descriptor also checks >= 0)",
    ]
    assert STAGE.detect(tf) == ["tile_kernel"]
    text = STAGE.apply(tf, {"kernel": "tile_kernel"})
    start, end = text.index("def kept_kernel"), text.index("@triton.jit\ndef tile_kernel")
    assert text[start:end] == PROBE[start:end]  # byte-identical
    strides = load(PROBE_PATH.with_name("descriptors_strides.py"), STRIDES)
    assert [a.why for a in accesses(strides)] == [
        "the index r has stride m (a tensor descriptor's last stride must be 1)",
        "no dimension has stride 1",
        "both dimensions have stride 1",
        "the offset of back is not provably non-negative (a descriptor also checks >= 0)",  # even unmasked
        "",  # r[:, None] * 1: a literal stride 1, so dimension 0 is the stride-1 one (transposed)
    ]
    store = accesses(strides)[-1]
    assert store.transposed and store.descriptor == (
        "tl.make_tensor_descriptor(y_ptr, shape=[BLOCK, BLOCK], strides=[m, 1], block_shape=[BLOCK, BLOCK])")


def test_the_forms_it_reads_one_dimension_masks_no_mask_and_transposed_loads_and_stores():
    tf = load(PROBE_PATH, PROBE)
    got = {a.line: (a.rewritten, a.bounded) for a in accesses(tf) if a.kernel == "tile_kernel"}
    assert got == {
        34: ("tl.make_tensor_descriptor(x_ptr, shape=[M, BLOCK_N], strides=[BLOCK_N, 1], block_shape=[BLOCK_M, "
             "BLOCK_N]).load([tl.program_id(0) * BLOCK_M, 0])", (0,)),
        35: ("tl.make_tensor_descriptor(s_ptr, shape=[BLOCK_N], strides=[1], block_shape=[BLOCK_N]).load([0])", ()),
        36: ("tl.trans(tl.make_tensor_descriptor(x_ptr, shape=[M, BLOCK_N], strides=[BLOCK_N, 1], "
             "block_shape=[BLOCK_M, BLOCK_N]).load([tl.program_id(0) * BLOCK_M, 0]))", (1,)),
        37: ("tl.make_tensor_descriptor(y_ptr, shape=[BLOCK_N, M], strides=[M, 1], block_shape=[BLOCK_N, BLOCK_M])"
             ".store([0, tl.program_id(0) * BLOCK_M], VALUE)", (1,)),
        38: ("tl.make_tensor_descriptor(z_ptr, shape=[BLOCK_N, M], strides=[M, 1], block_shape=[BLOCK_N, BLOCK_M])"
             ".store([0, tl.program_id(0) * BLOCK_M], tl.trans(VALUE))", (0,)),
    }
    text = STAGE.apply(tf, {"kernel": "tile_kernel"})
    assert ".store([0, tl.program_id(0) * BLOCK_M], tl.trans(tl.broadcast_to(tl.cast(x * s[None, :], " \
           "z_ptr.dtype.element_ty), (BLOCK_M, BLOCK_N))))\n" in text


@pytest.mark.parametrize("aligned", [True, False], ids=["interpreter", "unaligned"])
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(m=size, n=st.sampled_from([4, 8, 16]), seed=st.integers(0, 2**16))
def test_the_probe_rewritten_computes_exactly_what_it_did(scratch, aligned, m, n, seed):
    if aligned:
        m = 4 * ((m + 3) // 4)  # y's and z's row pitch
    gen = torch.Generator().manual_seed(seed)
    x, s = _nonzero(gen, m, n), _nonzero(gen, n)
    new, old = _module(scratch, PROBE_PATH, "tile_kernel", PROBE), _module(scratch, PROBE_PATH, None, PROBE)
    with contextlib.nullcontext() if aligned else unaligned_descriptors():
        (y, z, w), (y0, z0, w0) = new.Model()(x, s), old.Model()(x, s)
    assert torch.equal(y, (x * s).T) and torch.equal(z, y) and torch.equal(y, y0) and torch.equal(z, z0)
    assert torch.equal(w, w0)
