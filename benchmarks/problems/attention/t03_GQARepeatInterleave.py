"""Causal GQA, 32 query heads over 8 key/value heads widened by repeat_interleave: 2048 tokens, head dim 128, fp32."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, group):
        super().__init__()
        self.group = group

    def forward(self, q, k, v):
        k = k.repeat_interleave(self.group, dim=1)
        v = v.repeat_interleave(self.group, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


batch_size = 2
kv_heads = 8
group = 4
seq_len = 2048
head_dim = 128
SMALL_SIZES = {"batch_size": 1, "kv_heads": 2, "group": 3, "seq_len": 5, "head_dim": 8}


def get_inputs():
    q = torch.randn(batch_size, kv_heads * group, seq_len, head_dim)
    k = torch.randn(batch_size, kv_heads, seq_len, head_dim)
    v = torch.randn(batch_size, kv_heads, seq_len, head_dim)
    return [q, k, v]


def get_init_inputs():
    return [group]
