"""A square bf16 matmul C = A @ B at M = N = K = 8192 (m01 in bf16, larger so the tensor cores stay busy)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


N = 8192
SMALL_SIZES = {"N": 37}


def get_inputs():
    return [torch.randn(N, N, dtype=torch.bfloat16), torch.randn(N, N, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
