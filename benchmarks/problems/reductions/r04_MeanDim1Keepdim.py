"""Mean over the middle dim (dim 1, 4099 long, keepdim) of an fp32 [96, 4099, 513] tensor."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.mean(dim=1, keepdim=True)


batch = 96
length = 4099
features = 513
SMALL_SIZES = {"batch": 2, "length": 7, "features": 3}


def get_inputs():
    return [torch.randn(batch, length, features)]


def get_init_inputs():
    return []
