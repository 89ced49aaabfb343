"""Softplus with beta=2 and threshold=5 (linear above x = 2.5) over an fp32 [11999, 14001] matrix (168M elements)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, beta, threshold):
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, x):
        return F.softplus(x, beta=self.beta, threshold=self.threshold)


rows = 11999
cols = 14001
beta = 2.0
threshold = 5.0
SMALL_SIZES = {"rows": 7, "cols": 9}


def get_inputs():
    return [2.0 * torch.randn(rows, cols)]


def get_init_inputs():
    return [beta, threshold]
