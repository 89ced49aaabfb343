"""nn.LayerNorm(37) over the last dim of fp32 [1024, 2731, 37]: 2.8M rows of 37."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)
        with torch.no_grad():
            self.ln.weight.copy_(1.0 + 0.1 * torch.randn(hidden))
            self.ln.bias.copy_(0.1 * torch.randn(hidden))

    def forward(self, x):
        return self.ln(x)


batch_size = 1024
seq_len = 2731
hidden = 37
SMALL_SIZES = {"batch_size": 2, "seq_len": 3, "hidden": 5}


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden]
