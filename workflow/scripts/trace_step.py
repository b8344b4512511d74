"""A torch.profiler trace of a few training steps after warm-up, and its top-operators table.

    python workflow/scripts/trace_step.py --arch resnet18 --batch-size 8 --image-size 128 \
        --warmup-iters 3 --steps 3 --synthetic --trace-out t.json --table-out t.ops.json \
        --csv-out t.ops.csv

Takes the driver's step flags (run_train.py's, but --steps for --iters). With --nproc N
it launches N data-parallel ranks as run_train.py does, each tracing itself into
``t.rank{i}.json`` for ``--trace-out t.json``; the table adds each rank's communication
time. Exit 0 when the files were written (status ok, oom or error), 2 for bad arguments.
The logic lives in ``dnnroofline.measure.traces`` and ``dnnroofline.measure.comm_trace``.
"""

import sys

from dnnroofline.measure.measurement_lock import measurement_lock
from dnnroofline.measure.traces import main
from dnnroofline.study.environment import start_with_environment

if __name__ == "__main__":
    start_with_environment()  # the env's variables, set before anything runs
    with measurement_lock():
        sys.exit(main())
