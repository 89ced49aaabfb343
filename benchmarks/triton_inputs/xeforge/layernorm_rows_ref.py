import torch
from torch import nn


class Model(nn.Module):
    """LayerNorm over the last dim, with a learned scale and shift."""

    def __init__(self, hidden):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)
        with torch.no_grad():  # away from the identity a fresh LayerNorm has
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.ln(x)


def get_inputs():
    return [torch.randn(2048, 4096)]


def get_init_inputs():
    return [4096]
