"""QuickGELU x * sigmoid(1.702 x) over fp32 ViT MLP activations [64, 577, 4096] (151M elements)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)


batch_size = 64
tokens = 577
mlp_dim = 4096
SMALL_SIZES = {"batch_size": 1, "tokens": 5, "mlp_dim": 3}


def get_inputs():
    return [torch.randn(batch_size, tokens, mlp_dim)]


def get_init_inputs():
    return []
