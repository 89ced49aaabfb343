"""Cross-attention (scaled_dot_product_attention): 1024 queries attend to 3072 keys, 4 x 16 heads, head dim 64, fp32."""

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
q_len = 1024
kv_len = 3072
head_dim = 64
SMALL_SIZES = {"batch_size": 2, "heads": 2, "q_len": 3, "kv_len": 11, "head_dim": 8}


def get_inputs():
    q = torch.randn(batch_size, heads, q_len, head_dim)
    k = torch.randn(batch_size, heads, kv_len, head_dim)
    v = torch.randn(batch_size, heads, kv_len, head_dim)
    return [q, k, v]


def get_init_inputs():
    return []
