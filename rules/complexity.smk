# Analytic complexity of each (model, batch): params, bytes, FLOPs (not MACs).


rule complexity:
    output:
        "results/complexity/{model}_bs{batch}.json",
    log:
        "results/logs/complexity/{model}_bs{batch}.log",
    conda:
        "../envs/analysis.yaml"
    params:
        script=script("complexity.py"),
        model=lambda w: " ".join(STUDY.model_args(w.model)),
    shell:
        "OMP_NUM_THREADS=1 python {params.script} {params.model} "
        "--batch-size {wildcards.batch} --out {output} > {log} 2>&1"
