import torch
from torch import nn


class Model(nn.Module):
    """Linear, ReLU, times a constant."""

    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        return torch.relu(self.linear(x)) * self.scale


def get_inputs():
    return [torch.randn(128, 512)]


def get_init_inputs():
    return [512, 256, 0.5]
