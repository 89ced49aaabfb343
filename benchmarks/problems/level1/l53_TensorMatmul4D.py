"""einsum('bijl,lk->bijk') of fp32 [7, 256, 512, 256] and [256, 768]: 11_4D_tensor_matrix_multiplication, b 8 to 7."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.einsum("bijl,lk->bijk", A, B)


batch = 7
dim_i = 256
dim_j = 512
dim_l = 256
dim_k = 768
SMALL_SIZES = {"batch": 2, "dim_i": 3, "dim_j": 2, "dim_l": 5, "dim_k": 4}


def get_inputs():
    return [torch.randn(batch, dim_i, dim_j, dim_l), torch.randn(dim_l, dim_k)]


def get_init_inputs():
    return []
