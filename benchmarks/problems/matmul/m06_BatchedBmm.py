"""A batched matmul (torch.bmm) of 64 (512 x 1024) @ (1024 x 768) products in fp32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.bmm(A, B)


batch_size = 64
m = 512
k = 1024
n = 768
SMALL_SIZES = {"batch_size": 1, "m": 9, "k": 13, "n": 5}


def get_inputs():
    return [torch.randn(batch_size, m, k), torch.randn(batch_size, k, n)]


def get_init_inputs():
    return []
