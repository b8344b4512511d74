# Nsight Compute: one whole training step (backward and optimizer included) per
# (env, model, precision, batch) on CUDA envs (at ncu.batch_sizes, where given).
# Counts come from here; durations
# come from the uninstrumented runs, since ncu serializes and replays kernels.
# Target functions (ncu_targets) live in ncu_common.smk.


include: "ncu_common.smk"


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
        **on_env_nodes(exclusive=True),
        measurement=1,
    params:
        script=entry_script("ncu_selftest.py"),
        ncu=ncu_settings.get("executable", "ncu"),
        precisions=env_precisions,
        timeout=ncu_pass_timeout,
    shell:
        "python {params.script} --ncu {params.ncu} --env {wildcards.menv} --env-info {input} "
        "{params.timeout}--precisions {params.precisions} --work-dir results/{wildcards.menv}/ncu/selftest --out {output} > {log} 2>&1 "
        "|| (tail -n 5 {log} >&2; exit 1)"


rule ncu:
    input:
        # ancient: a re-taken fingerprint never re-runs finished profiles (as in train.smk)
        info=ancient("results/{menv}/env_info.json"),
        selftest="results/{menv}/ncu/selftest.json",
    output:
        # kernel pass (per kernel, cold cache) and step pass (the step as it runs)
        csv="results/{menv}/ncu/{menv}_{model}_{precision}_bs{batch}.csv",
        step_csv="results/{menv}/ncu/{menv}_{model}_{precision}_bs{batch}.step.csv",
        json="results/{menv}/ncu/{menv}_{model}_{precision}_bs{batch}.json",
        # the driver's own run JSON of the profiled step (not a timing: it ran under ncu)
        driver_run="results/{menv}/ncu/driver/{menv}_{model}_{precision}_bs{batch}.json",
    log:
        "results/{menv}/logs/ncu/{menv}_{model}_{precision}_bs{batch}.log",
    benchmark:
        "results/{menv}/benchmarks/ncu/{menv}_{model}_{precision}_bs{batch}.tsv"
    conda:
        "../envs/profile.yaml"
    threads: job_threads
    resources:
        **on_env_nodes(exclusive=True),
        measurement=1,
    params:
        script=entry_script("profile_ncu.py"),
        driver=entry_script("run_train.py"),
        args=run_args,
        ncu=ncu_settings.get("executable", "ncu"),
        warmup=ncu_settings.get("warmup_iters", 3),
        declared_threads=env_threads,
        timeout=ncu_pass_timeout,
    shell:
        "python {params.script} --ncu {params.ncu} --env-info {input.info} {params.timeout}"
        "--csv-out {output.csv} --step-csv-out {output.step_csv} --json-out {output.json} "
        "--driver-run-out {output.driver_run} "
        "--selftest {input.selftest} --precision {wildcards.precision} "
        "-- python {params.driver} {params.args} "
        "--warmup-iters {params.warmup} --iters 1 --env {wildcards.menv} "
        "--env-info {input.info} "
        "--run-id {wildcards.menv}_{wildcards.model}_{wildcards.precision}_bs{wildcards.batch}_ncu "
        "--expect-threads {params.declared_threads} > {log} 2>&1 "
        "|| (tail -n 5 {log} >&2; exit 1)"


# What the ncu counters add to the roofline: per config, the kernels on the DRAM
# roofline and the step against its L1/L2/DRAM bytes; for the report, the
# analytic FLOPs and bytes checked against ncu's.


rule plot_kernel_roofline:
    input:
        ncu="results/{env}/ncu/{env}_{model}_{precision}_bs{batch}.json",
        ceilings="results/{env}/ceilings.json",
    output:
        png=report(
            "results/plots/kernels/roofline_kernels_{env}_{model}_{precision}_bs{batch}.png",
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
        svg="results/plots/kernels/roofline_kernels_{env}_{model}_{precision}_bs{batch}.svg",
    log:
        "results/logs/plots/kernels/roofline_kernels_{env}_{model}_{precision}_bs{batch}.log",
    conda:
        "../envs/analysis.yaml"
    params:
        script=entry_script("plot_kernel_roofline.py"),
    shell:
        "python {params.script} --kind kernels --ncu {input.ncu} --ceilings {input.ceilings} "
        "--env {wildcards.env} --model {wildcards.model} --precision {wildcards.precision} "
        "--batch {wildcards.batch} --png {output.png} --svg {output.svg} > {log} 2>&1 "
        "|| (tail -n 5 {log} >&2; exit 1)"


rule plot_hierarchical_roofline:
    input:
        ncu="results/{env}/ncu/{env}_{model}_{precision}_bs{batch}.json",
        ceilings="results/{env}/ceilings.json",
        points="results/roofline_points.csv",
    output:
        png=report(
            "results/plots/kernels/roofline_hierarchical_{env}_{model}_{precision}_bs{batch}.png",
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
        svg="results/plots/kernels/roofline_hierarchical_{env}_{model}_{precision}_bs{batch}.svg",
    log:
        "results/logs/plots/kernels/roofline_hierarchical_{env}_{model}_{precision}_bs{batch}.log",
    conda:
        "../envs/analysis.yaml"
    params:
        script=entry_script("plot_kernel_roofline.py"),
    shell:
        "python {params.script} --kind hierarchical --ncu {input.ncu} "
        "--ceilings {input.ceilings} --points {input.points} "
        "--env {wildcards.env} --model {wildcards.model} --precision {wildcards.precision} "
        "--batch {wildcards.batch} --png {output.png} --svg {output.svg} > {log} 2>&1 "
        "|| (tail -n 5 {log} >&2; exit 1)"


rule ncu_vs_analytic:
    input:
        ncu=ncu_files(),
        complexity=complexity_files(),
        selftest=selftest_files(),
        ceilings=ceilings_files(),
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
        "python {params.script} --ncu {input.ncu} --complexity {input.complexity} "
        "--selftest {input.selftest} --ceilings {input.ceilings} --envs {params.envs} "
        "--out {output} > {log} 2>&1 "
        "|| (tail -n 5 {log} >&2; exit 1)"
