# Targets of rules/traces.smk: which configs get a torch.profiler trace.

traces_settings = config.get("traces", {})


def traced_envs():
    """Envs measured here whose step a trace can profile: one process (not nproc > 1)."""
    return [e for e in MEASURED if STUDY.nproc(e) == 1]


def trace_configs():
    """Configs with a trace: every config measured here (data-parallel envs aside), and
    the traces copied in with another machine's results/{env}/traces/."""
    if not traces_settings.get("enabled", True):
        return []
    configs = STUDY.configs(traced_envs())
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
    for c in STUDY.configs(traced_envs()):
        stem = f"results/{c.env}/traces/{c.config_key}"
        files += [f"{stem}.json", f"{stem}.ops.json", f"{stem}.ops.csv"]
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
        for c in STUDY.configs(traced_envs())
    ]
