"""RMSNorm over the hidden dimension of [batch, seq, hidden] activations, with a learned scale."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden_size))
        self.eps = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x


batch_size = 4
seq_len = 256
hidden_size = 4096
SMALL_SIZES = {"batch_size": 2, "seq_len": 3, "hidden_size": 16}


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return [hidden_size]
