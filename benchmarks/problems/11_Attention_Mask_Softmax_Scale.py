"""Attention written out: scores with an explicit scale and additive mask, softmax, then values."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, head_dim):
        super().__init__()
        self.scale = head_dim**-0.5

    def forward(self, q, k, v, mask):
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale + mask
        probs = torch.softmax(scores, dim=-1)
        return torch.matmul(probs, v)


batch_size = 4
heads = 8
seq_len = 256
head_dim = 64
SMALL_SIZES = {"batch_size": 1, "heads": 2, "seq_len": 6, "head_dim": 8}


def get_inputs():
    q = torch.randn(batch_size, heads, seq_len, head_dim)
    k = torch.randn(batch_size, heads, seq_len, head_dim)
    v = torch.randn(batch_size, heads, seq_len, head_dim)
    mask = torch.randn(batch_size, 1, seq_len, seq_len)
    return [q, k, v, mask]


def get_init_inputs():
    return [head_dim]
