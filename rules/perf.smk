# CPU counters with perf stat (opt-in: perf.enabled): per (env, model, precision,
# batch) on CPU envs, FLOPs and DRAM bytes per training step, apart from the timed
# runs (perf runs the driver twice; per-step counts are the difference). The
# ceilings job probes perf once per env; where perf cannot count, each file says
# "unavailable" with that reason and the point keeps its analytic AI range.


include: "perf_common.smk"


rule perf:
    input:
        env_info=ancient("results/{menv}/env_info.json"),
        ceilings=ancient("results/{menv}/ceilings.json"),
    output:
        json="results/{menv}/perf/{menv}_{model}_{precision}_bs{batch}.json",
    log:
        "results/{menv}/logs/perf/{menv}_{model}_{precision}_bs{batch}.log",
    conda:
        "../envs/profile.yaml"
    threads: job_threads
    resources:
        **on_env_nodes(exclusive=True),
        measurement=1,
    params:
        script=entry_script("profile_perf.py"),
        driver=entry_script("run_train.py"),
        args=run_args,
        perf=config.get("perf", {}).get("executable", "perf"),
        warmup=config.get("perf", {}).get("warmup_iters", 2),
        short=config.get("perf", {}).get("iters_short", 1),
        long=config.get("perf", {}).get("iters_long", 4),
        declared_threads=env_threads,
    shell:
        "python {params.script} --perf {params.perf} --ceilings {input.ceilings} "
        "--json-out {output.json} --iters-short {params.short} --iters-long {params.long} "
        "-- python {params.driver} {params.args} --warmup-iters {params.warmup} "
        "--env {wildcards.menv} --env-info {input.env_info} "
        "--run-id {wildcards.menv}_{wildcards.model}_{wildcards.precision}_bs{wildcards.batch}_perf "
        "--expect-threads {params.declared_threads} > {log} 2>&1 "
        "|| (tail -n 5 {log} >&2; exit 1)"
