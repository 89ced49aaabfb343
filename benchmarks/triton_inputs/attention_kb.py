"""Attention, one query row per program: the whole score row in registers (keys up to BLOCK_T)."""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

B, H, S, D = 4, 16, 1024, 64
SMALL_SIZES = {"B": 1, "H": 2, "S": 9, "D": 16}


@triton.jit
def attention_row_kernel(q_ptr, k_ptr, v_ptr, o_ptr, S, D, scale, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    bh = tl.program_id(0)
    i = tl.program_id(1)
    t = tl.arange(0, BLOCK_T)
    d = tl.arange(0, BLOCK_D)
    base = bh * S * D
    q = tl.load(q_ptr + base + i * D + d, mask=d < D, other=0.0)
    k = tl.load(k_ptr + base + t[:, None] * D + d[None, :], mask=(t[:, None] < S) & (d[None, :] < D), other=0.0)
    s = tl.sum(k * q[None, :], axis=1) * scale
    s = tl.where(t < S, s, -float("inf"))
    p = tl.exp(s - tl.max(s, axis=0))
    p = p / tl.sum(p, axis=0)
    v = tl.load(v_ptr + base + t[:, None] * D + d[None, :], mask=(t[:, None] < S) & (d[None, :] < D), other=0.0)
    tl.store(o_ptr + base + i * D + d, tl.sum(p[:, None] * v, axis=0), mask=d < D)


class Model(nn.Module):
    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)


class ModelNew(nn.Module):
    def forward(self, q, k, v):
        b, h, s, d = q.shape
        o = torch.empty_like(q)
        attention_row_kernel[(b * h, s)](q, k, v, o, s, d, 1.0 / math.sqrt(d), BLOCK_T=triton.next_power_of_2(s),
                                         BLOCK_D=triton.next_power_of_2(d))
        return o


def get_inputs():
    return [torch.randn(B, H, S, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)]


def get_init_inputs():
    return []
