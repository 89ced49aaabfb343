# GeGLU (gelu(x @ Wa) * (x @ Wb)) written for an Intel GPU: two kernels per forward (a GEMM producing both halves,
# then a heuristics-driven gate), bf16 weights, .xpu() moves, a device count check.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gemm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.heuristics({"EVEN": lambda args: args["half"] % args["BLOCK"] == 0})
@triton.jit
def gate_kernel(h_ptr, y_ptr, half, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        a = tl.load(h_ptr + row * 2 * half + cols).to(tl.float32)
        b = tl.load(h_ptr + row * 2 * half + half + cols).to(tl.float32)
    else:
        a = tl.load(h_ptr + row * 2 * half + cols, mask=cols < half, other=0.0).to(tl.float32)
        b = tl.load(h_ptr + row * 2 * half + half + cols, mask=cols < half, other=0.0).to(tl.float32)
    g = 0.5 * a * (1.0 + tl.math.erf(a * 0.7071067811865476))
    tl.store(y_ptr + row * half + cols, (g * b).to(y_ptr.dtype.element_ty), mask=cols < half)


class Model(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        assert torch.xpu.device_count() > 0, "needs an XPU"
        self.w = nn.Parameter((torch.randn(dim, 2 * hidden) * dim ** -0.5).to(torch.bfloat16).xpu())

    def forward(self, x):
        x = x.xpu()
        m, k = x.shape
        n = self.w.shape[1]
        h = torch.empty((m, n), dtype=x.dtype, device=x.device)
        gemm_kernel[(triton.cdiv(m, 64), triton.cdiv(n, 64))](x, self.w, h, m, n, k, BLOCK_M=64, BLOCK_N=64,
                                                               BLOCK_K=32, num_warps=8, grf_mode="large")
        y = torch.empty((m, n // 2), dtype=x.dtype, device=x.device)
        gate_kernel[(m, triton.cdiv(n // 2, 256))](h, y, n // 2, BLOCK=256, warp_size=32)
        return y
