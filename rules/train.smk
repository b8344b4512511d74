# Timed, uninstrumented training runs: one measurement at a time (resource
# "measurement", capped at 1 by profiles/default), holding the cores of all the env's
# processes (nproc x threads; the driver gives each DDP rank its threads). A crash or
# OOM inside a run is that run's status (exit 0); the driver refuses (exit 2, nothing
# written, the reason shown) a machine that is not the env's (--env-info).


rule train:
    input:
        # ancient: a re-taken fingerprint (e.g. after editing the env's gpu_name) never
        # re-runs finished measurements; the driver checks its machine against it instead
        ancient("results/{menv}/env_info.json"),
    output:
        measured_path("runs", "_run{run}.json"),
    log:
        measured_path("logs/runs", "_run{run}.log"),
    benchmark:
        measured_path("benchmarks/runs", "_run{run}.tsv")
    conda:
        "../envs/train.yaml"
    threads: job_threads
    resources:
        **slurm.env_resources(config, exclusive=True),
        # sbatch -t from the cost model (docs/cluster.md, Time limits)
        **jobs.runtime_resource(
            config,
            "train",
            measured_path("benchmarks/runs", "_run{run}.tsv"),
            ATTEMPTS,
        ),
        measurement=1,
    params:
        run_id=jobs.driver_run_id("run"),
        script=entry_script("run_train.py"),
        args=run_args,
        warmup=config["study"]["warmup_iters"],
        iters=config["study"]["iters"],
        declared_threads=env_threads,
    shell:
        logged(
            "python {params.script} {params.args} --warmup-iters {params.warmup} "
            "--iters {params.iters} --env {wildcards.menv} --expect-threads {params.declared_threads} "
            "--env-info {input} "
            "--run-id {params.run_id} "
            "--out {output}"
        )
