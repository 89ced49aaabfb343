"""A batched matmul (torch.bmm) in fp32, as KernelBench's batched-matmul problem."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.bmm(A, B)


batch_size = 128
m = 128
k = 256
n = 512
SMALL_SIZES = {"batch_size": 3, "m": 16, "k": 24, "n": 40}


def get_inputs():
    return [torch.randn(batch_size, m, k), torch.randn(batch_size, k, n)]


def get_init_inputs():
    return []
