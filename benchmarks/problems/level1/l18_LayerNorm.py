"""nn.LayerNorm((64, 256, 256)) over fp32 [16, 64, 256, 256], 16 rows of 4M: KernelBench 40_LayerNorm's size."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)
        with torch.no_grad():
            self.ln.weight.copy_(1.0 + 0.1 * torch.randn(normalized_shape))
            self.ln.bias.copy_(0.1 * torch.randn(normalized_shape))

    def forward(self, x):
        return self.ln(x)


batch_size = 16
features = 64
dim1 = 256
dim2 = 256
SMALL_SIZES = {"batch_size": 2, "features": 3, "dim1": 5, "dim2": 4}


def get_inputs():
    return [torch.randn(batch_size, features, dim1, dim2)]


def get_init_inputs():
    return [(features, dim1, dim2)]
