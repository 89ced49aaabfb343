# A row sum times a constant written for an Intel GPU (Xe-Forge form): the row walked in blocks, fp32 accumulation.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sum_scale_kernel(x_ptr, out_ptr, n_cols, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, (tl.sum(acc, axis=0) * scale).to(out_ptr.dtype.element_ty))


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        x = x.contiguous().to(device="xpu")
        rows, cols = x.shape
        out = torch.empty((rows, 1), dtype=x.dtype, device=torch.device("xpu"))
        row_sum_scale_kernel[(rows,)](x, out, cols, self.scale, BLOCK=256, num_warps=4, warp_size=16)
        torch.xpu.synchronize()
        return out
