"""torch.sum over dim 1 (keepdim) of fp32 [16, 4096, 4095]: KernelBench 47_Sum_reduction_..., batch 128 cut to 16."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.sum(x, dim=self.dim, keepdim=True)


batch_size = 16
dim1 = 4096
dim2 = 4095
reduce_dim = 1
SMALL_SIZES = {"batch_size": 2, "dim1": 5, "dim2": 3}


def get_inputs():
    return [torch.rand(batch_size, dim1, dim2)]


def get_init_inputs():
    return [reduce_dim]
