"""A matmul with both operands stored transposed (A is K x M, B is N x K): C = A.T @ B.T at 3072 x 4096 x 2048, fp32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A.T, B.T)


M = 3072
K = 2048
N = 4096
SMALL_SIZES = {"M": 11, "K": 19, "N": 6}


def get_inputs():
    return [torch.randn(K, M), torch.randn(N, K)]


def get_init_inputs():
    return []
