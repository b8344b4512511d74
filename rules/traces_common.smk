# Targets of rules/traces.smk: which configs get a torch.profiler trace.

traces_settings = config.get("traces", {})


def single_process_envs():
    """Envs measured here that run the step in one process: one trace file."""
    return [e for e in MEASURED if STUDY.nproc(e) == 1]


def data_parallel_envs():
    """Envs measured here with nproc > 1: a folder of traces, one per rank."""
    return [e for e in MEASURED if STUDY.nproc(e) > 1]


def trace_path(c):
    """A config's trace output: its trace file, or a data-parallel env's folder of them."""
    stem = f"results/{c.env}/traces/{c.config_key}"
    return f"{stem}.ranks" if STUDY.nproc(c.env) > 1 else f"{stem}.json"


def trace_file(wildcards):
    """--trace-out of the trace job: X.json, in a data-parallel env's folder, where rank
    i writes X.rank{i}.json (the run identity and the rank in each name)."""
    key = (
        f"{wildcards.menv}_{wildcards.model}_{wildcards.precision}_bs{wildcards.batch}"
    )
    stem = f"results/{wildcards.menv}/traces/{key}"
    return (
        f"{stem}.ranks/{key}.json"
        if STUDY.nproc(wildcards.menv) > 1
        else f"{stem}.json"
    )


def trace_configs():
    """Configs with a trace: every config measured here, and the traces copied in with
    another machine's results/{env}/traces/."""
    if not traces_settings.get("enabled", True):
        return []
    configs = STUDY.configs(MEASURED)
    for env in copied_envs():
        for c in STUDY.configs([env]):
            if os.path.exists(f"results/{env}/traces/{c.config_key}.ops.json"):
                configs.append(c)
    return configs


def trace_tables():
    return [f"results/{c.env}/traces/{c.config_key}.ops.json" for c in trace_configs()]


def trace_files():
    """Trace files of the configs measured here (copied ones are read, never made)."""
    if not traces_settings.get("enabled", True):
        return []
    files = []
    for c in STUDY.configs(MEASURED):
        stem = f"results/{c.env}/traces/{c.config_key}"
        files += [trace_path(c), f"{stem}.ops.json", f"{stem}.ops.csv"]
    return files


def trace_targets():
    """The trace files, and the report section made of them."""
    if not traces_settings.get("enabled", True):
        return []
    return trace_files() + ["results/report_sections/traces.html"]


def trace_benchmark_files():
    """Benchmark TSVs of the trace jobs run here (the report's "what the study cost")."""
    if not traces_settings.get("enabled", True):
        return []
    return [
        f"results/{c.env}/benchmarks/traces/{c.config_key}.tsv"
        for c in STUDY.configs(MEASURED)
    ]
