"""einsum('bijl,lk->bijk') of fp32 [16, 253, 511, 7] and [7, 96]: a 7-long contraction."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.einsum("bijl,lk->bijk", A, B)


batch = 16
dim_i = 253
dim_j = 511
dim_l = 7
dim_k = 96
SMALL_SIZES = {"batch": 2, "dim_i": 3, "dim_j": 2, "dim_l": 5, "dim_k": 4}


def get_inputs():
    return [torch.randn(batch, dim_i, dim_j, dim_l), torch.randn(dim_l, dim_k)]


def get_init_inputs():
    return []
