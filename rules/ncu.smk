# Nsight Compute: one whole training step (backward and optimizer included) per
# (env, model, precision, batch) on CUDA envs (at ncu.batch_sizes, where given).
# Counts come from here; durations
# come from the uninstrumented runs, since ncu serializes and replays kernels.
# Target functions (ncu_targets) live in common.smk.


# The counter self-test: known GEMMs (one per study precision) and a known copy,
# through the same two ncu passes as the study's captures. A precision whose
# counters fail it gets the analytic AI, with the reason (dnnroofline.ncu.selftest).
rule ncu_selftest:
    input:
        ancient("results/{menv}/env_info.json"),
    output:
        "results/{menv}/ncu/selftest.json",
    log:
        "results/{menv}/logs/ncu/selftest.log",
    benchmark:
        "results/{menv}/benchmarks/ncu/selftest.tsv"
    conda:
        "../envs/profile.yaml"
    resources:
        **slurm.env_resources(config, exclusive=True),
        **jobs.runtime_resource(
            config,
            "ncu_selftest",
            "results/{menv}/benchmarks/ncu/selftest.tsv",
            ATTEMPTS,
        ),
        measurement=1,
    params:
        script=entry_script("ncu_selftest.py"),
        ncu=config["ncu"]["executable"],
        precisions=env_precisions,
        timeout=jobs.ncu_timeout_flag(config),
    shell:
        logged(
            "python {params.script} --ncu {params.ncu} --env {wildcards.menv} --env-info {input} "
            "{params.timeout} --precisions {params.precisions} --work-dir results/{wildcards.menv}/ncu/selftest --out {output}"
        )


rule ncu:
    input:
        # ancient: a re-taken fingerprint never re-runs finished profiles (as in train.smk)
        info=ancient("results/{menv}/env_info.json"),
        selftest="results/{menv}/ncu/selftest.json",
    output:
        # kernel pass (per kernel, cold cache) and step pass (the step as it runs)
        csv=measured_path("ncu", ".csv"),
        step_csv=measured_path("ncu", ".step.csv"),
        json=measured_path("ncu", ".json"),
        # the driver's own run JSON of the profiled step (not a timing: it ran under ncu)
        driver_run=measured_path("ncu/driver", ".json"),
    log:
        measured_path("logs/ncu", ".log"),
    benchmark:
        measured_path("benchmarks/ncu", ".tsv")
    conda:
        "../envs/profile.yaml"
    threads: job_threads
    resources:
        **slurm.env_resources(config, exclusive=True),
        **jobs.runtime_resource(
            config, "ncu", measured_path("benchmarks/ncu", ".tsv"), ATTEMPTS
        ),
        measurement=1,
    params:
        run_id=jobs.driver_run_id("ncu"),
        script=entry_script("profile_ncu.py"),
        driver=entry_script("run_train.py"),
        args=run_args,
        ncu=config["ncu"]["executable"],
        warmup=config["ncu"]["warmup_iters"],
        declared_threads=env_threads,
        timeout=jobs.ncu_timeout_flag(config),
    shell:
        logged(
            "python {params.script} --ncu {params.ncu} --env-info {input.info} {params.timeout} "
            "--csv-out {output.csv} --step-csv-out {output.step_csv} --json-out {output.json} "
            "--driver-run-out {output.driver_run} "
            "--selftest {input.selftest} --precision {wildcards.precision} "
            "-- python {params.driver} {params.args} "
            "--warmup-iters {params.warmup} --iters 1 --env {wildcards.menv} "
            "--env-info {input.info} "
            "--run-id {params.run_id} "
            "--expect-threads {params.declared_threads}"
        )


# What the ncu counters add to the roofline: per config, the kernels on the DRAM
# roofline and the step against its L1/L2/DRAM bytes; for the report, the
# analytic FLOPs and bytes checked against ncu's.


rule plot_kernel_roofline:
    input:
        ncu=env_path("ncu", ".json"),
        ceilings="results/{env}/ceilings.json",
    output:
        png=report(
            f"results/plots/kernels/roofline_kernels_{CONFIG_KEY}.png",
            caption="../report/roofline_kernels.rst",
            category="4. Roofline",
            subcategory="Per-kernel rooflines (ncu)",
            labels={
                "figure": "kernels",
                "env": "{env}",
                "model": "{model}",
                "precision": "{precision}",
                "batch": "{batch}",
            },
        ),
        svg=f"results/plots/kernels/roofline_kernels_{CONFIG_KEY}.svg",
    log:
        f"results/logs/plots/kernels/roofline_kernels_{CONFIG_KEY}.log",
    conda:
        "../envs/analysis.yaml"
    params:
        script=entry_script("plot_kernel_roofline.py"),
    shell:
        logged(
            "python {params.script} --kind kernels --ncu {input.ncu} --ceilings {input.ceilings} "
            "--env {wildcards.env} --model {wildcards.model} --precision {wildcards.precision} "
            "--batch {wildcards.batch} --png {output.png} --svg {output.svg}"
        )


rule plot_hierarchical_roofline:
    input:
        ncu=env_path("ncu", ".json"),
        ceilings="results/{env}/ceilings.json",
        points="results/roofline_points.csv",
    output:
        png=report(
            f"results/plots/kernels/roofline_hierarchical_{CONFIG_KEY}.png",
            caption="../report/roofline_hierarchical.rst",
            category="4. Roofline",
            subcategory="Hierarchical rooflines (ncu)",
            labels={
                "figure": "hierarchical",
                "env": "{env}",
                "model": "{model}",
                "precision": "{precision}",
                "batch": "{batch}",
            },
        ),
        svg=f"results/plots/kernels/roofline_hierarchical_{CONFIG_KEY}.svg",
    log:
        f"results/logs/plots/kernels/roofline_hierarchical_{CONFIG_KEY}.log",
    conda:
        "../envs/analysis.yaml"
    params:
        script=entry_script("plot_kernel_roofline.py"),
    shell:
        logged(
            "python {params.script} --kind hierarchical --ncu {input.ncu} "
            "--ceilings {input.ceilings} --points {input.points} "
            "--env {wildcards.env} --model {wildcards.model} --precision {wildcards.precision} "
            "--batch {wildcards.batch} --png {output.png} --svg {output.svg}"
        )


rule ncu_vs_analytic:
    input:
        ncu=TARGETS.ncu_files(),
        complexity=TARGETS.complexity_files(),
        selftest=TARGETS.selftest_files(),
        ceilings=TARGETS.ceilings_files(),
    output:
        report(
            "results/report_sections/ncu_vs_analytic.html",
            caption="../report/ncu_vs_analytic.rst",
            category="4. Roofline",
            labels={"section": "ncu vs analytic"},
        ),
    log:
        "results/logs/ncu_vs_analytic.log",
    benchmark:
        "results/benchmarks/ncu_vs_analytic.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        script=entry_script("write_ncu_comparison.py"),
        envs=ENVS,
    shell:
        logged(
            "python {params.script} --ncu {input.ncu} --complexity {input.complexity} "
            "--selftest {input.selftest} --ceilings {input.ceilings} --envs {params.envs} "
            "--out {output}"
        )
