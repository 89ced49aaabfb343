"""L2 normalization along the leading dim (dim 0, 67 long) of an fp32 [67, 2003, 1499] tensor with F.normalize."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, eps):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        return F.normalize(x, p=2.0, dim=0, eps=self.eps)


dim0 = 67
dim1 = 2003
dim2 = 1499
eps = 1e-12
SMALL_SIZES = {"dim0": 3, "dim1": 5, "dim2": 7}


def get_inputs():
    return [torch.randn(dim0, dim1, dim2)]


def get_init_inputs():
    return [eps]
