# Targets of the ncu rules (rules/ncu.smk): which configs have an ncu capture.


# ncu.pass_timeout_s as the stages' --timeout (unset: each stage's own default)
ncu_pass_timeout = (
    f"--timeout {ncu_settings['pass_timeout_s']} "
    if "pass_timeout_s" in ncu_settings
    else ""
)


def ncu_configs():
    """Every config with an ncu capture: CUDA envs measured here, and captures
    copied in from other machines (results/{env}/ncu/*.json of a copied env)."""
    configs = STUDY.profiled_configs()
    for env in copied_envs():
        by_key = {c.config_key: c for c in STUDY.configs([env])}
        for path in sorted(glob.glob(f"results/{env}/ncu/*.json")):
            key = os.path.basename(path).removesuffix(".json")
            if key in by_key:
                configs.append(by_key[key])
    return configs


def ncu_targets():
    files = []
    for c in ncu_configs():
        for kind in ("kernels", "hierarchical"):
            files += [
                f"results/plots/kernels/roofline_{kind}_{c.config_key}.{ext}"
                for ext in ("png", "svg")
            ]
    return files + ["results/report_sections/ncu_vs_analytic.html"]


def selftest_files():
    """The counter self-test of each CUDA env measured here, and of copied envs that have one."""
    files = [f"results/{env}/ncu/selftest.json" for env in STUDY.cuda_envs_measured()]
    for env in copied_envs():
        path = f"results/{env}/ncu/selftest.json"
        if os.path.exists(path):
            files.append(path)
    return files
