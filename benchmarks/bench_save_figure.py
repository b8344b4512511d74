"""Saving a figure as PNG and SVG: one tight box for both formats against
``bbox_inches="tight"`` per format, side by side in one run.

    python benchmarks/bench_save_figure.py [--rounds 5] [--out benchmarks/results/save_figure.json]

The figure is the H100 example's (examples/h100, committed) kernel roofline of resnet50
amp at batch 256 (358 kernels). Each round builds it anew for each way and saves it,
alternating which way goes first; the process CPU time of the saving alone is recorded.
The PNGs of both ways are compared pixel for pixel.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from matplotlib import rc_context
from PIL import Image, ImageChops

from dnnroofline.plots import figure

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "examples" / "h100" / "results" / "h100"


def per_format(fig, png, svg):
    """The old way: savefig(bbox_inches="tight") for each format."""
    for path, fmt, meta in ((png, "png", {}), (svg, "svg", {"Date": None})):
        fig.savefig(path, format=fmt, dpi=figure.DPI, bbox_inches="tight", metadata=meta)


def kernel_figure(out: Path):
    """The kernel roofline as plot_kernel_roofline.py builds it, caught at save_figure."""
    from dnnroofline.ncu.kernels import kernel_points, level_roofs
    from dnnroofline.plots import kernels

    caught = []
    kernels.save_figure = lambda fig, _png, _svg: caught.append(fig)
    ncu = json.loads((H100 / "ncu" / "h100_resnet50_amp_bs256.json").read_text())
    ceilings = H100 / "ceilings.json"
    kernels.plot_kernels(
        kernel_points(ncu),
        level_roofs(json.loads(ceilings.read_text()), str(ceilings)),
        "h100",
        "amp",
        out / "k.png",
        out / "k.svg",
        "Per-kernel roofline: h100 resnet50 amp bs256",
    )
    return caught[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "save_figure.json"))
    args = ap.parse_args()
    times: dict[str, list[float]] = {"tight_per_format": [], "one_box": []}
    same_png = True
    with tempfile.TemporaryDirectory() as tmp, rc_context(figure.SVG_RC):
        out = Path(tmp)
        for i in range(args.rounds):
            ways = [("tight_per_format", per_format), ("one_box", figure.save_figure)]
            for name, save in ways if i % 2 == 0 else ways[::-1]:
                fig = kernel_figure(out)
                start = time.process_time()
                save(fig, out / f"{name}.png", out / f"{name}.svg")
                times[name].append(time.process_time() - start)
            a, b = (Image.open(out / f"{n}.png").convert("RGB") for n in times)
            same_png &= a.size == b.size and ImageChops.difference(a, b).getbbox() is None
    result = {
        "figure": "kernel roofline, h100 resnet50 amp bs256 (examples/h100)",
        "rounds": args.rounds,
        "cpu_s": times,
        "median_cpu_s": {k: statistics.median(v) for k, v in times.items()},
        "ratio_one_box_to_per_format": statistics.median(times["one_box"])
        / statistics.median(times["tight_per_format"]),
        "png_identical": same_png,
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(
        json.dumps(result["median_cpu_s"]),
        f"ratio {result['ratio_one_box_to_per_format']:.2f}",
        f"PNG identical: {same_png}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
