"""Block pointers written as pointer arithmetic (``axon_eg.triton_in.block_pointers``): the rewritten kernels compute
what the block pointers meant (the interpreter, hypothesis over shapes with 1 and odd sizes and transposed strides,
random nonzero values), compile through Triton's front end for an NVIDIA target, and a use the rewrite cannot
follow is refused in one line naming the kernel, the line and the pointer."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import importlib.util  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from axon_eg.triton_in import block_pointers  # noqa: E402
from axon_eg.triton_in.source import TritonInputError, load  # noqa: E402
from axon_eg.triton_in.stages import BlockPointers, wrapper_unchanged  # noqa: E402

KERNELS = '''import torch
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    pid_m = pid // tl.cdiv(N, BLOCK_N)
    pid_n = pid % tl.cdiv(N, BLOCK_N)
    a_block = tl.make_block_ptr(base=a_ptr, shape=(M, K), strides=(stride_am, stride_ak),
                                offsets=(pid_m * BLOCK_M, 0), block_shape=(BLOCK_M, BLOCK_K), order=(1, 0))
    b_block = tl.make_block_ptr(b_ptr, (K, N), (stride_bk, stride_bn), (0, pid_n * BLOCK_N), (BLOCK_K, BLOCK_N), (0, 1))
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        acc += tl.dot(tl.load(a_block, boundary_check=(0, 1), padding_option="zero"),
                      tl.load(b_block, boundary_check=(0, 1)), input_precision="ieee")
        a_block = tl.advance(a_block, (0, BLOCK_K))
        b_block = tl.advance(b_block, [BLOCK_K, 0])
    c_block = tl.make_block_ptr(base=c_ptr, shape=(M, N), strides=(stride_cm, stride_cn),
                                offsets=(pid_m * BLOCK_M, pid_n * BLOCK_N), block_shape=(BLOCK_M, BLOCK_N), order=(1, 0))
    tl.store(c_block, acc, boundary_check=(0, 1))


@triton.jit
def shifted_copy_kernel(x_ptr, y_ptr, D0, D1, D2, sx0, sx1, sx2, SHIFT: tl.constexpr,
                        B0: tl.constexpr, B1: tl.constexpr, B2: tl.constexpr):
    # y[i, j, k] = x[i, j, k + SHIFT] where that is inside x, else NaN (dims 0 and 1 fit the grid's blocks
    # exactly: only dim 2 is checked)
    p = tl.make_block_ptr(x_ptr, shape=(D0, D1, D2), strides=(sx0, sx1, sx2),
                          offsets=(tl.program_id(0) * B0, tl.program_id(1) * B1, 0), block_shape=(B0, B1, B2),
                          order=(2, 1, 0))
    q = tl.advance(p, (0, 0, SHIFT))
    out = tl.make_block_ptr(y_ptr, (D0, D1, D2), (D1 * D2, D2, 1), (tl.program_id(0) * B0, tl.program_id(1) * B1, 0),
                            (B0, B1, B2), (2, 1, 0))
    tl.store(out, tl.load(q, boundary_check=(2,), padding_option="nan"), boundary_check=(2,))
'''


def _module(text: str, tmp_path: Path, name: str):
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    text, changes = block_pointers.rewrite(KERNELS, path="kernels.py")
    assert "make_block_ptr" not in text and "tl.advance" not in text
    assert len(changes) == 5 and changes[0].startswith("line 12: block pointer a_block")
    return _module(text, tmp_path_factory.mktemp("bp"), "bp_rewritten")


def _values(*shape: int) -> torch.Tensor:
    x = torch.rand(*shape) + 0.5  # never zero
    return torch.where(torch.rand(*shape) < 0.5, -x, x)


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 70), st.integers(1, 70), st.integers(1, 70), st.booleans(), st.sampled_from([16, 32]))
def test_a_block_pointer_matmul_computes_the_product(rewritten, m, n, k, transposed, block):
    """Odd and size-1 extents (every boundary checked), the second operand row-major or transposed."""
    import triton

    a = _values(m, k)
    b = _values(n, k).t() if transposed else _values(k, n)
    c = torch.full((m, n), float("nan"))
    grid = (triton.cdiv(m, block) * triton.cdiv(n, 16),)
    rewritten.matmul_kernel[grid](a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride(),
                                  BLOCK_M=block, BLOCK_N=16, BLOCK_K=16)
    torch.testing.assert_close(c, a.double().mm(b.double()).float(), rtol=1e-4, atol=1e-4)


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 19), st.integers(0, 5))
def test_advance_into_another_pointer_and_nan_padding(rewritten, g0, g1, d2, shift):
    """``q = tl.advance(p, ...)`` copies ``p`` and moves it; only the checked dimension is masked, read out of
    bounds as NaN (``padding_option="nan"``), and the store drops what falls outside."""
    d0, d1 = 2 * g0, 4 * g1
    x = _values(d0, d1, d2)
    y = torch.zeros(d0, d1, d2)
    rewritten.shifted_copy_kernel[(g0, g1)](x, y, d0, d1, d2, *x.stride(), SHIFT=shift, B0=2, B1=4, B2=32)
    expect = torch.full_like(x, float("nan"))
    expect[..., :max(0, d2 - shift)] = x[..., shift:]
    torch.testing.assert_close(y, expect, equal_nan=True)


FRONT_END = """
import importlib.util, sys
try:
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.compiler import ASTSource
except ImportError as exc:  # a Triton without the NVIDIA backend's front end
    print("no front end:", exc)
    sys.exit(0)
spec = importlib.util.spec_from_file_location("kernels", sys.argv[1])
kernels = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kernels)
target = GPUTarget("cuda", 90, 32)
backend = CUDABackend(target)
options = backend.parse_options({})


def ttir(fn, signature, constants):
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    return str(ASTSource(fn, signature, constants).make_ir(target, options, backend.get_codegen_implementation(options),
                                                           backend.get_module_map(), context))


ints = {n: "i32" for n in ("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn")}
mm = ttir(kernels.matmul_kernel, {"a_ptr": "*fp32", "b_ptr": "*fp32", "c_ptr": "*fp32", **ints, "BLOCK_M": "constexpr",
                                  "BLOCK_N": "constexpr", "BLOCK_K": "constexpr"}, {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32})
assert "tt.dot" in mm and "scf.for" in mm, mm
copy = ttir(kernels.shifted_copy_kernel,
            {"x_ptr": "*fp32", "y_ptr": "*fp32", **{n: "i32" for n in ("D0", "D1", "D2", "sx0", "sx1", "sx2")},
             **{n: "constexpr" for n in ("SHIFT", "B0", "B1", "B2")}}, {"SHIFT": 3, "B0": 2, "B1": 4, "B2": 32})
assert "tt.store" in copy, copy
print("compiled")
"""


def test_the_rewritten_kernels_compile_for_an_nvidia_target(tmp_path):
    """Triton's front end (the TTIR a GPU compile starts from) takes the rewritten kernels: scalars carried
    through the loop, int64 strides, the NaN padding. Nothing here needs a GPU; a process of its own, as the
    interpreter (``TRITON_INTERPRET=1``) replaces Triton's jit functions at import."""
    import subprocess

    path = tmp_path / "kernels.py"
    path.write_text(block_pointers.rewrite(KERNELS)[0])
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", FRONT_END, str(path)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    if "no front end" in done.stdout:
        pytest.skip(done.stdout.strip())
    assert "compiled" in done.stdout


@pytest.mark.parametrize("body, what", [
    ("    helper(p)\n", "block pointer p used other than by tl.load"),
    ("    tl.store(y_ptr + tl.arange(0, 16), tl.load(tl.advance(p, (16,))))\n", "tl.advance outside a plain assignment"),
    ("    tl.store(y_ptr + tl.arange(0, 16), tl.load(p, boundary_check=DIMS))\n", "boundary_check=DIMS is not a literal"),
    ("    tl.store(y_ptr + tl.arange(0, 16), tl.load(p, boundary_check=(1,)))\n", "boundary_check=(1,) is not a literal"),
    ("    p = tl.make_block_ptr(x_ptr, (n,), (1,), (0,), (32,), (0,))\n", "made twice with other block shapes"),
])
def test_a_use_it_cannot_follow_is_refused_naming_kernel_line_and_pointer(body, what):
    text = ("import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(x_ptr, y_ptr, n, DIMS: tl.constexpr):\n"
            "    p = tl.make_block_ptr(x_ptr, (n,), (1,), (0,), (16,), (0,))\n" + body)
    with pytest.raises(TritonInputError) as err:
        block_pointers.rewrite(text, path="in.py")
    message = str(err.value)
    assert message.startswith("in.py:") and "kernel k" in message and what in message and "\n" not in message


def test_the_stage_rewrites_the_kernels_and_nothing_else(tmp_path):
    """Where this Triton has block pointers the rewrite is a stage: it finds the kernels using them, and its
    file differs from the input only inside them (the fixed-harness rule)."""
    wrapper = ("\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n"
               "        c = torch.empty(a.shape[0], b.shape[1])\n"
               "        matmul_kernel[(1,)](a, b, c, a.shape[0], b.shape[1], a.shape[1], *a.stride(), *b.stride(), "
               "*c.stride(), BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)\n        return c\n")
    path = tmp_path / "k.py"
    path.write_text(KERNELS + wrapper)
    tf = load(path)
    stage = BlockPointers()
    assert stage.detect(tf) == ["matmul_kernel", "shifted_copy_kernel"]
    (point,) = stage.space(tf, None)
    text = stage.apply(tf, point)
    assert "make_block_ptr" not in text and wrapper_unchanged(tf, text) is None
    only = stage.apply(tf, {"kernels": ["shifted_copy_kernel"]})
    assert only.count("make_block_ptr") == 3
