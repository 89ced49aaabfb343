"""Mean absolute error between fp32 image batches [20, 3, 1080, 1920] (a reconstruction loss), reduced to a scalar."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, reconstruction, image):
        return F.l1_loss(reconstruction, image)


batch_size = 20
channels = 3
height = 1080
width = 1920
SMALL_SIZES = {"batch_size": 2, "channels": 3, "height": 5, "width": 7}


def get_inputs():
    shape = (batch_size, channels, height, width)
    return [torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return []
