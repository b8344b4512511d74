"""The reproducibility section (dnnroofline.report.reproducibility)."""

from __future__ import annotations

from pathlib import Path

from report_fixtures import make_config, make_metrics

from dnnroofline.report.reproducibility import reproducibility_section, run_command


def test_run_command_reproduces_run():
    cfg = make_config()
    cmd = run_command(
        cfg,
        {
            "run_id": "local_resnet50_fp32_bs8_run1",
            "env": "local",
            "model": "resnet50",
            "precision": "fp32",
            "batch_size": 8,
        },
    )
    assert cmd == (
        "OMP_NUM_THREADS=2 python workflow/scripts/run_train.py --arch resnet50 "
        "--image-size 224 --batch-size 8 --warmup-iters 3 --iters 10 --precision fp32 "
        "--backend cpu --synthetic --env local --expect-threads 2 "
        "--run-id local_resnet50_fp32_bs8_run1 "
        "--out results/local/runs/local_resnet50_fp32_bs8_run1.json"
    )
    cfg["study"]["data"] = "/data/my imagenet"
    cfg["envs"]["local"] = {"device": "auto"}
    cmd = run_command(
        cfg,
        {
            "run_id": "local_resnet50_fp32_bs8_run1",
            "env": "local",
            "model": "resnet50",
            "precision": "fp32",
            "batch_size": 8,
        },
        {"local": {"device": "cuda"}},
    )
    assert "--backend cuda --data '/data/my imagenet'" in cmd
    assert "OMP_NUM_THREADS" not in cmd and "--expect-threads" not in cmd
    # the resolved config's defaults reach the command as the train rule passes them
    cfg["study"].update(num_classes=10, workers=4, channels_last=True)
    cmd = run_command(
        cfg,
        {"run_id": "r", "env": "local", "model": "resnet50", "precision": "bf16", "batch_size": 8},
    )
    assert "--precision bf16" in cmd
    assert "--arch resnet50 --image-size 224 --num-classes 10 --batch-size 8 " in cmd
    assert "--data '/data/my imagenet' --workers 4 --channels-last" in cmd
    # a data-parallel env: its processes, and the threads of all of them for the launcher
    cfg["envs"]["ddp"] = {"device": "cpu", "nproc": 2, "threads": 3}
    cmd = run_command(
        cfg,
        {"run_id": "r", "env": "ddp", "model": "resnet50", "precision": "fp32", "batch_size": 8},
    )
    assert cmd.startswith("OMP_NUM_THREADS=6 python workflow/scripts/run_train.py")
    assert "--channels-last --nproc 2 --env ddp --expect-threads 3" in cmd


def test_reproducibility_lists_commands(sections):
    html = sections["reproducibility.html"]
    assert "snakemake --cores 2" in html
    assert "snakemake --report results/report.html" in html
    assert html.count("workflow/scripts/run_train.py") == 12
    assert "--out results/local/runs/local_mobilenet_v2_fp32_bs16_run3.json" in html
    assert (
        "python workflow/scripts/complexity.py --arch mobilenet_v2 --image-size 224 "
        "--batch-size 16 --out results/complexity/mobilenet_v2_bs16.json" in html
    )
    assert "32.0 GB" in html  # RAM, decimal


def test_a_run_is_reproduced_as_it_ran_where_its_json_says_otherwise():
    """An H100 run copied in ran 5 + 30 steps in channels-last; this config says 3 + 10."""
    cfg = make_config(envs={"h100": {"device": "cuda"}})
    row = {"run_id": "r", "env": "h100", "model": "resnet50", "precision": "amp", "batch_size": 8}
    ran = {"warmup_iters": 5, "iters": 30, "channels_last": True, "compile": False}
    cmd = run_command(cfg, row, {}, ran)
    assert "--warmup-iters 5 --iters 30 --precision amp --backend cuda" in cmd
    assert "--channels-last" in cmd and "--compile" not in cmd
    assert "--warmup-iters 3 --iters 10" in run_command(cfg, row)
    html = reproducibility_section(cfg, {}, make_metrics("h100"), runs=[
        {"run_id": "h100_resnet50_fp32_bs8_run1", "config": ran}])  # fmt: skip
    (line,) = [ln for ln in html.splitlines() if "--run-id h100_resnet50_fp32_bs8_run1 " in ln]
    assert "--warmup-iters 5 --iters 30" in line and "--channels-last" in line
    assert "--warmup-iters 3 --iters 10" in html  # the runs without a JSON here


def driver_args(cmd: str):
    """What run_train.py would run, given the report's command line."""
    import shlex

    from dnnroofline.measure.train_config import arg_parser

    argv = [a for a in shlex.split(cmd) if not a.startswith("OMP_NUM_THREADS=")]
    assert argv[:2] == ["python", "workflow/scripts/run_train.py"]
    return arg_parser().parse_args(argv[2:])


def test_the_command_runs_the_configs_steps_and_else_the_schemas():
    """The exact command is what ran: the config's own steps where it gives them; where it
    does not (a study_config.json from before a key existed), the schema's defaults, which
    the Snakefile filled in for the run and run_train.py takes for a flag left out."""
    import yaml

    schema = yaml.safe_load((Path(__file__).parents[1] / "config" / "schema.yaml").read_text())
    study_keys = schema["properties"]["study"]["properties"]
    row = {"run_id": "r", "env": "local", "model": "resnet50", "precision": "fp32", "batch_size": 8}
    cfg = make_config()
    cfg["study"].update(warmup_iters=7, iters=25, image_size=96, num_classes=10)
    args = driver_args(run_command(cfg, row))
    assert (args.warmup_iters, args.iters, args.image_size, args.num_classes) == (7, 25, 96, 10)
    for key in ("warmup_iters", "iters", "image_size", "data"):
        cfg["study"].pop(key)
    args = driver_args(run_command(cfg, row))
    want = [study_keys[k]["default"] for k in ("warmup_iters", "iters", "image_size")]
    assert [args.warmup_iters, args.iters, args.image_size] == want
    assert args.data is None and args.synthetic  # data: synthetic, the schema's
    own = driver_args("python workflow/scripts/run_train.py --arch resnet50 --batch-size 8 --out o")
    assert (own.warmup_iters, own.iters, own.image_size) == tuple(want)
