# Where the step's time goes: a torch.profiler (Kineto) trace of a few steps after
# warm-up per (env, model, precision, batch), in its own job (never inside a timed
# run), holding the measurement slot like any measurement. traces.enabled (default
# on) and traces.steps / traces.top set it; the report links each trace.


include: "traces_common.smk"


rule trace:
    input:
        # ancient: a re-taken fingerprint never re-runs finished traces (as in train.smk)
        ancient("results/{menv}/env_info.json"),
    output:
        trace="results/{menv}/traces/{menv}_{model}_{precision}_bs{batch}.json",
        table="results/{menv}/traces/{menv}_{model}_{precision}_bs{batch}.ops.json",
        csv="results/{menv}/traces/{menv}_{model}_{precision}_bs{batch}.ops.csv",
    log:
        "results/{menv}/logs/traces/{menv}_{model}_{precision}_bs{batch}.log",
    benchmark:
        "results/{menv}/benchmarks/traces/{menv}_{model}_{precision}_bs{batch}.tsv"
    wildcard_constraints:
        menv=alternation(single_process_envs()),
    conda:
        "../envs/train.yaml"
    threads: job_threads
    resources:
        **on_env_nodes(exclusive=True),
        measurement=1,
    params:
        script=entry_script("trace_step.py"),
        args=run_args,
        warmup=config["study"]["warmup_iters"],
        steps=traces_settings.get("steps", 3),
        top=traces_settings.get("top", 15),
        declared_threads=env_threads,
        trace_file=trace_file,
    shell:
        "python {params.script} {params.args} --warmup-iters {params.warmup} "
        "--steps {params.steps} --top {params.top} --env {wildcards.menv} "
        "--expect-threads {params.declared_threads} --env-info {input} "
        "--run-id {wildcards.menv}_{wildcards.model}_{wildcards.precision}_bs{wildcards.batch}_trace "
        "--trace-out {params.trace_file} --table-out {output.table} --csv-out {output.csv} "
        "> {log} 2>&1 || (tail -n 5 {log} >&2; exit 1)"


# A data-parallel env's trace: its ranks launched as the timed runs launch them, every
# rank traced into its own file in the folder (X.rank{i}.json), the table the slowest
# rank's with each rank's communication time (dnnroofline.measure.comm_trace).
use rule trace as trace_data_parallel with:
    output:
        trace=directory(
            "results/{menv}/traces/{menv}_{model}_{precision}_bs{batch}.ranks"
        ),
        table="results/{menv}/traces/{menv}_{model}_{precision}_bs{batch}.ops.json",
        csv="results/{menv}/traces/{menv}_{model}_{precision}_bs{batch}.ops.csv",
    wildcard_constraints:
        menv=alternation(data_parallel_envs()),


# The traces' report page: per config the top-operators (and kernels) table, the
# traced steps against the timed runs' median, and a link to the trace file.
rule trace_section:
    input:
        tables=trace_tables(),
        metrics="results/metrics.csv",
    output:
        report(
            "results/report_sections/traces.html",
            caption="../report/traces.rst",
            category="3. Measurement",
            labels={"section": "traces"},
        ),
    log:
        "results/logs/trace_section.log",
    benchmark:
        "results/benchmarks/trace_section.tsv"
    conda:
        "../envs/report.yaml"
    params:
        script=entry_script("write_trace_section.py"),
    shell:
        "python {params.script} --tables {input.tables} --metrics {input.metrics} "
        "--out {output} > {log} 2>&1 "
        "|| (tail -n 5 {log} >&2; exit 1)"
