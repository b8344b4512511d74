# CPU counters with perf stat (opt-in: perf.enabled): per (env, model, precision,
# batch) on CPU envs, FLOPs and DRAM bytes per training step, apart from the timed
# runs (perf runs the driver twice; per-step counts are the difference). The
# ceilings job probes perf once per env; where perf cannot count, each file says
# "unavailable" with that reason and the point keeps its analytic AI range.


rule perf:
    input:
        env_info=ancient("results/{menv}/env_info.json"),
        ceilings=ancient("results/{menv}/ceilings.json"),
    output:
        json=measured_path("perf", ".json"),
    log:
        measured_path("logs/perf", ".log"),
    benchmark:
        measured_path("benchmarks/perf", ".tsv")
    conda:
        "../envs/profile.yaml"
    threads: job_threads
    resources:
        **slurm.env_resources(config, exclusive=True),
        **jobs.runtime_resource(
            config, "perf", measured_path("benchmarks/perf", ".tsv"), ATTEMPTS
        ),
        measurement=1,
    params:
        run_id=jobs.driver_run_id("perf"),
        script=entry_script("profile_perf.py"),
        driver=entry_script("run_train.py"),
        args=run_args,
        perf=config["perf"]["executable"],
        warmup=config["perf"]["warmup_iters"],
        short=config["perf"]["iters_short"],
        long=config["perf"]["iters_long"],
        declared_threads=env_threads,
    shell:
        logged(
            "python {params.script} --perf {params.perf} --ceilings {input.ceilings} "
            "--json-out {output.json} --iters-short {params.short} --iters-long {params.long} "
            "-- python {params.driver} {params.args} --warmup-iters {params.warmup} "
            "--env {wildcards.menv} --env-info {input.env_info} "
            "--run-id {params.run_id} "
            "--expect-threads {params.declared_threads}"
        )
