# Analytic complexity of each (model, batch): params, bytes, FLOPs (not MACs).


rule complexity:
    output:
        "results/complexity/{model}_bs{batch}.json",
    log:
        "results/logs/complexity/{model}_bs{batch}.log",
    benchmark:
        "results/benchmarks/complexity/{model}_bs{batch}.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        script=entry_script("complexity.py"),
        model=model_flags,
    shell:
        logged(
            "OMP_NUM_THREADS=1 python {params.script} {params.model} "
            "--batch-size {wildcards.batch} --out {output}"
        )


# The op inventory of one training step per (model, precision, batch): the model's input.
rule op_inventory:
    output:
        "results/complexity/{model}_{precision}_bs{batch}_ops.json",
    log:
        "results/logs/op_inventory/{model}_{precision}_bs{batch}.log",
    benchmark:
        "results/benchmarks/op_inventory/{model}_{precision}_bs{batch}.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        script=entry_script("op_inventory.py"),
        model=model_flags,
    shell:
        logged(
            "OMP_NUM_THREADS=1 python {params.script} {params.model} "
            "--precision {wildcards.precision} --batch-size {wildcards.batch} --out {output}"
        )
