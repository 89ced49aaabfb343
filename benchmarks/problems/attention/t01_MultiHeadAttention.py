"""Non-causal multi-head attention via F.scaled_dot_product_attention: 4 x 16 heads, 2048 tokens, head dim 64, fp32."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


batch_size = 4
heads = 16
seq_len = 2048
head_dim = 64
SMALL_SIZES = {"batch_size": 1, "heads": 3, "seq_len": 7, "head_dim": 8}


def get_inputs():
    q = torch.randn(batch_size, heads, seq_len, head_dim)
    k = torch.randn(batch_size, heads, seq_len, head_dim)
    v = torch.randn(batch_size, heads, seq_len, head_dim)
    return [q, k, v]


def get_init_inputs():
    return []
