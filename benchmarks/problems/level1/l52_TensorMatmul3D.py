"""torch.matmul of fp32 [16, 1024, 2048] by a [2048, 768] matrix: KernelBench 10_3D_tensor_matrix_multiplication."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


N = 16
M = 1024
K = 2048
L = 768
SMALL_SIZES = {"N": 2, "M": 3, "K": 5, "L": 4}


def get_inputs():
    return [torch.randn(N, M, K), torch.randn(K, L)]


def get_init_inputs():
    return []
