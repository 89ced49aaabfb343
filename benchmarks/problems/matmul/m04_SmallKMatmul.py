"""A matmul with a tiny reduction dimension, K = 32: (16384 x 32) @ (32 x 12288) in fp32 (an outer-product-like GEMM)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


M = 16384
K = 32
N = 12288
SMALL_SIZES = {"M": 45, "K": 1, "N": 29}


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
