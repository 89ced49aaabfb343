"""torch.max(x, dim=1)[0] of fp32 [16, 4096, 4095]: KernelBench 49_Max_reduction_..., batch 128 cut to 16."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.max(x, dim=self.dim)[0]


batch_size = 16
dim1 = 4096
dim2 = 4095
reduce_dim = 1
SMALL_SIZES = {"batch_size": 2, "dim1": 5, "dim2": 3}


def get_inputs():
    return [torch.rand(batch_size, dim1, dim2)]


def get_init_inputs():
    return [reduce_dim]
