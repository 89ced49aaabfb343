"""Linear layer, GroupNorm over groups of features, then Swish (x * sigmoid(x))."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, num_groups):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)

    def forward(self, x):
        x = self.gemm(x)
        x = self.group_norm(x)
        x = x * torch.sigmoid(x)
        return x


batch_size = 128
in_features = 2048
out_features = 4096
num_groups = 32
SMALL_SIZES = {"batch_size": 8, "in_features": 32, "out_features": 24, "num_groups": 4}


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, num_groups]
