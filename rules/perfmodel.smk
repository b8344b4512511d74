# The model: every point predicted from microbenchmarks and op inventories alone (never
# a timed run), then checked against what was measured, beside the roofline baselines.


rule predictions:
    input:
        # the resolved config holds the what-ifs (predict:), the matrix the study's points
        config="results/study_config.json",
        matrix="results/study_matrix.json",
        inventories=TARGETS.inventory_files(),
        complexity=TARGETS.predicted_complexity_files(),
        ceilings=TARGETS.ceilings_files(),
        efficiency=TARGETS.efficiency_files(),
        env_info=TARGETS.env_info_files(),
    output:
        "results/predictions.csv",
    log:
        "results/logs/predictions.log",
    conda:
        "../envs/analysis.yaml"
    params:
        script=entry_script("predict.py"),
        efficiency=optional_files_flag("efficiency"),
    shell:
        logged(
            "python {params.script} --config {input.config} --matrix {input.matrix} "
            "--inventories {input.inventories} --complexity {input.complexity} "
            "--ceilings {input.ceilings} {params.efficiency} --env-info {input.env_info} "
            "--out {output}"
        )


rule prediction_check:
    input:
        predictions="results/predictions.csv",
        metrics="results/metrics.csv",
        # the baselines' inputs: whole-step FLOPs and bytes, per-op counts, the roofs
        inventories=TARGETS.inventory_files(),
        complexity=TARGETS.predicted_complexity_files(),
        ceilings=TARGETS.ceilings_files(),
    output:
        "results/prediction_check.csv",
    log:
        "results/logs/prediction_check.log",
    conda:
        "../envs/analysis.yaml"
    params:
        script=entry_script("check_predictions.py"),
    shell:
        logged(
            "python {params.script} --predictions {input.predictions} "
            "--metrics {input.metrics} --inventories {input.inventories} "
            "--complexity {input.complexity} --ceilings {input.ceilings} --out {output}"
        )


rule plot_parity:
    input:
        "results/prediction_check.csv",
    output:
        report(
            "results/plots/prediction_parity.svg",
            caption="../report/prediction_parity.rst",
            category="7. Model",
            labels={"figure": "predicted vs measured images/s", "env": "all envs"},
        ),
    log:
        "results/logs/plots/prediction_parity.log",
    conda:
        "../envs/analysis.yaml"
    params:
        script=entry_script("plot_parity.py"),
    shell:
        logged("python {params.script} --check {input} --svg {output}")
