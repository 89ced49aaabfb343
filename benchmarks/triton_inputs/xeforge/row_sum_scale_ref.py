import torch
from torch import nn


class Model(nn.Module):
    """Sum over the last dim (kept), times a constant."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x.sum(dim=-1, keepdim=True) * self.scale


def get_inputs():
    return [torch.randn(8192, 8192)]


def get_init_inputs():
    return [0.125]
