"""Matmul with a weight, halving, sum over the output columns (keepdim) and scaling."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size, input_size) * input_size**-0.5)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = torch.matmul(x, self.weight.T)
        x = x / 2
        x = torch.sum(x, dim=1, keepdim=True)
        x = x * self.scaling_factor
        return x


batch_size = 128
input_size = 4096
hidden_size = 4096
scaling_factor = 1.5
SMALL_SIZES = {"batch_size": 8, "input_size": 32, "hidden_size": 24}


def get_inputs():
    return [torch.randn(batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, scaling_factor]
