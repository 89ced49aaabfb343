# Linear and exact GELU written for an Intel GPU with block pointers (Xe-Forge form): fp16 weight kept as
# nn.Linear keeps it, [out, in], read transposed through its strides; Intel launch knobs in the autotune configs.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "grf_mode": "large"}, num_warps=8, num_stages=2),
        triton.Config({"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32, "grf_mode": "large"}, num_warps=4, num_stages=2),
    ],
    key=["M", "N", "K"],
)
@triton.jit
def linear_gelu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_xk, stride_wn, stride_wk,
                       stride_ym, stride_yn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    x_block = tl.make_block_ptr(base=x_ptr, shape=(M, K), strides=(stride_xm, stride_xk),
                                offsets=(pid_m * BLOCK_M, 0), block_shape=(BLOCK_M, BLOCK_K), order=(1, 0))
    # the weight is [N, K]: its transpose [K, N] through the strides, column-major
    w_block = tl.make_block_ptr(base=w_ptr, shape=(K, N), strides=(stride_wk, stride_wn),
                                offsets=(0, pid_n * BLOCK_N), block_shape=(BLOCK_K, BLOCK_N), order=(0, 1))
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BLOCK_K)):
        x = tl.load(x_block, boundary_check=(0, 1), padding_option="zero")
        w = tl.load(w_block, boundary_check=(0, 1), padding_option="zero")
        acc += tl.dot(x, w)
        x_block = tl.advance(x_block, (0, BLOCK_K))
        w_block = tl.advance(w_block, (BLOCK_K, 0))
    b_block = tl.make_block_ptr(b_ptr, (N,), (1,), (pid_n * BLOCK_N,), (BLOCK_N,), (0,))
    acc += tl.load(b_block, boundary_check=(0,)).to(tl.float32)[None, :]
    acc = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
    y_block = tl.make_block_ptr(base=y_ptr, shape=(M, N), strides=(stride_ym, stride_yn),
                                offsets=(pid_m * BLOCK_M, pid_n * BLOCK_N), block_shape=(BLOCK_M, BLOCK_N),
                                order=(1, 0))
    tl.store(y_block, acc.to(y_ptr.dtype.element_ty), boundary_check=(0, 1))


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features, dtype=torch.float16, device="xpu") * 0.05)
        self.bias = nn.Parameter(torch.randn(out_features, dtype=torch.float16, device="xpu"))

    def forward(self, x):
        x = x.to("xpu")
        M, K = x.shape
        N = self.weight.shape[0]
        y = torch.empty((M, N), dtype=x.dtype, device=x.device)
        grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]) * triton.cdiv(N, META["BLOCK_N"]),)  # noqa: E731
        linear_gelu_kernel[grid](x, self.weight, self.bias, y, M, N, K, x.stride(0), x.stride(1),
                                 self.weight.stride(0), self.weight.stride(1), y.stride(0), y.stride(1))
        return y
