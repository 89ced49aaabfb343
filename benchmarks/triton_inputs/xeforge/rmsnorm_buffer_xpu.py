# RMSNorm times a per-channel scale kept in a buffer (not a parameter), for an Intel GPU: 1-d block pointers walked
# with a while loop, fp16 in and out, fp32 weight.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rms_kernel(x_ptr, w_ptr, s_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    xb = tl.make_block_ptr(base=x_ptr + row * n_cols, shape=(n_cols,), strides=(1,), offsets=(0,),
                           block_shape=(BLOCK,), order=(0,))
    ss = tl.zeros((BLOCK,), dtype=tl.float32)
    start = 0
    while start < n_cols:
        v = tl.load(xb, boundary_check=(0,), padding_option="zero").to(tl.float32)
        ss += v * v
        xb = tl.advance(xb, (BLOCK,))
        start += BLOCK
    inv = 1.0 / tl.sqrt(tl.sum(ss, axis=0) / n_cols + eps)
    for c0 in tl.range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        m = cols < n_cols
        v = tl.load(x_ptr + row * n_cols + cols, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=m, other=0.0)
        s = tl.load(s_ptr + cols, mask=m, other=0.0)
        tl.store(y_ptr + row * n_cols + cols, (v * inv * w * s).to(tl.float16), mask=m)


class Model(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden, device="xpu"))
        self.register_buffer("scale", torch.rand(hidden, device="xpu") + 0.5)
        self.eps = eps

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1]).contiguous()
        y = torch.empty_like(x)
        rms_kernel[(x.shape[0],)](x, self.weight, self.scale, y, shape[-1], self.eps, BLOCK=1024, num_warps=4,
                                  grf_mode="256")
        return y.view(shape)
