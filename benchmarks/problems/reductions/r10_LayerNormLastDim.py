"""nn.LayerNorm over the last dim (3001, not a power of two) of fp32 [48, 1367, 3001] activations, with affine."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(hidden))
            self.norm.bias.copy_(0.1 * torch.randn(hidden))

    def forward(self, x):
        return self.norm(x)


batch = 48
seq_len = 1367
hidden = 3001
SMALL_SIZES = {"batch": 1, "seq_len": 3, "hidden": 7}


def get_inputs():
    return [torch.randn(batch, seq_len, hidden)]


def get_init_inputs():
    return [hidden]
