"""Weight-only int4 linear: int32-packed nibbles unpacked by shifts and masks, centered, scaled, then x @ W.T."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, packed, scales):
        shifts = torch.arange(0, 32, 4, dtype=torch.int32)
        nibbles = (packed[:, :, None] >> shifts) & 15
        weight = (nibbles.reshape(packed.shape[0], -1).float() - 8.0) * scales[:, None]
        return x @ weight.T


tokens = 512
out_features = 4096
in_features = 4096
SMALL_SIZES = {"tokens": 2, "out_features": 3, "in_features": 16}


def get_inputs():
    packed = torch.randint(-2**31, 2**31 - 1, (out_features, in_features // 8), dtype=torch.int64).to(torch.int32)
    return [torch.randn(tokens, in_features), packed, torch.rand(out_features) * 0.02 + 0.01]


def get_init_inputs():
    return []
