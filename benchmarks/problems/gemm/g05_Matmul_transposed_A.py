"""A matmul whose left operand is stored transposed (A is K x M): C = A.T @ B, fp32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A.T, B)


M = 1024
K = 4096
N = 2048
SMALL_SIZES = {"M": 24, "K": 40, "N": 16}


def get_inputs():
    return [torch.randn(K, M), torch.randn(K, N)]


def get_init_inputs():
    return []
