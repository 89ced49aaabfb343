"""A matrix-vector product y = A @ x with a (16000 x 16384) fp32 matrix and a 1-D vector (memory-bound)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, x):
        return torch.matmul(A, x)


M = 16000
K = 16384
SMALL_SIZES = {"M": 13, "K": 1}


def get_inputs():
    return [torch.randn(M, K), torch.randn(K)]


def get_init_inputs():
    return []
