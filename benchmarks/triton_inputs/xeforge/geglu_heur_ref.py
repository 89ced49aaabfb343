import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.proj = nn.Linear(dim, 2 * hidden, bias=False)

    def forward(self, x):
        a, b = self.proj(x).chunk(2, dim=-1)
        return nn.functional.gelu(a) * b


def get_inputs():
    return [torch.randn(32, 64)]


def get_init_inputs():
    return [64, 96]
