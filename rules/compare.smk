# Before and after: this study compared with a baseline (config compare:), point by point,
# with what changed besides the code; its arrows plot and its report page. The baseline's
# files are inputs here alone (baseline_files): a changed baseline re-runs these three rules,
# never the study.


rule compare:
    input:
        # the resolved config holds compare: (the baseline, its label and env map) and
        # regression: (the gate's tolerance)
        config="results/study_config.json",
        metrics="results/metrics.csv",
        runs=TARGETS.run_files(),
        env_info=TARGETS.env_info_files(),
        ceilings=TARGETS.ceilings_files(),
        traces=TARGETS.trace_tables(),
        ncu=TARGETS.ncu_files(),
        baseline=baseline_files,
    output:
        **COMPARE_FILES,
    log:
        "results/logs/compare.log",
    conda:
        "../envs/analysis.yaml"
    params:
        script=entry_script("compare_studies.py"),
        outdir=output_dir("compare"),
        traces=optional_files_flag("traces"),
        ncu=optional_files_flag("ncu"),
    shell:
        logged(
            "python {params.script} --config {input.config} --metrics {input.metrics} "
            "--runs {input.runs} --env-info {input.env_info} --ceilings {input.ceilings} "
            "{params.traces} {params.ncu} --outdir {params.outdir}"
        )


# Per env, the current roofline with an arrow from each baseline point to this study's
# point, coloured by the comparison's verdict.
rule plot_compare_roofline:
    input:
        compare=COMPARE_FILES["compare"],
        config="results/study_config.json",
        points="results/roofline_points.csv",
        ceilings=TARGETS.ceilings_files(),
        baseline_points=baseline_points,
    output:
        png=report(
            f"{COMPARE_PLOT}.png",
            caption="../report/compare_roofline.rst",
            category=compare_category(),
            labels={"figure": "baseline -> this study", "env": "all envs"},
        ),
        svg=f"{COMPARE_PLOT}.svg",
    log:
        "results/logs/plots/compare_roofline.log",
    conda:
        "../envs/analysis.yaml"
    params:
        script=entry_script("plot_compare_roofline.py"),
        label=baseline_label,
        baseline_points=optional_files_flag("baseline_points"),
    shell:
        logged(
            "python {params.script} --compare {input.compare} --config {input.config} "
            "--points {input.points} {params.baseline_points} "
            "--ceilings {input.ceilings} --label {params.label} "
            "--png {output.png} --svg {output.svg}"
        )


# The report's page "Compared with <label>": what changed besides the code first, then
# the verdicts, the arrows, the ops, kernels and roofs that moved, the unmatched points.
rule compare_section:
    input:
        **COMPARE_FILES,
        config="results/study_config.json",
        plot=f"{COMPARE_PLOT}.svg",
    output:
        report(
            f"results/report_sections/{section_file(COMPARE_SECTION)}",
            caption=f"../report/{COMPARE_SECTION}.rst",
            category=compare_category(),
            labels={"section": COMPARE_SECTION},
        ),
    log:
        "results/logs/compare_section.log",
    conda:
        "../envs/report.yaml"
    params:
        script=entry_script("write_compare_section.py"),
        label=baseline_label,
    shell:
        logged(
            "python {params.script} --config {input.config} --compare {input.compare} "
            "--unmatched {input.compare_unmatched} --fingerprints {input.compare_fingerprints} "
            "--ops {input.compare_ops} --kernels {input.compare_kernels} "
            "--roofs {input.compare_roofs} --plot {input.plot} --label {params.label} "
            "--out {output}"
        )
