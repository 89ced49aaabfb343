"""fp32 Linear, scaling by a constant, ReLU: a KernelBench level-2 GEMM + epilogue at its published size."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        return torch.relu(self.linear(x) * self.scale)


batch_size = 1024
in_features = 8192
out_features = 8192
scale = 0.5
SMALL_SIZES = {"batch_size": 8, "in_features": 48, "out_features": 40}


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
