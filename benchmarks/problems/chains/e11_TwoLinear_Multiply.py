"""Two Linear layers 4096->4096 applied to the same 2048 rows, their outputs multiplied elementwise, fp32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.left = nn.Linear(in_features, out_features)
        self.right = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.left(x) * self.right(x)


batch_size = 2048
in_features = 4096
out_features = 4096
SMALL_SIZES = {"batch_size": 3, "in_features": 18, "out_features": 7}


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
