"""Causal multi-head attention (scaled_dot_product_attention, is_causal=True): 16 heads, 4096 tokens, head dim 128, fp32."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


batch_size = 1
heads = 16
seq_len = 4096
head_dim = 128
SMALL_SIZES = {"batch_size": 2, "heads": 1, "seq_len": 9, "head_dim": 8}


def get_inputs():
    q = torch.randn(batch_size, heads, seq_len, head_dim)
    k = torch.randn(batch_size, heads, seq_len, head_dim)
    v = torch.randn(batch_size, heads, seq_len, head_dim)
    return [q, k, v]


def get_init_inputs():
    return []
