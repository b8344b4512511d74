# Timed, uninstrumented training runs: one measurement at a time (resource
# "measurement", capped at 1 by profiles/default), with the env's threads.


rule train:
    input:
        "results/{menv}/env_info.json",
    output:
        "results/{menv}/runs/{menv}_{model}_{precision}_bs{batch}_run{run}.json",
    log:
        "results/{menv}/logs/runs/{menv}_{model}_{precision}_bs{batch}_run{run}.log",
    conda:
        "../envs/train.yaml"
    threads: lambda w: STUDY.threads(w.menv)
    resources:
        measurement=1,
    params:
        script=script("run_train.py"),
        args=run_args,
        warmup=config["study"]["warmup_iters"],
        iters=config["study"]["iters"],
        declared_threads=lambda w: STUDY.threads(w.menv),
    shell:
        "python {params.script} {params.args} --warmup-iters {params.warmup} "
        "--iters {params.iters} --env {wildcards.menv} --expect-threads {params.declared_threads} "
        "--run-id {wildcards.menv}_{wildcards.model}_{wildcards.precision}_bs{wildcards.batch}_run{wildcards.run} "
        "--out {output} > {log} 2>&1"
