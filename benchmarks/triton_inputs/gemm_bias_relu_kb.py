"""GEMM + bias + ReLU: one program per output tile, a K loop of fp32 tl.dot (IEEE, as torch computes it), fixed tiles."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

M, K, N = 2048, 4096, 4096
SMALL_SIZES = {"M": 33, "K": 40, "N": 17}


@triton.jit
def gemm_bias_relu_kernel(a_ptr, w_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < N) & (rk[:, None] < K), other=0.0)
        acc += tl.dot(a, w, input_precision="ieee")
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0)
    acc = tl.maximum(acc + bias[None, :], 0.0)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


class Model(nn.Module):
    def __init__(self, k, n):
        super().__init__()
        self.linear = nn.Linear(k, n)

    def forward(self, x):
        return torch.relu(self.linear(x))


class ModelNew(nn.Module):
    def __init__(self, k, n):
        super().__init__()
        self.linear = nn.Linear(k, n)

    def forward(self, x):
        m, k = x.shape
        n = self.linear.weight.shape[0]
        c = torch.empty((m, n), device=x.device, dtype=x.dtype)
        grid = (triton.cdiv(m, 32), triton.cdiv(n, 32))
        gemm_bias_relu_kernel[grid](x, self.linear.weight, self.linear.bias, c, m, n, k, BLOCK_M=32, BLOCK_N=32,
                                    BLOCK_K=32)
        return c


def get_inputs():
    return [torch.randn(M, K)]


def get_init_inputs():
    return [K, N]
