"""CIFAR-style ResNet-18 and ResNet-34 (He et al. 2016, as commonly trained on CIFAR-10).

Unlike torchvision's ImageNet ResNets, the stem is one 3x3 convolution (stride 1) with
no max-pool, so a 32 px image keeps 32x32 feature maps in the first stage; four stages
of BasicBlocks (64, 128, 256, 512 channels; stride 2 from the second stage on), global
average pooling and a linear classifier. 32 px, 10 classes by default.

Used by ``config/examples/cifar.yaml``:

    study:
      models:
        - name: cifar_resnet18
          factory: examples.models.cifar_resnet:resnet18
          image_size: 32
          num_classes: 10
"""

from __future__ import annotations

from torch import Tensor, nn


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    def __init__(self, blocks: tuple[int, int, int, int], num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, stride=1, padding=1, bias=False)  # 3x3 stem
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)  # no max-pool
        layers = []
        in_planes = 64
        for i, (planes, n) in enumerate(zip((64, 128, 256, 512), blocks, strict=True)):
            for j in range(n):
                stride = 2 if i > 0 and j == 0 else 1
                layers.append(BasicBlock(in_planes, planes, stride))
                in_planes = planes
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        out = self.layers(self.relu(self.bn1(self.conv1(x))))
        return self.fc(self.pool(out).flatten(1))


def resnet18(num_classes: int = 10) -> CifarResNet:
    """CIFAR ResNet-18: [2, 2, 2, 2] BasicBlocks, about 11.2 M parameters at 10 classes."""
    return CifarResNet((2, 2, 2, 2), num_classes)


def resnet34(num_classes: int = 10) -> CifarResNet:
    """CIFAR ResNet-34: [3, 4, 6, 3] BasicBlocks, about 21.3 M parameters at 10 classes."""
    return CifarResNet((3, 4, 6, 3), num_classes)
