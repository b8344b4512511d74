#!/usr/bin/env bash
# make study from a fresh clone, one commit against another, side by side in turns.
#
#   benchmarks/bench_make_study.sh BASE_REV NEW_REV [ROUNDS] > make_study.json
#
# Each run: a fresh clone of this repository at the commit, `CI=true make study`
# (its own venv from the lock, the study, the report, the summary), with an empty user
# cache (XDG_CACHE_HOME), as on a fresh machine; wall seconds of the whole command and
# Snakemake's own elapsed time. The pip cache is shared (the same wheels for both).
# Run it alone on the machine: it measures. Prints one JSON object.
set -euo pipefail
base=$1 new=$2 rounds=${3:-2}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/make-study-XXXX)
echo "{\"base\": \"$base\", \"new\": \"$new\", \"runs\": ["
first=1
for round in $(seq 1 "$rounds"); do
    for which in base new; do
        rev=$([ "$which" = base ] && echo "$base" || echo "$new")
        dir=$work/$which-$round
        git clone -q "$repo" "$dir" && git -C "$dir" checkout -q "$rev"
        start=$(date +%s.%N)
        (cd "$dir" && XDG_CACHE_HOME=$work/cache-$which-$round CI=true make study > "$dir.log" 2>&1)
        end=$(date +%s.%N)
        snake=$(grep -o "Elapsed time: [0-9:.]*" "$dir.log" | head -n 1 | awk -F'[ :]' '{print $3*3600 + $4*60 + $5}')
        [ $first = 1 ] || echo ","
        first=0
        printf '  {"round": %s, "which": "%s", "rev": "%s", "wall_s": %.1f, "snakemake_s": %s}' \
            "$round" "$which" "$(git -C "$dir" rev-parse --short HEAD)" "$(echo "$end - $start" | bc)" "${snake:-null}"
        rm -rf "$dir/.venv"
    done
done
echo ""
echo "]}"
