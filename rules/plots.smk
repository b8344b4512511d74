# Static roofline, energy roofline and throughput plots (PNG for the report, SVG for papers).


rule plot_roofline_env:
    input:
        points="results/roofline_points.csv",
        ceilings="results/{env}/ceilings.json",
    output:
        png=report(
            "results/plots/roofline_{env}.png",
            caption="../report/roofline_env.rst",
            category="4. Roofline",
            subcategory="Static rooflines",
            labels={"figure": "roofline", "env": "{env}"},
        ),
        svg="results/plots/roofline_{env}.svg",
    log:
        "results/logs/plots/roofline_{env}.log",
    conda:
        "../envs/analysis.yaml"
    params:
        script=entry_script("plot_roofline.py"),
    shell:
        logged(
            "python {params.script} --points {input.points} --ceilings {input.ceilings} "
            "--env {wildcards.env} --png {output.png} --svg {output.svg}"
        )


rule plot_roofline_all:
    input:
        points="results/roofline_points.csv",
        ceilings=TARGETS.ceilings_files(),
    output:
        png=report(
            "results/plots/roofline_all.png",
            caption="../report/roofline_all.rst",
            category="4. Roofline",
            subcategory="Static rooflines",
            labels={"figure": "roofline", "env": "all envs"},
        ),
        svg="results/plots/roofline_all.svg",
    log:
        "results/logs/plots/roofline_all.log",
    conda:
        "../envs/analysis.yaml"
    params:
        script=entry_script("plot_roofline.py"),
    shell:
        logged(
            "python {params.script} --points {input.points} --ceilings {input.ceilings} "
            "--png {output.png} --svg {output.svg}"
        )


rule plot_throughput:
    input:
        "results/metrics.csv",
    output:
        png=report(
            "results/plots/throughput.png",
            caption="../report/throughput.rst",
            category="3. Measurement",
            subcategory="Figures",
            labels={"figure": "throughput vs batch size", "env": "all envs"},
        ),
        svg="results/plots/throughput.svg",
    log:
        "results/logs/plots/throughput.log",
    conda:
        "../envs/analysis.yaml"
    params:
        script=entry_script("plot_throughput.py"),
    shell:
        logged(
            "python {params.script} --metrics {input} --png {output.png} --svg {output.svg}"
        )


# Choi's energy roofline: FLOP/J against AI, each env's fitted energy costs as its roofs.
rule plot_energy_roofline:
    input:
        metrics="results/metrics.csv",
        points="results/roofline_points.csv",
        ceilings=TARGETS.ceilings_files(),
    output:
        png=report(
            "results/plots/energy_roofline.png",
            caption="../report/energy_roofline.rst",
            category="4. Roofline",
            subcategory="Static rooflines",
            labels={"figure": "energy roofline", "env": "all envs"},
        ),
        svg="results/plots/energy_roofline.svg",
    log:
        "results/logs/plots/energy_roofline.log",
    conda:
        "../envs/analysis.yaml"
    params:
        script=entry_script("plot_energy_roofline.py"),
    shell:
        logged(
            "python {params.script} --metrics {input.metrics} --points {input.points} "
            "--ceilings {input.ceilings} --png {output.png} --svg {output.svg}"
        )


rule plot_interactive_env:
    input:
        points="results/roofline_points.csv",
        ceilings="results/{env}/ceilings.json",
        ncu=env_ncu_files,
    output:
        report(
            "results/plots/roofline_{env}.html",
            caption="../report/roofline_interactive_env.rst",
            category="4. Roofline",
            subcategory="Interactive rooflines",
            labels={"figure": "interactive roofline", "env": "{env}"},
        ),
    log:
        "results/logs/plots/roofline_{env}_html.log",
    conda:
        "../envs/analysis.yaml"
    params:
        script=entry_script("plot_interactive.py"),
        ncu=optional_files_flag("ncu"),
    shell:
        logged(
            "python {params.script} --points {input.points} --ceilings {input.ceilings} "
            "--env {wildcards.env} {params.ncu} --out {output}"
        )


rule plot_interactive_all:
    input:
        points="results/roofline_points.csv",
        ceilings=TARGETS.ceilings_files(),
        ncu=TARGETS.ncu_files(),
    output:
        report(
            "results/plots/roofline_all.html",
            caption="../report/roofline_interactive_all.rst",
            category="4. Roofline",
            subcategory="Interactive rooflines",
            labels={"figure": "interactive roofline", "env": "all envs"},
        ),
    log:
        "results/logs/plots/roofline_all_html.log",
    conda:
        "../envs/analysis.yaml"
    params:
        script=entry_script("plot_interactive.py"),
        ncu=optional_files_flag("ncu"),
    shell:
        logged(
            "python {params.script} --points {input.points} --ceilings {input.ceilings} "
            "{params.ncu} --out {output}"
        )
