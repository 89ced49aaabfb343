"""A 3-D fp32 tensor times a matrix: (8, 1500, 1280) @ (1280, 3072), the weight shared across the batch."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, W):
        return torch.matmul(x, W)


batch_size = 8
seq_len = 1500
k = 1280
n = 3072
SMALL_SIZES = {"batch_size": 2, "seq_len": 7, "k": 9, "n": 1}


def get_inputs():
    return [torch.randn(batch_size, seq_len, k), torch.randn(k, n)]


def get_init_inputs():
    return []
