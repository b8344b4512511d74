# The study's ledgers: one row per run, then one row per roofline point.


rule study_matrix:
    output:
        config="results/study_config.json",
        matrix="results/study_matrix.json",
    log:
        "results/logs/study_matrix.log",
    conda:
        "../envs/analysis.yaml"
    params:
        config=jobs.resolved_config(STUDY),
        runs=[{**r.record(), "measured_here": r.env in MEASURED} for r in STUDY.runs()],
    script:
        "../workflow/scripts/write_study_matrix.py"


rule metrics:
    input:
        runs=TARGETS.run_files(),
    output:
        "results/metrics.csv",
    log:
        "results/logs/metrics.log",
    conda:
        "../envs/analysis.yaml"
    params:
        script=entry_script("aggregate_metrics.py"),
    shell:
        logged("python {params.script} --runs {input.runs} --out {output}")


rule roofline_points:
    input:
        metrics="results/metrics.csv",
        complexity=TARGETS.complexity_files(),
        ceilings=TARGETS.ceilings_files(),
        ncu=TARGETS.ncu_files(),
        perf=TARGETS.perf_files(),
        # the kernel-busy share (host-bound steps) comes from a point's trace first
        traces=TARGETS.trace_tables(),
    output:
        "results/roofline_points.csv",
    log:
        "results/logs/roofline_points.log",
    conda:
        "../envs/analysis.yaml"
    params:
        script=entry_script("roofline_points.py"),
        ncu=optional_files_flag("ncu"),
        perf=optional_files_flag("perf"),
        traces=optional_files_flag("traces"),
    shell:
        logged(
            "python {params.script} --metrics {input.metrics} --complexity {input.complexity} "
            "--ceilings {input.ceilings} {params.ncu} {params.perf} {params.traces} "
            "--out {output}"
        )
