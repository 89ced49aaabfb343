"""einsum('bijl,lk->bijk') of fp32 [2, 63, 129, 4099] and [4099, 257]: a long contraction."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.einsum("bijl,lk->bijk", A, B)


batch = 2
dim_i = 63
dim_j = 129
dim_l = 4099
dim_k = 257
SMALL_SIZES = {"batch": 2, "dim_i": 3, "dim_j": 2, "dim_l": 5, "dim_k": 4}


def get_inputs():
    return [torch.randn(batch, dim_i, dim_j, dim_l), torch.randn(dim_l, dim_k)]


def get_init_inputs():
    return []
