# Column mean over the rows of a [rows, cols] matrix (reduction along the strided axis) for an Intel GPU, each program a
# stripe of columns, timed with xpu events in the module (a profiling leftover), fp16 input, fp32 output.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK_C": 64, "BLOCK_R": 32}, num_warps=4, threads_per_warp=16),
                          triton.Config({"BLOCK_C": 128, "BLOCK_R": 16}, num_warps=8, threads_per_warp=16)],
                 key=["rows", "cols"])
@triton.jit
def colmean_kernel(x_ptr, y_ptr, rows, cols, BLOCK_C: tl.constexpr, BLOCK_R: tl.constexpr):
    c = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    acc = tl.zeros((BLOCK_C,), dtype=tl.float32)
    for r0 in range(0, rows, BLOCK_R):
        r = r0 + tl.arange(0, BLOCK_R)
        tile = tl.load(x_ptr + r[:, None] * cols + c[None, :], mask=(r[:, None] < rows) & (c[None, :] < cols), other=0.0)
        acc += tl.sum(tile.to(tl.float32), axis=0)
    tl.store(y_ptr + c, acc / rows, mask=c < cols)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.start = torch.xpu.Event(enable_timing=True)
        self.end = torch.xpu.Event(enable_timing=True)

    def forward(self, x):
        rows, cols = x.shape
        y = torch.empty(cols, dtype=torch.float32, device="xpu")
        self.start.record()
        colmean_kernel[lambda META: (triton.cdiv(cols, META["BLOCK_C"]),)](x, y, rows, cols)
        self.end.record()
        return y
