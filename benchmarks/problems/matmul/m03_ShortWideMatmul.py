"""A short-wide matmul: a (256 x 1024) fp32 matrix times a (1024 x 131072) one, a 256 x 131072 result."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


M = 256
K = 1024
N = 131072
SMALL_SIZES = {"M": 3, "K": 17, "N": 515}


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
