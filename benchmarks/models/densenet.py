"""A DenseNet dense block: each layer (BN, ReLU, 1x1 conv, BN, ReLU, 3x3 conv) reads the concatenation of
the block's input and every earlier layer's output; the block returns all of them concatenated (with 8
layers, a ``torch.cat`` of 9 feature maps), followed by the transition (BN, ReLU, 1x1 conv, 2x2 average pool)."""

from __future__ import annotations

import torch
from torch import nn


class DenseLayer(nn.Module):
    def __init__(self, num_input_features: int, growth_rate: int, bn_size: int):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(num_input_features)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(num_input_features, bn_size * growth_rate, kernel_size=1, stride=1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth_rate)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth_rate, growth_rate, kernel_size=3, stride=1, padding=1, bias=False)

    def forward(self, prev_features: list[torch.Tensor]) -> torch.Tensor:
        concated = torch.cat(prev_features, 1)
        bottleneck = self.conv1(self.relu1(self.norm1(concated)))
        return self.conv2(self.relu2(self.norm2(bottleneck)))


class DenseBlock(nn.ModuleDict):
    def __init__(self, num_layers: int, num_input_features: int, bn_size: int, growth_rate: int):
        super().__init__()
        for i in range(num_layers):
            layer = DenseLayer(num_input_features + i * growth_rate, growth_rate, bn_size)
            self.add_module(f"denselayer{i + 1}", layer)

    def forward(self, init_features: torch.Tensor) -> torch.Tensor:
        features = [init_features]
        for _name, layer in self.items():
            new_features = layer(features)
            features.append(new_features)
        return torch.cat(features, 1)


class Transition(nn.Sequential):
    def __init__(self, num_input_features: int, num_output_features: int):
        super().__init__()
        self.norm = nn.BatchNorm2d(num_input_features)
        self.relu = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(num_input_features, num_output_features, kernel_size=1, stride=1, bias=False)
        self.pool = nn.AvgPool2d(kernel_size=2, stride=2)


class DenseStage(nn.Module):
    """A dense block and the transition after it."""

    def __init__(self, num_layers: int, num_input_features: int, growth_rate: int, bn_size: int = 4):
        super().__init__()
        self.block = DenseBlock(num_layers, num_input_features, bn_size, growth_rate)
        out = num_input_features + num_layers * growth_rate
        self.transition = Transition(out, out // 2)

    def forward(self, x):
        return self.transition(self.block(x))
