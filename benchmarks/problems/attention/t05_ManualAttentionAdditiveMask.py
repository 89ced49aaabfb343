"""softmax(q @ k^T * scale + mask) @ v written out, one (seq x seq) additive mask: 2 x 16 heads, 2048 tokens, dim 128, fp32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, head_dim):
        super().__init__()
        self.scale = head_dim**-0.5

    def forward(self, q, k, v, mask):
        scores = q @ k.transpose(-2, -1) * self.scale + mask
        return torch.softmax(scores, dim=-1) @ v


batch_size = 2
heads = 16
seq_len = 2048
head_dim = 128
SMALL_SIZES = {"batch_size": 1, "heads": 3, "seq_len": 7, "head_dim": 8}


def get_inputs():
    q = torch.randn(batch_size, heads, seq_len, head_dim)
    k = torch.randn(batch_size, heads, seq_len, head_dim)
    v = torch.randn(batch_size, heads, seq_len, head_dim)
    mask = torch.randn(seq_len, seq_len)
    return [q, k, v, mask]


def get_init_inputs():
    return [head_dim]
