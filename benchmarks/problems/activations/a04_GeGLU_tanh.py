"""Gated GELU (GeGLU): split fp32 [4, 4095, 2*5503] in halves a, b along the last dim, return a * tanh-GELU(b)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        a, b = x.chunk(2, dim=-1)
        return a * F.gelu(b, approximate="tanh")


batch_size = 4
seq_len = 4095
ffn_dim = 5503
SMALL_SIZES = {"batch_size": 1, "seq_len": 3, "ffn_dim": 5}


def get_inputs():
    return [torch.randn(batch_size, seq_len, 2 * ffn_dim)]


def get_init_inputs():
    return []
