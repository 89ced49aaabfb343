# A Linear written for an Intel GPU: its own fp16 weights, the weight kept [in, out] (Xe-Forge form).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_kernel(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0)
    acc += bias[None, :].to(tl.float32)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        dev = "xpu" if torch.xpu.is_available() else "cpu"
        self.w = nn.Parameter(torch.randn(in_features, out_features, dtype=torch.float16, device=dev))
        self.b = nn.Parameter(torch.randn(out_features, dtype=torch.float16, device=dev))

    def forward(self, x):
        M, K = x.shape
        N = self.w.shape[1]
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
        grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
        linear_kernel[grid](x, self.w, self.b, out, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32,
                            num_warps=4, grf_mode="large")
        torch.xpu.synchronize()
        return out
