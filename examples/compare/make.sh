#!/usr/bin/env bash
# Rebuild examples/compare/ from committed files alone: the H200 study (examples/h200)
# compared with the H100 study (examples/h100), the new machine being the change. The
# same four stages as `snakemake results/compare.csv`, the plot, the page and the gate.
#   bash examples/compare/make.sh [OUT]     (OUT: default examples/compare)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-examples/compare}
new=examples/h200/results/h200
scripts=workflow/scripts
python $scripts/compare_studies.py --config examples/compare/config.json \
    --metrics examples/h200/metrics.csv --runs $new/runs/*.json \
    --env-info $new/env_info.json --ceilings $new/ceilings.json --outdir "$out"
python $scripts/plot_compare_roofline.py --compare "$out/compare.csv" \
    --config examples/compare/config.json --points examples/h200/roofline_points.csv \
    --baseline-points examples/h100/roofline_points.csv --ceilings $new/ceilings.json \
    --label H100 --png "$out/compare_roofline.png" --svg "$out/compare_roofline.svg"
python $scripts/write_compare_section.py --config examples/compare/config.json \
    --compare "$out/compare.csv" --unmatched "$out/compare_unmatched.csv" \
    --fingerprints "$out/compare_fingerprints.csv" --ops "$out/compare_ops.csv" \
    --kernels "$out/compare_kernels.csv" --roofs "$out/compare_roofs.csv" \
    --plot "$out/compare_roofline.svg" --label H100 --out "$out/before_after.html"
python $scripts/regression_gate.py "$out/compare.csv" --config examples/compare/config.json
