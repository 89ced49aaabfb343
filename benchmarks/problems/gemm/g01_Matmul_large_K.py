"""A single matmul with a very large reduction dimension (fp32), as KernelBench's large-K problem."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


M = 256
N = 256
K = 131072
SMALL_SIZES = {"M": 16, "N": 16, "K": 1024}


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
