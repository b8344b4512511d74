# The machine: its fingerprint and its measured and datasheet ceilings. env_info
# refuses a machine that is not what the env declares; every measurement depends on it
# and checks its own machine against it again (a copied, stale env_info.json).


rule env_info:
    output:
        "results/{menv}/env_info.json",
    log:
        "results/{menv}/logs/env_info.log",
    benchmark:
        "results/{menv}/benchmarks/env_info.tsv"
    conda:
        "../envs/machine.yaml"
    resources:
        **slurm.env_resources(config, exclusive=False),
    params:
        script=entry_script("env_info.py"),
        declared=env_declared_flags,
    shell:
        logged(
            "python {params.script} --env {wildcards.menv} {params.declared} --out {output}"
        )


rule ceilings:
    input:
        ancient("results/{menv}/env_info.json"),
    output:
        "results/{menv}/ceilings.json",
    log:
        "results/{menv}/logs/ceilings.log",
    benchmark:
        "results/{menv}/benchmarks/ceilings.tsv"
    conda:
        "../envs/machine.yaml"
    threads: env_threads
    resources:
        **slurm.env_resources(config, exclusive=True),
        **jobs.runtime_resource(
            config, "ceilings", "results/{menv}/benchmarks/ceilings.tsv", ATTEMPTS
        ),
        measurement=1,
    params:
        script=entry_script("ceilings.py"),
        device=env_device,
        precisions=env_precisions,
        quick="--quick" if config["ceilings"]["quick"] else "",
        # the runs' threads: a changed count re-measures the roofs
        declared_threads=env_threads,
        # what the env declares: the job refuses another machine before it measures
        declared=env_measurement_flags,
        # the perf binary the perf jobs run: its events are the ones probed here
        perf=config["perf"]["executable"],
    shell:
        logged(
            "python {params.script} --env {wildcards.menv} --device {params.device} "
            "--precisions {params.precisions} {params.quick} --perf {params.perf} "
            "--expect-threads {params.declared_threads} --env-info {input} {params.declared} "
            "--out {output}"
        )


rule efficiency:
    input:
        env_info=ancient("results/{menv}/env_info.json"),
        ceilings="results/{menv}/ceilings.json",
    output:
        "results/{menv}/efficiency.json",
    log:
        "results/{menv}/logs/efficiency.log",
    benchmark:
        "results/{menv}/benchmarks/efficiency.tsv"
    conda:
        "../envs/machine.yaml"
    threads: env_threads
    resources:
        **slurm.env_resources(config, exclusive=True),
        **jobs.runtime_resource(
            config, "efficiency", "results/{menv}/benchmarks/efficiency.tsv", ATTEMPTS
        ),
        measurement=1,
    params:
        script=entry_script("op_class_sweep.py"),
        device=env_device,
        precisions=env_precisions,
        # the runs' memory format: the convolutions are timed in it
        layout=env_layout_flag,
        quick="--quick" if config["ceilings"]["quick"] else "",
        declared_threads=env_threads,
        declared=env_measurement_flags,
    shell:
        logged(
            "python {params.script} --env {wildcards.menv} --device {params.device} "
            "--precisions {params.precisions} --ceilings {input.ceilings} {params.layout} "
            "{params.quick} --expect-threads {params.declared_threads} "
            "--env-info {input.env_info} {params.declared} --out {output}"
        )
