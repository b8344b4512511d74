# Targets of rules/perf.smk: which configs get CPU counters (perf stat).


def perf_files():
    if not config.get("perf", {}).get("enabled"):
        return []
    cpu_envs = [e for e in MEASURED if STUDY.device(e) == "cpu"]
    return [
        f"results/{c.env}/perf/{c.config_key}.json" for c in STUDY.configs(cpu_envs)
    ]
