"""Causal grouped-query attention: 4 query heads share each key/value head (scaled_dot_product_attention)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


batch_size = 2
q_heads = 16
kv_heads = 4
seq_len = 512
head_dim = 128
SMALL_SIZES = {"batch_size": 1, "q_heads": 4, "kv_heads": 2, "seq_len": 5, "head_dim": 8}


def get_inputs():
    q = torch.randn(batch_size, q_heads, seq_len, head_dim)
    k = torch.randn(batch_size, kv_heads, seq_len, head_dim)
    v = torch.randn(batch_size, kv_heads, seq_len, head_dim)
    return [q, k, v]


def get_init_inputs():
    return []
