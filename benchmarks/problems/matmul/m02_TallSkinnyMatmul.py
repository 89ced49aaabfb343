"""A tall-skinny matmul: a (1048576 x 128) fp32 matrix times a (128 x 96) one."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


M = 1048576
K = 128
N = 96
SMALL_SIZES = {"M": 1023, "K": 7, "N": 1}


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
