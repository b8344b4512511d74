"""Tiny user models for the tests (imported through PYTHONPATH=tests/data/models)."""

from torch import nn


def tiny_cnn(num_classes: int = 10, width: int = 4) -> nn.Module:
    """The smallest conv net that exercises conv, batch norm, pooling and linear layers."""
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(width, num_classes),
    )


def not_a_module(num_classes: int = 10):
    return {"layers": num_classes}


def needs_large_input(num_classes: int = 10) -> nn.Module:
    """Fails at 8 px: the 9x9 convolution needs at least 9 px."""
    return nn.Sequential(nn.Conv2d(3, 4, 9), nn.Flatten(), nn.LazyLinear(num_classes))
