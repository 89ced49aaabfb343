"""Mean cross-entropy of fp32 segmentation logits [16, 19, 640, 640] against per-pixel class-probability targets (dim 1)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, target_probs):
        return F.cross_entropy(logits, target_probs)


batch_size = 16
num_classes = 19
height = 640
width = 640
SMALL_SIZES = {"batch_size": 1, "num_classes": 3, "height": 5, "width": 3}


def get_inputs():
    logits = torch.randn(batch_size, num_classes, height, width)
    target_probs = torch.softmax(torch.randn(batch_size, num_classes, height, width), dim=1)
    return [logits, target_probs]


def get_init_inputs():
    return []
