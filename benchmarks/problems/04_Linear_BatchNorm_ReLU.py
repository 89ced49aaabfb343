"""Linear layer, BatchNorm1d (training mode: batch statistics, as KernelBench evaluates it), then ReLU."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, bn_eps=1e-5, bn_momentum=0.1):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features, eps=bn_eps, momentum=bn_momentum)

    def forward(self, x):
        x = self.linear(x)
        x = self.bn(x)
        x = torch.relu(x)
        return x


batch_size = 128
in_features = 2048
out_features = 2048
SMALL_SIZES = {"batch_size": 8, "in_features": 32, "out_features": 16}


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
