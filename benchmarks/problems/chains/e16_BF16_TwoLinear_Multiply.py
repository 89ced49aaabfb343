"""bf16: two Linear layers 8192->8192 applied to the same 4096 rows, their outputs multiplied elementwise."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.left = nn.Linear(in_features, out_features, dtype=torch.bfloat16)
        self.right = nn.Linear(in_features, out_features, dtype=torch.bfloat16)

    def forward(self, x):
        return self.left(x) * self.right(x)


batch_size = 4096
in_features = 8192
out_features = 8192
SMALL_SIZES = {"batch_size": 3, "in_features": 18, "out_features": 7}


def get_inputs():
    return [torch.randn(batch_size, in_features, dtype=torch.bfloat16)]


def get_init_inputs():
    return [in_features, out_features]
