"""RMSNorm, Triton-to-Triton form: Model launches the kernel (the reference is rmsnorm_ref.py, inputs rmsnorm.yaml)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0)
    rms = tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + row * n_cols + offs, x / rms * w, mask=mask)


class Model(nn.Module):
    def __init__(self, cols, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(cols))
        self.eps = eps

    def forward(self, x):
        y = torch.empty_like(x)
        rmsnorm_kernel[(x.shape[0],)](x, self.weight, y, x.shape[1], self.eps, BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
