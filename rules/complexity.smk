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
        image_size=config["study"]["image_size"],
        num_classes=config["study"]["num_classes"],
    shell:
        "OMP_NUM_THREADS=1 python {params.script} --arch {wildcards.model} "
        "--batch-size {wildcards.batch} --image-size {params.image_size} "
        "--num-classes {params.num_classes} --out {output} > {log} 2>&1"
