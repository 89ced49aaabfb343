"""A matmul with a huge reduction and small, uneven M and N: (384 x 196608) @ (196608 x 320) in fp32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


M = 384
K = 196608
N = 320
SMALL_SIZES = {"M": 5, "K": 3001, "N": 3}


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
