"""LayerNorm over the hidden dimension followed by tanh-approximated GELU."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.norm = nn.LayerNorm(hidden_size)
        with torch.no_grad():
            self.norm.weight.add_(0.1 * torch.randn(hidden_size))
            self.norm.bias.add_(0.1 * torch.randn(hidden_size))

    def forward(self, x):
        return nn.functional.gelu(self.norm(x), approximate="tanh")


batch_size = 4
seq_len = 256
hidden_size = 4096
SMALL_SIZES = {"batch_size": 2, "seq_len": 3, "hidden_size": 16}


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return [hidden_size]
