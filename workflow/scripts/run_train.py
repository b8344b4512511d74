"""One timed training run: parse arguments, run, write the run JSON atomically.

    python workflow/scripts/run_train.py --arch resnet50 --batch-size 32 --image-size 224 \
        --warmup-iters 5 --iters 20 --precision fp32 --backend auto --synthetic --out run.json

A flag left out takes the study config's default from config/schema.yaml (warm-up and
timed steps, image size, classes, workers, processes), as a study's run would.

Exit 0 when the JSON was written (status ok, oom or error), 2 for bad arguments (nothing
written). The logic lives in ``dnnroofline.measure.train``.
"""

import sys

from dnnroofline.measure.measurement_lock import measurement_lock
from dnnroofline.measure.train import main
from dnnroofline.study.environment import start_with_environment

if __name__ == "__main__":
    start_with_environment()  # the env's variables, set before anything runs
    with measurement_lock():
        sys.exit(main())
