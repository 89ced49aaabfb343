"""Non-causal multi-head attention in bf16 via F.scaled_dot_product_attention: 2 x 32 heads, 4096 tokens, head dim 128."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


batch_size = 2
heads = 32
seq_len = 4096
head_dim = 128
SMALL_SIZES = {"batch_size": 1, "heads": 2, "seq_len": 9, "head_dim": 16}


def get_inputs():
    q = torch.randn(batch_size, heads, seq_len, head_dim, dtype=torch.bfloat16)
    k = torch.randn(batch_size, heads, seq_len, head_dim, dtype=torch.bfloat16)
    v = torch.randn(batch_size, heads, seq_len, head_dim, dtype=torch.bfloat16)
    return [q, k, v]


def get_init_inputs():
    return []
