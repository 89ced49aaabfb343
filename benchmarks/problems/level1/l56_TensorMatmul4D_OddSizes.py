"""einsum('bijl,lk->bijk') of fp32 [3, 97, 509, 383] and [383, 769]: no power of two."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.einsum("bijl,lk->bijk", A, B)


batch = 3
dim_i = 97
dim_j = 509
dim_l = 383
dim_k = 769
SMALL_SIZES = {"batch": 2, "dim_i": 3, "dim_j": 2, "dim_l": 5, "dim_k": 4}


def get_inputs():
    return [torch.randn(batch, dim_i, dim_j, dim_l), torch.randn(dim_l, dim_k)]


def get_init_inputs():
    return []
