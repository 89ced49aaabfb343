"""torch.softmax over dim 1 (5 classes, strided) of fp32 [48, 5, 521, 517] segmentation logits."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


batch_size = 48
classes = 5
height = 521
width = 517
SMALL_SIZES = {"batch_size": 2, "classes": 3, "height": 5, "width": 3}


def get_inputs():
    return [torch.randn(batch_size, classes, height, width)]


def get_init_inputs():
    return []
