# The written study: one generated HTML page per report section.


rule report_sections:
    input:
        config="results/study_config.json",
        matrix="results/study_matrix.json",
        metrics="results/metrics.csv",
        points="results/roofline_points.csv",
        complexity=complexity_files(),
        ceilings=ceilings_files(),
        env_info=env_info_files(),
        runs=run_files(),
        benchmarks=benchmark_files(),
        lock=os.path.join(workflow.basedir, "requirements.lock"),
    output:
        design=report(
            "results/report_sections/design.html",
            caption="../report/design.rst",
            category="1. Experiment design",
            labels={"section": "design"},
        ),
        complexity=report(
            "results/report_sections/complexity.html",
            caption="../report/complexity.rst",
            category="2. Complexity",
            labels={"section": "complexity"},
        ),
        measurement=report(
            "results/report_sections/measurement.html",
            caption="../report/measurement.rst",
            category="3. Measurement",
            labels={"section": "measurement"},
        ),
        roofline=report(
            "results/report_sections/roofline.html",
            caption="../report/roofline.rst",
            category="4. Roofline",
            labels={"section": "roofline"},
        ),
        analysis=report(
            "results/report_sections/analysis.html",
            caption="../report/analysis.rst",
            category="5. Analysis",
            labels={"section": "analysis"},
        ),
        reproducibility=report(
            "results/report_sections/reproducibility.html",
            caption="../report/reproducibility.rst",
            category="6. Reproducibility",
            labels={"section": "reproducibility"},
        ),
    log:
        "results/logs/report_sections.log",
    benchmark:
        "results/benchmarks/report_sections.tsv"
    conda:
        "../envs/report.yaml"
    params:
        script=entry_script("write_report_sections.py"),
        outdir=output_dir("design"),
    shell:
        "python {params.script} --config {input.config} --metrics {input.metrics} "
        "--points {input.points} --complexity {input.complexity} "
        "--ceilings {input.ceilings} --env-info {input.env_info} "
        "--expected-runs {input.matrix} --runs {input.runs} --benchmarks {input.benchmarks} "
        "--lock {input.lock} "
        "--outdir {params.outdir} "
        "> {log} 2>&1 "
        "|| (tail -n 5 {log} >&2; exit 1)"
