"""A lower-triangular matrix times a matrix, torch.tril(A) @ B, with A 4096 x 4096 and B 4096 x 4096, fp32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.tril(A) @ B


N = 4096
P = 4096
SMALL_SIZES = {"N": 9, "P": 1}


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, P)]


def get_init_inputs():
    return []
