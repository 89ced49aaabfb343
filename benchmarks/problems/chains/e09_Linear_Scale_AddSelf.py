"""Linear 8192->4096 on 2048 rows, y * s + y (the scaled output plus the same Linear output), fp32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        y = self.linear(x)
        return y * self.scaling_factor + y


batch_size = 2048
in_features = 8192
out_features = 4096
scaling_factor = 0.5
SMALL_SIZES = {"batch_size": 1, "in_features": 13, "out_features": 23}


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scaling_factor]
