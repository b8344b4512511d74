"""The study matrix and the config checks that run before any job."""

import re

import pytest
from cpu_flags import has_bf16

from dnnroofline.errors import InputError
from dnnroofline.study.config import Study, alternation

MODELS = ["resnet18", "resnet50", "mobilenet_v2", "vgg16"]


def make_config(**study_overrides):
    study = {
        "models": ["resnet18", "mobilenet_v2"],
        "precisions": ["fp32"],
        "batch_sizes": [8, 16],
        "runs": 3,
        "data": "synthetic",
    }
    study.update(study_overrides)
    return {"envs": {"local": {"device": "auto", "threads": 2}}, "study": study}


def make_study(config, device="cpu", **kw):
    return Study(config, machine_device=device, known_models=MODELS, cpu_count=8, **kw)


def test_run_ids_cover_the_matrix():
    study = make_study(make_config())
    ids = [r.run_id for r in study.runs()]
    assert len(ids) == 2 * 1 * 2 * 3
    assert "local_mobilenet_v2_fp32_bs16_run3" in ids
    assert len(set(ids)) == len(ids)


def test_env_overrides_batch_and_precision():
    config = make_config()
    config["envs"]["local"]["batch_sizes"] = [4]
    config["envs"]["local"]["precisions"] = ["bf16"]
    study = make_study(config)
    assert {(r.batch, r.precision) for r in study.runs()} == {(4, "bf16")}


def test_ceilings_precisions_add_roofs_where_the_device_runs_them():
    config = make_config(precisions=["bf16", "fp32"])
    config["ceilings"] = {"precisions": ["fp32", "tf32", "amp", "bf16"]}
    assert make_study(config, device="cuda").roof_precisions("local") == [
        "bf16", "fp32", "tf32", "amp"
    ]  # fmt: skip
    # a CPU runs neither tf32 nor amp: no roof to measure
    assert make_study(config, cpu_flags=["amx_bf16"]).roof_precisions("local") == ["bf16", "fp32"]
    assert [r.precision for r in make_study(config, device="cuda").configs()].count("tf32") == 0


def test_threads_default_to_all_cores():
    config = make_config()
    del config["envs"]["local"]["threads"]
    assert make_study(config).threads("local") == 8


def test_unknown_model_suggests_close_names():
    with pytest.raises(InputError, match=r"study.models.*'resnet5'.*'resnet50'"):
        make_study(make_config(models=["resnet5"]))


@pytest.mark.parametrize("precision", ["amp", "tf32"])
def test_gpu_precision_refused_on_cpu(precision):
    with pytest.raises(InputError, match=rf"{precision}.*env 'local'.*device cpu"):
        make_study(make_config(precisions=["fp32", precision]))


def test_gpu_precision_accepted_on_cuda_machine():
    study = make_study(make_config(precisions=["fp32", "tf32", "amp", "bf16"]), device="cuda")
    assert study.device("local") == "cuda"
    assert len(study.runs()) == 2 * 4 * 2 * 3


def test_cuda_env_not_measured_on_cpu_machine():
    config = make_config()
    config["envs"]["gcp_l4"] = {"device": "cuda", "gpu_name": "L4"}
    study = make_study(config)
    assert study.measure_envs == ["local"]
    assert study.cuda_envs_measured() == []
    assert {r.env for r in study.runs()} == {"local", "gcp_l4"}


def test_measure_envs_must_name_an_env():
    config = make_config()
    config["measure_envs"] = ["lokal"]
    with pytest.raises(InputError, match=r"measure_envs.*'lokal'.*'local'"):
        make_study(config)


def test_missing_data_folder_is_named():
    config = make_config(data="/nowhere/imagenet")
    with pytest.raises(InputError, match=r"study.data.*/nowhere/imagenet/train"):
        make_study(config, path_exists=lambda p: False)


def test_ambiguous_run_ids_rejected():
    config = make_config(models=["resnet18"])
    config["envs"] = {
        "gcp": {"device": "cpu"},
        "gcp_l4": {"device": "cpu"},
    }
    # env gcp + model l4_resnet18 would collide with env gcp_l4 + model resnet18.
    config["study"]["models"] = ["resnet18", "l4_resnet18"]
    with pytest.raises(InputError, match="ambiguous"):
        Study(config, machine_device="cpu", known_models=None)


def test_alternation_matches_whole_names_only():
    pattern = re.compile(rf"^(?:{alternation(['gcp', 'gcp_l4'])})_x$")
    assert pattern.match("gcp_l4_x") and pattern.match("gcp_x")
    assert not pattern.match("gcp_l5_x")


def test_cpu_bf16_needs_avx512_bf16_or_amx():
    config = make_config(precisions=["fp32", "bf16"])
    for flags in (["avx512f", "avx512_bf16"], ["amx_bf16", "amx_tile"], None):
        study = make_study(config, cpu_flags=flags)  # None: flags unknown, not refused
        assert {r.precision for r in study.runs()} == {"fp32", "bf16"}
    with pytest.raises(InputError) as exc:
        make_study(config, cpu_flags=["avx2", "fma", "avx512f"])
    msg = str(exc.value)
    assert "config study.precisions: precision 'bf16' is not supported on env 'local'" in msg
    assert "needs AVX512_BF16 or AMX" in msg and "Supported on cpu here: fp32" in msg
    # an env measured on another machine is not judged by this CPU's flags
    config["envs"]["other"] = {"device": "cpu"}  # study.precisions: fp32 and bf16
    config["measure_envs"] = ["local"]
    config["envs"]["local"]["precisions"] = ["fp32"]
    study = make_study(config, cpu_flags=["avx2"])
    assert {r.precision for r in study.runs(["other"])} == {"fp32", "bf16"}


def test_detect_cpu_flags_reads_cpuinfo(tmp_path, monkeypatch):
    from dnnroofline.study.config import CPU_FLAGS_ENV, detect_cpu_flags

    monkeypatch.delenv(CPU_FLAGS_ENV)  # set for every test (tests/cpu_flags.py)
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16\n")
    assert detect_cpu_flags(str(info)) == ["fpu", "avx512f", "avx512_bf16"]
    assert detect_cpu_flags(str(tmp_path / "none")) is None


def test_dnnroofline_cpu_flags_replaces_the_cpus_flags(tmp_path, monkeypatch):
    from dnnroofline.study.config import CPU_FLAGS_ENV, detect_cpu_flags

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16\n")
    monkeypatch.setenv(CPU_FLAGS_ENV, " AVX2, fma ")
    assert detect_cpu_flags(str(info)) == ["avx2", "fma"]
    monkeypatch.setenv(CPU_FLAGS_ENV, "None")  # a CPU without any flag: bf16 is refused
    assert detect_cpu_flags(str(info)) == []
    for bad, named in (("", "''"), ("avx2,,fma", "''"), ("avx2 fma", "'avx2 fma'")):
        monkeypatch.setenv(CPU_FLAGS_ENV, bad)
        with pytest.raises(InputError, match=rf"^DNNROOFLINE_CPU_FLAGS=.*: {named} is no CPU flag"):
            detect_cpu_flags(str(info))


def test_the_study_on_this_machine_judges_bf16_by_the_detected_flags(cpu_flags):
    config = make_config(precisions=["fp32", "bf16"])
    config["envs"]["local"]["device"] = "cpu"  # the flags decide, on any machine
    if has_bf16(cpu_flags):
        study = Study.here(config, known_models=MODELS, cpu_count=8)
        assert {r.precision for r in study.runs()} == {"fp32", "bf16"}
    else:
        with pytest.raises(InputError, match="'bf16' is not supported on env 'local'"):
            Study.here(config, known_models=MODELS, cpu_count=8)


def _env_config(**options):
    config = make_config()
    config["envs"] = {
        "eager": {"device": "cpu", "threads": 2},
        "opt": {"device": "cpu", "threads": 2, **options},
    }
    return config


def test_envs_differing_only_in_options_are_both_measured():
    study = make_study(_env_config(compile="max-autotune", channels_last=True))
    assert study.measure_envs == ["eager", "opt"]
    assert study.option_flags("eager") == []
    assert study.option_flags("opt") == ["--compile max-autotune", "--channels-last"]
    assert study.options("opt") == {
        "compile": "max-autotune",
        "channels_last": True,
        "cudnn_benchmark": None,
        "nproc": 1,
        "environment": {},
    }
    assert {r.env for r in study.runs()} == {"eager", "opt"}


@pytest.mark.parametrize(
    "options, overrides, expected",
    [
        ({"compile": "fast"}, {}, "envs.opt.compile: 'fast' is not a compile mode"),
        ({}, {"warmup_iters": 0}, "study.warmup_iters: 0 for env 'eager': the first step"),
        ({"compile": "max-autotune"}, {"warmup_iters": 1}, "records its CUDA graphs"),
        (
            {"compile": "reduce-overhead"},
            {"perf": {"enabled": True, "warmup_iters": 1}},
            "config perf.warmup_iters: 1 for env 'opt': compile mode 'reduce-overhead'",
        ),
        ({"cudnn_benchmark": True}, {}, "envs.opt.cudnn_benchmark: true on device cpu"),
    ],
)
def test_bad_env_options_are_refused_with_key_and_value(options, overrides, expected):
    config = _env_config(**options)
    for key, value in overrides.items():  # study keys, or a section of its own (perf)
        (config if key == "perf" else config["study"])[key] = value
    with pytest.raises(InputError, match=re.escape(expected)):
        make_study(config)


def test_cores_below_a_measurements_threads_are_named_with_the_fix():
    study = make_study(_env_config(nproc=2))  # opt: 2 processes x 2 threads; eager: 2
    assert study.cores_shortfall(["opt", "eager"], 4) is None
    assert study.cores_shortfall([], 1) is None  # nothing to measure: any --cores
    msg = study.cores_shortfall(["opt", "eager"], 3)
    assert msg == (
        "--cores 3 is fewer than the threads a measurement holds (env 'opt': 4 (2 processes "
        "x 2)): its jobs would be refused. Run with --cores 4 (or --cores all), or set the "
        "env's threads lower"
    )
    config = make_config()
    del config["envs"]["local"]["threads"]  # all 8 cores
    msg = make_study(config).cores_shortfall(["local"], 2)
    assert "(env 'local': 8, threads unset: all the cores)" in msg and "--cores 8" in msg


def test_data_parallel_env_holds_every_process_threads():
    study = make_study(_env_config(nproc=2))  # 2 processes x 2 threads on 8 cores
    assert (study.nproc("opt"), study.threads("opt"), study.job_threads("opt")) == (2, 2, 4)
    assert study.option_flags("opt") == ["--nproc 2"]
    assert study.options("opt")["nproc"] == 2
    assert (study.nproc("eager"), study.job_threads("eager"), study.option_flags("eager")) == (
        1,
        2,
        [],
    )
    config = _env_config(nproc=4)
    del config["envs"]["opt"]["threads"]  # default: the machine's cores shared
    assert make_study(config).threads("opt") == 2


@pytest.mark.parametrize(
    "options, device, kw, expected",
    [
        ({"nproc": 0}, "cpu", {}, "envs.opt.nproc: 0 is not a process count"),
        ({"nproc": 5}, "cpu", {}, "envs.opt.nproc: 5 processes x 2 threads = 10 threads "
         "exceed this machine's 8 cores"),
        ({"nproc": 9, "threads": None}, "cpu", {}, "envs.opt.nproc: 9 processes of at least 1 "
         "thread exceed this machine's 8 cores"),
        ({"nproc": 2, "device": "mps"}, "mps", {}, "envs.opt.nproc: 2 on device mps"),
        ({"nproc": 2, "device": "cuda"}, "cuda", {"gpu_count": 1}, "envs.opt.nproc: 2 processes "
         "on device cuda, but this machine has 1 GPU(s)"),
    ],
)  # fmt: skip
def test_bad_nproc_is_refused_with_key_and_value(options, device, kw, expected):
    config = _env_config(**{k: v for k, v in options.items() if v is not None})
    if options.get("threads", 0) is None:
        del config["envs"]["opt"]["threads"]
    config["envs"]["eager"]["device"] = options.get("device", "cpu")
    with pytest.raises(InputError, match=re.escape(expected)):
        make_study(config, device=device, **kw)


def test_nproc_of_another_machine_is_not_held_to_this_ones_cores():
    config = _env_config(nproc=16, device="cuda")  # measured on a GPU box, not here
    assert make_study(config, device="cpu").nproc("opt") == 16


def test_model_entry_mapping_sets_its_own_size_and_factory():
    config = make_config(
        models=[
            "resnet18",
            {
                "name": "mine",
                "factory": "pkg.mod:build",
                "image_size": 32,
                "num_classes": 10,
                "kwargs": {"width": 4},
            },
        ],
        image_size=64,
    )
    study = make_study(config)
    assert study.models == ["resnet18", "mine"]
    assert study.model_args("resnet18") == [
        "--arch resnet18",
        "--image-size 64",
        "--num-classes 1000",
    ]
    assert study.model_args("mine") == [
        "--arch mine",
        "--model-factory pkg.mod:build",
        """--model-kwargs '{"width": 4}'""",
        "--image-size 32",
        "--num-classes 10",
    ]


def test_model_entry_name_given_twice_is_refused():
    config = make_config(models=["resnet18", {"name": "resnet18", "factory": "a:b"}])
    with pytest.raises(InputError, match="model name 'resnet18' is given twice"):
        make_study(config)


def test_model_entry_without_factory_sets_its_own_batch_sizes():
    # the GPU study of issue 9: resnet50 at 64 and 256, the others at the study's 128
    config = make_config(
        models=[{"name": "resnet50", "batch_sizes": [64, 256]}, "resnet18"], batch_sizes=[128]
    )
    study = make_study(config)
    assert sorted({(r.model, r.batch) for r in study.runs()}) == [
        ("resnet18", 128),
        ("resnet50", 64),
        ("resnet50", 256),
    ]
    assert study.model_args("resnet50")[0] == "--arch resnet50"  # torchvision's, no factory
    assert study.complexity_keys() == [("resnet18", 128), ("resnet50", 64), ("resnet50", 256)]
    # an env's batch sizes (its machine's memory) override the model's
    config["envs"]["local"]["batch_sizes"] = [8]
    assert {(r.model, r.batch) for r in make_study(config).runs()} == {
        ("resnet18", 8),
        ("resnet50", 8),
    }


def test_model_entry_without_factory_must_be_a_torchvision_model_and_take_no_kwargs():
    with pytest.raises(InputError, match=r"unknown model 'resnet5'.*'resnet50'"):
        make_study(make_config(models=[{"name": "resnet5", "batch_sizes": [4]}]))
    with pytest.raises(InputError, match="model 'resnet50' has kwargs but no factory"):
        make_study(make_config(models=[{"name": "resnet50", "kwargs": {"width": 2}}]))


def test_ncu_batch_sizes_choose_the_profiled_configs():
    config = make_config(
        models=[{"name": "resnet50", "batch_sizes": [64, 256]}, "resnet18"],
        precisions=["amp", "bf16"],
        batch_sizes=[128],
    )
    assert len(make_study(config, device="cuda").profiled_configs()) == 2 * 3  # all
    config["ncu"] = {"batch_sizes": [128, 256]}
    study = make_study(config, device="cuda")
    assert sorted(c.config_key for c in study.profiled_configs()) == [
        "local_resnet18_amp_bs128",
        "local_resnet18_bf16_bs128",
        "local_resnet50_amp_bs256",
        "local_resnet50_bf16_bs256",
    ]
    config["envs"]["cpu"] = {"device": "cpu", "precisions": ["bf16"]}
    study = make_study(config, device="cuda", cpu_flags=["amx_bf16"])
    assert {c.env for c in study.profiled_configs()} == {"local"}  # not the CPU env
    config["envs"]["ddp"] = {"device": "cuda", "nproc": 2}  # replayed all-reduces would hang
    study = make_study(config, device="cuda", cpu_flags=["amx_bf16"], gpu_count=2)
    assert "ddp" in study.cuda_envs_measured()
    assert {c.env for c in study.profiled_configs()} == {"local"}
    del config["envs"]["ddp"]
    config["ncu"] = {"batch_sizes": [512]}
    with pytest.raises(
        InputError, match=r"ncu.batch_sizes: 512 is not a batch size of the study \(64, 128, 256\)"
    ):
        make_study(config, device="cuda")
