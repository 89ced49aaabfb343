"""A batched bf16 matmul (torch.bmm) of 64 (1024 x 2048) @ (2048 x 1024) products (m06 in bf16, larger)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.bmm(A, B)


batch_size = 64
m = 1024
k = 2048
n = 1024
SMALL_SIZES = {"batch_size": 3, "m": 1, "k": 17, "n": 10}


def get_inputs():
    return [torch.randn(batch_size, m, k, dtype=torch.bfloat16), torch.randn(batch_size, k, n, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
