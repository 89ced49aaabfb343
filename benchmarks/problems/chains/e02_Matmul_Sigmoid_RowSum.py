"""x @ W + b with a [4096, 8192] weight on 2048 rows, sigmoid, then the sum of each row (keepdim), fp32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_features, out_features) / in_features**0.5)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.1)

    def forward(self, x):
        y = torch.matmul(x, self.weight) + self.bias
        y = torch.sigmoid(y)
        return torch.sum(y, dim=1, keepdim=True)


batch_size = 2048
in_features = 4096
out_features = 8192
SMALL_SIZES = {"batch_size": 1, "in_features": 17, "out_features": 31}


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
