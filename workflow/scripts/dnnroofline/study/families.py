"""Model families: which torchvision classifiers are siblings of one design.

A method that learns from other models' runs (``model_loo``,
:mod:`dnnroofline.perfmodel.loo`) leaves a point's whole family out of its fit: a model
learns nothing of itself from a sibling of another size. Pure: names only, no torch.
"""

from __future__ import annotations

import re

#: torchvision's classifiers by family, each a full match of its names: a model learns
#: nothing of itself from a sibling of another size when its family is left out.
FAMILY_PATTERNS = {
    "resnet": r"(wide_)?resnet\d+(_2)?|resnext\d+_\d+x\d+d",
    "mobilenet": r"mobilenet_v2|mobilenet_v3_(large|small)",
    "efficientnet": r"efficientnet_(b\d|v2_[sml])",
    "regnet": r"regnet_[xy]_\d+(_\d+)?[mg]f",
    "densenet": r"densenet\d+",
    "vgg": r"vgg\d+(_bn)?",
    "shufflenet": r"shufflenet_v2_x\d_\d",
    "squeezenet": r"squeezenet1_[01]",
    "mnasnet": r"mnasnet\d_\d+",
    "convnext": r"convnext_(tiny|small|base|large)",
    "vit": r"vit_[bhl]_\d+",
    "swin": r"swin_(v2_)?[tsb]",
    "maxvit": r"maxvit_t",
    "alexnet": r"alexnet",
    "inception": r"googlenet|inception_v3",
}


def model_family(name: str) -> str:
    """The family of a model of the study: torchvision's by :data:`FAMILY_PATTERNS`
    (resnet18 and resnext50_32x4d are both ``resnet``); any other name, a user's
    factory model, is a family of its own."""
    return next(
        (family for family, pattern in FAMILY_PATTERNS.items() if re.fullmatch(pattern, name)),
        name,
    )
