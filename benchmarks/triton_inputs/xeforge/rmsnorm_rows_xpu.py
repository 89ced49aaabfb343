# An RMSNorm written for an Intel GPU (Xe-Forge form): its own fp16 weight `w`, the mean of squares in fp32.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * n_cols + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


class Model(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.w = nn.Parameter(torch.ones(hidden, dtype=torch.float16, device="xpu"))
        self.eps = eps

    def forward(self, x):
        if not torch.xpu.is_available():
            raise RuntimeError("this kernel needs an Intel GPU")
        rows, cols = x.shape
        out = torch.empty_like(x)
        rmsnorm_kernel[(rows,)](x, self.w, out, cols, self.eps, BLOCK=triton.next_power_of_2(cols), num_warps=8,
                                grf_mode="large")
        return out
