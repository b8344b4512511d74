"""A user's own model: a ``module:callable`` factory, loaded, built and checked.

``study.models`` entries may be a mapping ``{name, factory, image_size, num_classes,
kwargs}``. The factory is imported from the workflow folder (the repository root,
where ``examples/`` lives), the working directory or ``PYTHONPATH``, called with
``kwargs`` (plus ``num_classes`` when it takes that argument) and must return an
``nn.Module`` that trains on a ``(N, 3, S, S)`` batch into ``(N, num_classes)`` logits.
:func:`check_factory` runs that check before any job, naming the entry in its error.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import importlib.util
import inspect
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dnnroofline.errors import InputError
from dnnroofline.install_cache import kept_per_install, kept_while_unchanged, package_origin
from dnnroofline.study.defaults import WORKFLOW_ROOT, default

# WORKFLOW_ROOT, the repository root: examples.models.cifar_resnet is importable from any
# workdir


def _import_paths() -> None:
    for folder in (os.getcwd(), str(WORKFLOW_ROOT)):
        if folder not in sys.path:
            sys.path.append(folder)


def model_kwargs_arg(text: str) -> dict[str, Any]:
    """argparse ``type`` of ``--model-kwargs``: a JSON object, passed to the factory."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a JSON object")
    return value


def add_model_args(ap: argparse.ArgumentParser) -> None:
    """The flags that name a model and its step (the rules' ``model_flags`` and batch):
    shared by complexity.py and op_inventory.py."""
    ap.add_argument("--arch", required=True, help="torchvision classification model name")
    ap.add_argument("--batch-size", type=int, required=True, help="images per training step")
    ap.add_argument(
        "--image-size",
        type=int,
        default=default("study.image_size"),
        help="square input size (pixels)",
    )
    ap.add_argument(
        "--num-classes", type=int, default=default("study.num_classes"), help="classifier outputs"
    )
    ap.add_argument(
        "--model-factory",
        metavar="MODULE:CALLABLE",
        help="build the model with this factory (--arch is then its name)",
    )
    ap.add_argument(
        "--model-kwargs",
        type=model_kwargs_arg,
        default="{}",
        help="JSON object passed to the factory",
    )


def model_step_kwargs(args: argparse.Namespace) -> dict:
    """:func:`add_model_args`'s flags (less ``--arch``) as the keyword arguments of
    ``model.complexity.complexity`` and ``model.op_inventory.op_inventory``."""
    return {
        "batch_size": args.batch_size,
        "image_size": args.image_size,
        "num_classes": args.num_classes,
        "factory": args.model_factory,
        "kwargs": args.model_kwargs,
    }


def torchvision_classifiers(cache_dir: Path | None = None) -> list[str]:
    """torchvision's classification model names (``list_models(module=torchvision.models)``).

    Every snakemake command checks the config's models, and importing torchvision to list
    them costs seconds (it pulls in torch._dynamo): the list is kept per torchvision
    install (:func:`dnnroofline.install_cache.kept_per_install`) in ``cache_dir``."""
    return kept_per_install(
        "torchvision_models", "torchvision", _list_torchvision_classifiers, where=cache_dir
    )


def check_arch(arch: str, names: Sequence[str] | None = None) -> None:
    """Refuse an ``--arch`` that is not one of ``names`` (default: torchvision's
    classifiers), naming the close ones."""
    names = torchvision_classifiers() if names is None else list(names)
    if arch in names:
        return
    close = difflib.get_close_matches(arch, names, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise InputError(
        f"--arch {arch!r}: not a torchvision classification model{hint} "
        "(see torchvision.models.list_models(module=torchvision.models))"
    )


def _list_torchvision_classifiers() -> list[str]:
    import torchvision.models

    return sorted(torchvision.models.list_models(module=torchvision.models))


def refuse_kwargs_without_factory(arch: str, factory: str | None, kwargs: Mapping | None) -> None:
    """``--model-kwargs`` go to a ``--model-factory`` only: a torchvision model is built
    with its defaults, and its record must not say otherwise."""
    if kwargs and not factory:
        raise InputError(
            f"--model-kwargs {json.dumps(dict(kwargs))}: only for --model-factory; "
            f"torchvision's {arch} is built with its defaults"
        )


def load_factory(factory: str, where: str = "--model-factory") -> Callable[..., Any]:
    """The callable named by ``module:callable``; InputError naming ``where`` otherwise."""
    module_name, sep, attr = factory.partition(":")
    if not sep or not module_name or not attr:
        raise InputError(f"{where} {factory!r}: expected 'module:callable'")
    _import_paths()
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's to see
        raise InputError(
            f"{where} {factory!r}: cannot import module {module_name!r}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise InputError(
                f"{where} {factory!r}: module {module_name!r} has no callable {attr!r}"
            )
        obj = getattr(obj, part)
    if not callable(obj):
        raise InputError(f"{where} {factory!r}: {attr!r} is not callable")
    return obj


def build_custom(
    factory: str,
    kwargs: Mapping[str, Any] | None = None,
    num_classes: int | None = None,
    where: str = "--model-factory",
) -> Any:
    """Call the factory; InputError unless it returns an ``nn.Module``."""
    import torch

    fn = load_factory(factory, where)
    call = dict(kwargs or {})
    if num_classes is not None and "num_classes" not in call:
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            params = {}
        takes = "num_classes" in params or any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
        )
        if takes:
            call["num_classes"] = num_classes
    try:
        model = fn(**call)
    except Exception as exc:  # noqa: BLE001 - the user's factory failed: say how
        raise InputError(
            f"{where} {factory!r}: calling it with {call} failed: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(model, torch.nn.Module):
        raise InputError(
            f"{where} {factory!r}: returned {type(model).__name__}, not a torch.nn.Module"
        )
    return model


def check_forward(model: Any, image_size: int, num_classes: int, where: str) -> None:
    """One forward pass of a (2, 3, S, S) batch on the CPU; the logits must be (2, classes)."""
    import torch

    shape = (2, 3, image_size, image_size)
    model.train()
    try:
        with torch.no_grad():
            out = model(torch.randn(shape))
    except Exception as exc:  # noqa: BLE001 - a forward that fails at this size
        raise InputError(
            f"{where}: forward pass fails at input shape {list(shape)}: {type(exc).__name__}: {exc}"
        ) from exc
    if isinstance(out, tuple):  # aux-logit models: the first output is the logits
        out = out[0]
    got = list(getattr(out, "shape", []))
    if got != [shape[0], num_classes]:
        raise InputError(
            f"{where}: forward pass at input shape {list(shape)} gives output shape {got}, "
            f"expected [{shape[0]}, {num_classes}] (batch, num_classes)"
        )


def check_factory(
    name: str,
    factory: str,
    kwargs: Mapping[str, Any] | None,
    image_size: int,
    num_classes: int,
) -> None:
    """Refuse a bad ``study.models`` entry before any job: InputError naming the entry.

    Every snakemake command checks its models, and a check costs seconds (torch, the
    model, a forward pass): a passed check is kept while the ``.py`` files of the
    factory's folder, torch's install and the entry's arguments stay the same
    (:func:`dnnroofline.install_cache.kept_while_unchanged`). A failed one is kept nowhere."""
    where = f"config study.models entry {name!r} (factory {factory})"

    def check() -> bool:
        model = build_custom(factory, kwargs, num_classes, where=where)
        check_forward(model, image_size, num_classes, where)
        return True

    sources = factory_sources(factory)
    torch_origin = package_origin("torch")
    if not sources or torch_origin is None:
        check()  # nothing to key a kept check on: its errors say why
        return
    entry = json.dumps([factory, dict(kwargs or {}), image_size, num_classes], sort_keys=True)
    kept_while_unchanged("model_check", [*sources, torch_origin], check, variant=entry)


def factory_sources(factory: str) -> list[Path]:
    """The ``.py`` files of the folder of the factory's module, found without importing the
    module (its parent packages are imported); [] where it cannot be found."""
    module_name = factory.partition(":")[0]
    _import_paths()
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.origin or not Path(spec.origin).is_file():
        return []
    return sorted(Path(spec.origin).parent.glob("*.py"))
