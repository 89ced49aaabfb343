"""F.softplus over fp32 [682, 393216]: KernelBench 29_Softplus with its 4096 rows cut to 682 (1 GiB)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.softplus(x)


batch_size = 682
dim = 393216
SMALL_SIZES = {"batch_size": 3, "dim": 7}


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
