# Analytic complexity of each (model, batch): params, bytes, FLOPs (not MACs), and the op
# inventory of one training step in every precision and step variant (device, memory
# format) the study predicts (the model's input), all from one job: one Python and torch
# start per (model, batch), not per file.


rule complexity:
    output:
        complexity="results/complexity/{model}_bs{batch}.json",
        inventories=[
            inventory_path("{model}", precision, "{batch}", step)
            for precision, step in INVENTORY_STEPS
        ],
    log:
        "results/logs/complexity/{model}_bs{batch}.log",
    benchmark:
        "results/benchmarks/complexity/{model}_bs{batch}.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        script=entry_script("complexity.py"),
        model=model_flags,
        inventories=inventory_flags,
    shell:
        logged(
            "OMP_NUM_THREADS=1 python {params.script} {params.model} "
            "--batch-size {wildcards.batch} {params.inventories} --out {output.complexity}"
        )
