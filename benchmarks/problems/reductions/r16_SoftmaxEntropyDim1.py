"""Per-pixel entropy of fp32 [16, 151, 289, 287] segmentation logits: softmax and log_softmax over classes (dim 1)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits):
        p = torch.softmax(logits, dim=1)
        log_p = F.log_softmax(logits, dim=1)
        return -(p * log_p).sum(dim=1)


batch = 16
classes = 151
height = 289
width = 287
SMALL_SIZES = {"batch": 2, "classes": 7, "height": 3, "width": 5}


def get_inputs():
    return [torch.randn(batch, classes, height, width)]


def get_init_inputs():
    return []
