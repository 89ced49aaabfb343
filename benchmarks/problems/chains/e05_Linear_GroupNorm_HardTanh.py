"""Linear 8192->4096 on 2048 rows, GroupNorm with 64 groups of features, then HardTanh to [-2, 2], fp32."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, out_features, num_groups):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)

    def forward(self, x):
        y = self.linear(x)
        y = self.group_norm(y)
        return F.hardtanh(y, min_val=-2.0, max_val=2.0)


batch_size = 2048
in_features = 8192
out_features = 4096
num_groups = 64
SMALL_SIZES = {"batch_size": 3, "in_features": 21, "out_features": 15, "num_groups": 5}


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, num_groups]
