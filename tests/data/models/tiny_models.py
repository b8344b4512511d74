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


class RankFault(nn.Module):
    """tiny_cnn whose second forward fails on one rank of a data-parallel run: ``raise``
    (an exception), ``kill`` (SIGKILL, as the OOM killer does) or ``hang`` (sleeps)."""

    def __init__(self, num_classes: int, rank: int, how: str):
        super().__init__()
        self.net, self.rank, self.how, self.calls = tiny_cnn(num_classes), rank, how, 0

    def forward(self, x):
        import os
        import signal
        import time

        import torch.distributed as dist

        self.calls += 1
        if self.calls == 2 and dist.is_initialized() and dist.get_rank() == self.rank:
            if self.how == "raise":
                raise RuntimeError(f"fault injected on rank {self.rank}")
            if self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(600)
        return self.net(x)


def rank_fault(num_classes: int = 10, rank: int = 1, how: str = "raise") -> nn.Module:
    return RankFault(num_classes, rank, how)


class FreshScratch(nn.Module):
    """tiny_cnn whose forward also writes a scratch buffer of ``mib`` MiB, freed at the
    end of the step: below glibc's largest mmap threshold, so where the allocator keeps
    freed memory the next step reuses its pages, and where it trims them, faults them in."""

    def __init__(self, num_classes: int = 10, mib: int = 16):
        super().__init__()
        self.net, self.numel = tiny_cnn(num_classes), mib * 2**20 // 4

    def forward(self, x):
        import torch

        out = self.net(x)
        return out + torch.ones(self.numel).sum()  # every page written, then freed


def fresh_scratch(num_classes: int = 10, mib: int = 16) -> nn.Module:
    return FreshScratch(num_classes, mib)
