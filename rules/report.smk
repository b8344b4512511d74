# The written study: one generated HTML page per report section.


rule report_sections:
    input:
        config="results/study_config.json",
        matrix="results/study_matrix.json",
        metrics="results/metrics.csv",
        points="results/roofline_points.csv",
        complexity=TARGETS.complexity_files(),
        ceilings=TARGETS.ceilings_files(),
        env_info=TARGETS.env_info_files(),
        runs=TARGETS.run_files(),
        benchmarks=TARGETS.benchmark_files(),
        lock=os.path.join(workflow.basedir, "requirements.lock"),
        # the model's page: its predictions, their check and the parity plot
        predictions="results/predictions.csv",
        prediction_check="results/prediction_check.csv",
        parity="results/plots/prediction_parity.svg",
        # the energy page: its roofline
        energy_roofline="results/plots/energy_roofline.svg",
        # on Slurm: the jobs that did not complete (cancelled, timed out, ...)
        cluster_attempts=[] if ATTEMPTS is None else "results/cluster_attempts.csv",
    output:
        # one page per section of dnnroofline.report.SECTIONS, captioned by report/{name}.rst
        **{
            name: report(
                f"results/report_sections/{section_file(name)}",
                caption=f"../report/{name}.rst",
                category=category,
                labels={"section": name},
            )
            for name, category in REPORT_SECTIONS
        },
    log:
        "results/logs/report_sections.log",
    benchmark:
        "results/benchmarks/report_sections.tsv"
    conda:
        "../envs/report.yaml"
    params:
        script=entry_script("write_report_sections.py"),
        outdir=output_dir(SECTION_NAMES[0]),
        attempts=optional_files_flag("cluster_attempts"),
    shell:
        logged(
            "python {params.script} --config {input.config} --metrics {input.metrics} "
            "--points {input.points} --complexity {input.complexity} "
            "--ceilings {input.ceilings} --env-info {input.env_info} "
            "--expected-runs {input.matrix} --runs {input.runs} --benchmarks {input.benchmarks} "
            "--lock {input.lock} --predictions {input.predictions} "
            "--prediction-check {input.prediction_check} --parity {input.parity} "
            "--energy-roofline {input.energy_roofline} "
            "{params.attempts} --outdir {params.outdir}"
        )


# Read from sacct when the Snakefile is parsed (rules/common.smk's ATTEMPTS): a new
# failed job changes the params, which re-runs this rule and the report.
rule cluster_attempts:
    output:
        "results/cluster_attempts.csv",
    log:
        "results/logs/cluster_attempts.log",
    conda:
        "../envs/analysis.yaml"
    params:
        attempts=ATTEMPTS or [],
        # the CSV's columns from the package here, so that the script imports no Slurm code
        columns=slurm.ATTEMPT_COLUMNS,
    script:
        "../workflow/scripts/write_cluster_attempts.py"
