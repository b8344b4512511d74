# Nsight Compute: one whole training step (backward and optimizer included) per
# (env, model, precision, batch) on CUDA envs. Counts come from here; durations
# come from the uninstrumented runs, since ncu serializes and replays kernels.


rule ncu:
    input:
        "results/{menv}/env_info.json",
    output:
        csv="results/{menv}/ncu/{menv}_{model}_{precision}_bs{batch}.csv",
        json="results/{menv}/ncu/{menv}_{model}_{precision}_bs{batch}.json",
    log:
        "results/{menv}/logs/ncu/{menv}_{model}_{precision}_bs{batch}.log",
    benchmark:
        "results/{menv}/benchmarks/ncu/{menv}_{model}_{precision}_bs{batch}.tsv"
    conda:
        "../envs/profile.yaml"
    threads: lambda w: STUDY.threads(w.menv)
    resources:
        measurement=1,
    params:
        script=script("profile_ncu.py"),
        driver=script("run_train.py"),
        args=run_args,
        ncu=ncu_settings.get("executable", "ncu"),
        warmup=ncu_settings.get("warmup_iters", 3),
    shell:
        "python {params.script} --ncu {params.ncu} --env-info {input} --csv-out {output.csv} "
        "--json-out {output.json} -- python {params.driver} {params.args} "
        "--warmup-iters {params.warmup} --iters 1 > {log} 2>&1"
