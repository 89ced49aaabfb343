"""Linear layer, then sigmoid, scaling and a residual add of the linear output: y = x@W.T + b; y + s*sigmoid(y)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = self.gemm(x)
        original_x = x
        x = torch.sigmoid(x)
        x = x * self.scaling_factor
        x = x + original_x
        return x


batch_size = 128
in_features = 4096
out_features = 4096
scaling_factor = 2.0
SMALL_SIZES = {"batch_size": 8, "in_features": 32, "out_features": 24}


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scaling_factor]
