"""A diagonal matrix times a matrix written densely, torch.diag(d) @ B, with d of length 4096 and B 4096 x 4096, fp32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, d, B):
        return torch.diag(d) @ B


M = 4096
N = 4096
SMALL_SIZES = {"M": 7, "N": 1}


def get_inputs():
    return [torch.randn(M), torch.randn(M, N)]


def get_init_inputs():
    return []
