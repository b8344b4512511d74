"""A stand-in for Linux ``perf``, as tests' fake ``ncu`` stands in for ncu.

The fake answers what :mod:`dnnroofline.measure.perf_run` asks of perf:

- ``perf --version``: ``perf version fake <name>`` (the name it was made with);
- ``perf list --no-desc``: AMD Zen's FLOP event and two data-fabric DRAM channels, or
  nothing for ``events=False`` (a perf that can count neither: a VM without a PMU);
- ``perf stat -x, [-o FILE] -e EVENTS [-a] -- CMD...``: runs CMD as perf does, then
  writes ``-x,`` CSV rows (to FILE, else stderr) whose counts grow by a fixed amount per
  ``--iters`` step of CMD: ``FLOP_PER_STEP`` retired FLOPs and ``DRAM_MIB_PER_STEP`` MiB
  per channel, on top of a start-up count that the two-run difference must cancel.

Every call is appended to ``calls.jsonl`` beside the executable as
``{"exe": <this file>, "argv": [...]}``: a test reads which binary ran, and how.
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

#: The fake's per-step counts (what a two-run difference must recover exactly).
FLOP_PER_STEP = 3_000_000
DRAM_MIB_PER_STEP = 2.5
DRAM_CHANNELS = ("dram_channel_data_controller_0", "dram_channel_data_controller_1")
FLOP_EVENT = "fp_ret_sse_avx_ops.all"
#: Counts at zero steps: process start, model build and warm-up.
STARTUP_FLOP = 7_000_000
STARTUP_DRAM_MIB = 40.0

_SCRIPT = """\
#!{python}
import json, os, subprocess, sys

HERE = {here!r}
NAME = {name!r}
EVENTS = {events!r}
argv = sys.argv[1:]
with open(os.path.join(HERE, "calls.jsonl"), "a") as fh:
    fh.write(json.dumps({{"exe": os.path.abspath(__file__), "argv": argv}}) + "\\n")
if argv[:1] == ["--version"]:
    print("perf version fake " + NAME)
    sys.exit(0)
if argv[:1] == ["list"]:
    for event in EVENTS:
        print("  " + event + "   [Kernel PMU event]")
    sys.exit(0)
if argv[:1] != ["stat"]:
    print("fake perf: unknown command " + " ".join(argv), file=sys.stderr)
    sys.exit(129)
cut = argv.index("--")
opts, cmd = argv[1:cut], argv[cut + 1 :]
asked = opts[opts.index("-e") + 1].split(",")
if any(e not in EVENTS for e in asked):
    print("event syntax error: '" + ",".join(asked) + "'", file=sys.stderr)
    sys.exit(129)
rc = subprocess.run(cmd).returncode
steps = int(cmd[cmd.index("--iters") + 1]) if "--iters" in cmd else 0
rows = []
for event in asked:
    if event == {flop_event!r}:
        rows.append(f"{{{startup_flop} + {flop} * steps}},,{{event}},1000,100.00,,")
    else:
        rows.append(f"{{{startup_dram} + {dram} * steps}},MiB,{{event}},1000,100.00,,")
text = "\\n".join(rows) + "\\n"
if "-o" in opts:
    with open(opts[opts.index("-o") + 1], "w") as fh:
        fh.write(text)
else:
    sys.stderr.write(text)
sys.exit(rc)
"""


def make_fake_perf(folder: Path, name: str = "perf", *, events: bool = True) -> Path:
    """An executable fake perf at ``folder/name`` (see the module docstring)."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / name
    listed = [FLOP_EVENT, *DRAM_CHANNELS] if events else []
    exe.write_text(
        _SCRIPT.format(
            python=sys.executable,
            here=str(folder),
            name=name,
            events=listed,
            flop_event=FLOP_EVENT,
            startup_flop=STARTUP_FLOP,
            flop=FLOP_PER_STEP,
            startup_dram=STARTUP_DRAM_MIB,
            dram=DRAM_MIB_PER_STEP,
        )
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe


def calls(folder: Path) -> list[dict]:
    """The calls the fakes in ``folder`` received, in order."""
    log = folder / "calls.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]
