# Where the step's time goes: a torch.profiler (Kineto) trace of a few steps after
# warm-up per (env, model, precision, batch), in its own job (never inside a timed
# run), holding the measurement slot like any measurement. traces.enabled (default
# on) and traces.steps / traces.top set it; the report links each trace.


rule trace:
    input:
        # ancient: a re-taken fingerprint never re-runs finished traces (as in train.smk)
        ancient("results/{menv}/env_info.json"),
    output:
        trace=measured_path("traces", ".json"),
        table=measured_path("traces", ".ops.json"),
        csv=measured_path("traces", ".ops.csv"),
    log:
        measured_path("logs/traces", ".log"),
    benchmark:
        measured_path("benchmarks/traces", ".tsv")
    wildcard_constraints:
        menv=alternation(TARGETS.single_process_envs()),
    conda:
        "../envs/train.yaml"
    threads: job_threads
    resources:
        **slurm.env_resources(config, exclusive=True),
        **jobs.runtime_resource(
            config, "trace", measured_path("benchmarks/traces", ".tsv"), ATTEMPTS
        ),
        measurement=1,
    params:
        run_id=jobs.driver_run_id("trace"),
        script=entry_script("trace_step.py"),
        args=run_args,
        warmup=config["study"]["warmup_iters"],
        steps=config["traces"]["steps"],
        top=config["traces"]["top"],
        declared_threads=env_threads,
        trace_file=trace_file,
    shell:
        logged(
            "python {params.script} {params.args} --warmup-iters {params.warmup} "
            "--steps {params.steps} --top {params.top} --env {wildcards.menv} "
            "--expect-threads {params.declared_threads} --env-info {input} "
            "--run-id {params.run_id} "
            "--trace-out {params.trace_file} --table-out {output.table} --csv-out {output.csv}"
        )


# A data-parallel env's trace: its ranks launched as the timed runs launch them, every
# rank traced into its own file in the folder (X.rank{i}.json), the table the slowest
# rank's with each rank's communication time (dnnroofline.measure.comm_trace).
use rule trace as trace_data_parallel with:
    output:
        trace=directory(measured_path("traces", ".ranks")),
        table=measured_path("traces", ".ops.json"),
        csv=measured_path("traces", ".ops.csv"),
    wildcard_constraints:
        menv=alternation(TARGETS.data_parallel_envs()),


# The traces' report page: per config the top-operators (and kernels) table, the
# traced steps against the timed runs' median, and a link to the trace file.
rule trace_section:
    input:
        tables=TARGETS.trace_tables(),
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
        logged(
            "python {params.script} --tables {input.tables} --metrics {input.metrics} "
            "--out {output}"
        )
