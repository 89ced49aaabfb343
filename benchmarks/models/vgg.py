"""A VGG-style feature stack from a layer list (numbers are 3x3 convolutions, ``"M"`` a 2x2 max pool), with
batch norm and in-place ReLU, then torchvision's classifier head (adaptive average pool, flatten, dropout,
linear layers)."""

from __future__ import annotations

import torch
from torch import nn


def make_layers(cfg: list[int | str], in_channels: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for v in cfg:
        if v == "M":
            layers += [nn.MaxPool2d(kernel_size=2, stride=2)]
        else:
            conv2d = nn.Conv2d(in_channels, v, kernel_size=3, padding=1)
            layers += [conv2d, nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
            in_channels = v
    return nn.Sequential(*layers)


class VGG(nn.Module):
    def __init__(self, cfg: list[int | str], in_channels: int = 3, hidden: int = 4096, num_classes: int = 1000,
                 pool: int = 7):
        super().__init__()
        self.features = make_layers(cfg, in_channels)
        last = [v for v in cfg if v != "M"][-1]
        self.avgpool = nn.AdaptiveAvgPool2d((pool, pool))
        self.classifier = nn.Sequential(
            nn.Linear(last * pool * pool, hidden),
            nn.ReLU(True),
            nn.Dropout(),
            nn.Linear(hidden, hidden),
            nn.ReLU(True),
            nn.Dropout(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x):
        x = self.features(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        x = self.classifier(x)
        return x
