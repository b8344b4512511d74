"""The rules as the Snakemake workflow catalog would have them, read from the files.

Schema defaults stated only in the schema, one way to run an entry script with its log,
the helpers in common.smk alone and that file only glue (its logic in dnnroofline.study),
no Snakemake internals, a benchmark: on every measuring job, and a config/README.md and
.snakemake-workflow-catalog.yml that match the workflow.
"""

import ast
import json
import os
import re

import yaml
from snakemake.utils import validate
from test_conda_envs import ROOT, rule_blocks

from dnnroofline.study import cluster

RULE_FILES = sorted((ROOT / "rules").glob("*.smk"))
SCHEMA = ROOT / "config" / "schema.yaml"


def schema_keys(node: dict, path: str = "") -> dict[str, dict]:
    """Every config key of the schema, dotted (an env's keys as envs.*.key)."""
    keys = {}
    for name, sub in (node.get("properties") or {}).items():
        keys[path + name] = sub
        keys |= schema_keys(sub, f"{path}{name}.")
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        keys |= schema_keys(extra, f"{path}*.")
    return keys


# Where the Python code lives: the entry scripts, the package and the make targets' scripts.
PYTHON_FILES = sorted(
    [
        *(ROOT / "workflow" / "scripts").glob("*.py"),
        *(ROOT / "workflow" / "scripts" / "dnnroofline").rglob("*.py"),
        *(ROOT / "scripts").glob("*.py"),
    ]
)
# A flag named after a tool is that tool's executable (--perf: perf.executable).
FLAG_KEYS = {"perf": "executable", "ncu": "executable"}


def defaulted_keys() -> set[str]:
    """The last part of each config key the schema gives a value as default (not {} or [],
    which only say that a block may be left out)."""
    schema = yaml.safe_load(SCHEMA.read_text())
    return {
        key.rsplit(".", 1)[-1]
        for key, sub in schema_keys(schema).items()
        if "default" in sub and not isinstance(sub["default"], (dict, list))
    }


def _literal(node: ast.expr | None) -> bool:
    """A scalar written out in the source, as the schema's defaults are (None, a key left
    unset, is no value; ``nargs="*"`` flags' ``[]`` are lists of files, no config value)."""
    try:
        return node is not None and isinstance(ast.literal_eval(node), (str, int, float))
    except ValueError:
        return False


def _get_of(node: ast.expr, keys: set[str]) -> str | None:
    """The key of ``x.get("key"...)`` / ``x.setdefault("key"...)`` where it is in ``keys``."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    if node.func.attr not in ("get", "setdefault") or not node.args:
        return None
    key = node.args[0]
    return key.value if isinstance(key, ast.Constant) and key.value in keys else None


def restated_defaults(source: str, keys: set[str]) -> list[tuple[int, str]]:
    """``[(line, what)]`` where Python source states its own default for a config key in
    ``keys``: ``x.get("key", literal)``, ``x.get("key") or literal``, an argparse flag
    ``--key`` with ``default=literal``, and a ``DEFAULT_KEY = literal`` constant. A value
    read through ``dnnroofline.study.defaults`` is no literal, so it passes."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and _get_of(node, keys) and len(node.args) > 1:
            if _literal(node.args[1]):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            if _get_of(node.values[0], keys) and any(map(_literal, node.values[1:])):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            flags = [a.value for a in node.args if isinstance(a, ast.Constant)]
            names = {str(f).lstrip("-").replace("-", "_") for f in flags}
            named = {FLAG_KEYS.get(n, n) for n in names} & keys
            default = next((k.value for k in node.keywords if k.arg == "default"), None)
            if named and _literal(default):
                found.append((node.lineno, f"{'/'.join(flags)} default={ast.unparse(default)}"))
        elif isinstance(node, ast.Assign) and _literal(node.value):
            for target in node.targets:
                name = getattr(target, "id", "")
                if name.startswith("DEFAULT_") and name[len("DEFAULT_") :].lower() in keys:
                    found.append((node.lineno, f"{name} = {ast.unparse(node.value)}"))
    return sorted(found)


def test_the_default_scanner_finds_each_kind_of_restatement():
    planted = """
DEFAULT_STEPS = 3
DEFAULT_CACHE_BYTES = 64
def f(study, env, ap):
    study.get("runs", 3)
    env.get("nproc") or 1
    study.get("warmup_iters", default("study.warmup_iters"))
    study.get("models", [])
    env.get("threads") or 1
    ap.add_argument("--warmup-iters", type=int, default=5)
    ap.add_argument("--perf", default="perf")
    ap.add_argument("--ncu", default=default("ncu.executable"))
    ap.add_argument("--iters", type=int, default=None)
    ap.add_argument("--label", default="baseline")
    study.setdefault("image_size", -1)
"""
    found = restated_defaults(planted, defaulted_keys())
    assert [line for line, _ in found] == [2, 5, 6, 10, 11, 15], found
    assert found[3] == (10, "--warmup-iters default=5")


def test_every_rule_runs_its_commands_through_the_one_log_helper():
    for smk, rule, body in rule_blocks():
        if "shell:" not in body:
            assert "script:" in body, f"{smk}: rule {rule} runs neither shell: nor script:"
            continue
        shell = body.split("shell:", 1)[1]
        assert shell.lstrip().startswith("logged("), f"{smk}: rule {rule}'s shell: not logged()"
        assert "{log}" not in shell, f"{smk}: rule {rule} writes its own log plumbing"
        # a param glued to the next word only works while the param ends with a space
        glued = re.findall(r"\{params\.\w+\}[^\s\"]", shell)
        assert not glued, f"{smk}: rule {rule}: {glued}"


def test_every_measuring_job_has_a_benchmark():
    measuring = {
        rule for _, rule, body in rule_blocks() if "measurement=1" in body or rule == "env_info"
    }
    assert {"env_info", "ceilings", "train", "ncu_selftest", "ncu", "perf", "trace"} <= measuring
    for smk, rule, body in rule_blocks():
        if rule in measuring:
            bench = re.search(r"benchmark:\s*\n\s*(.+)", body)
            assert bench, f"{smk}: measuring rule {rule} has no benchmark:"
            # a .tsv under a benchmarks/ folder of results/, where no rule globs for results
            assert re.search(r"benchmarks.*\.tsv", bench.group(1)), bench.group(1)


def test_schema_defaults_are_stated_in_the_schema_alone():
    defaults = {key for key, sub in schema_keys(yaml.safe_load(SCHEMA.read_text())).items()
                if "default" in sub}  # fmt: skip
    texts = {p.name: p.read_text() for p in [*RULE_FILES, ROOT / "Snakefile"]}
    for name, text in texts.items():
        restated = re.findall(r'\.get\(\s*"(\w+)"\s*,', text)
        assert not restated, f"{name} restates a default of {restated}"
    # nor in the Python code: an entry script's flags, the package's fallbacks
    keys = defaulted_keys()
    assert {"warmup_iters", "iters", "runs", "nproc", "executable"} <= keys
    restated = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in PYTHON_FILES
        for line, what in restated_defaults(path.read_text(), keys)
    ]
    assert not restated, "defaults restated outside config/schema.yaml:\n" + "\n".join(restated)
    # what the rules read directly, the schema fills in for a config that leaves it out
    study = {"models": ["resnet18"], "precisions": ["fp32"], "batch_sizes": [2]}
    config = {"envs": {"local": {"device": "cpu"}}, "study": study}
    validate(config, str(SCHEMA), set_default=True)
    read = set(re.findall(r'config\["(\w+)"\]\["(\w+)"\]', "".join(texts.values())))
    assert {("perf", "executable"), ("ncu", "warmup_iters"), ("traces", "steps")} <= read
    for section, key in read:
        if f"{section}.{key}" in defaults:
            assert key in config[section], f"{section}.{key} not filled in by the schema"


def test_helpers_live_in_common_smk_and_the_rule_files_include_nothing():
    for smk in RULE_FILES:
        text = smk.read_text()
        assert not re.search(r"^include:", text, re.M), f"{smk.name} includes another file"
        if smk.name != "common.smk":
            helpers = re.findall(r"^def (\w+)", text, re.M)
            assert not helpers, f"{smk.name} defines helpers {helpers}: they go in common.smk"
    snakefile = (ROOT / "Snakefile").read_text()
    includes = re.findall(r'^include: "rules/(\w+\.smk)"', snakefile, re.M)
    assert includes[0] == "common.smk"
    assert sorted(includes) == sorted(p.name for p in RULE_FILES)


def test_common_smk_is_glue_and_its_logic_lives_in_the_package():
    """The targets, result paths, copied results, Slurm checks and job flags are in
    dnnroofline.study (unit-tested without Snakemake); common.smk only wraps them."""
    common = (ROOT / "rules" / "common.smk").read_text()
    assert len(common.splitlines()) <= 250
    # no file-system probe, subprocess or path spelled here: the package does them
    for probe in ("glob", "import subprocess", "os.path.exists", "os.path.isdir", "open(", "json."):
        assert probe not in common, f"common.smk uses {probe}"
    assert not re.search(r"\bdef run_path\b", common)  # one run_path: study/identity.py
    spelled = re.findall(r'f"results/\{', common)
    assert not spelled, f"common.smk spells result paths {spelled}: use dnnroofline.study"


def test_no_snakemake_internals_beyond_the_one_documented_use():
    for path in [*RULE_FILES, ROOT / "Snakefile"]:
        text = path.read_text()
        for internal in ('"_cores"', "__context__"):
            assert internal not in text, f"{path.name} uses {internal}"
        private = re.findall(r"\.(?!__)_\w+", text)  # a private attribute: _x, not __name__
        assert not private, f"{path.name} uses {private}"
    common = (ROOT / "rules" / "common.smk").read_text()
    assert common.count("workflow.dag.") == 1  # the jobs about to run: see envs_measured_now


def test_the_rules_holding_env_threads_are_those_the_cores_check_knows():
    from dnnroofline.study.jobs import HOLD_ENV_THREADS

    holding = {rule for _, rule, body in rule_blocks()
               if re.search(r"threads: (env_threads|job_threads)", body)}  # fmt: skip
    for smk in RULE_FILES:  # use rule X as Y inherits X's threads
        for base, name in re.findall(r"^use rule (\w+) as (\w+)", smk.read_text(), re.M):
            if base in holding:
                holding.add(name)
    assert holding == HOLD_ENV_THREADS
    common = (ROOT / "rules" / "common.smk").read_text()
    assert "jobs.HOLD_ENV_THREADS" in common  # the cores check reads that set


def test_config_readme_describes_every_key_of_the_schema():
    readme = (ROOT / "config" / "README.md").read_text()
    for key, sub in schema_keys(yaml.safe_load(SCHEMA.read_text())).items():
        if "properties" in sub or isinstance(sub.get("additionalProperties"), dict):
            continue  # a group of keys: its keys have rows
        if key.startswith(("envs.*.slurm.", "study.models.")):
            continue  # named in their parent's row
        assert f"`{key}`" in readme, f"config/README.md does not describe {key}"
    for example in (ROOT / "config" / "examples").glob("*.yaml"):
        assert example.name in readme, example.name


def test_catalog_usage_file_matches_the_workflow():
    usage = yaml.safe_load((ROOT / ".snakemake-workflow-catalog.yml").read_text())["usage"]
    assert set(usage) <= {"mandatory-flags", "software-stack-deployment", "report"}
    assert "--cores" in usage["mandatory-flags"]["flags"]
    every_rule_has_conda = all("conda:" in body for _, _, body in rule_blocks())
    assert usage["software-stack-deployment"]["conda"] is every_rule_has_conda is True
    assert usage["report"] is ("report:" in (ROOT / "Snakefile").read_text())


# Records each command a Python process starts, with the files of its caller's stack.
SUBPROCESS_SPY = """
import json, os, subprocess, traceback
_start = subprocess.Popen.__init__
def _recorded(self, args, *rest, **kwargs):
    argv = [args] if isinstance(args, (str, bytes)) else list(args)
    stack = [frame.filename for frame in traceback.extract_stack()[:-1]]
    with open(os.environ["SUBPROCESS_LOG"], "a") as log:
        log.write(json.dumps({"argv": [str(a) for a in argv], "stack": stack}) + "\\n")
    _start(self, args, *rest, **kwargs)
subprocess.Popen.__init__ = _recorded
"""


def commands_the_workflow_runs_when_parsed(tmp_path, cluster: str | None) -> list[list[str]]:
    """The commands a dry run starts from this checkout's code (the Snakefile, the rules, the
    package), not those of Snakemake or a library (Snakemake's Slurm plugin asks for sacct
    at every start); a fake sinfo on PATH lists one partition."""
    from workflow_helpers import BIN, snakemake, write_config

    spy = tmp_path / "spy"
    (spy / "bin").mkdir(parents=True)
    (spy / "sitecustomize.py").write_text(SUBPROCESS_SPY)
    (spy / "bin" / "sinfo").write_text("#!/bin/sh\necho 'debug|4|(null)|(null)'\n")
    (spy / "bin" / "sinfo").chmod(0o755)
    (spy / "bin" / "sacct").write_text("#!/bin/sh\n")  # no job of this study yet
    (spy / "bin" / "sacct").chmod(0o755)
    (spy / "bin" / "squeue").write_text("#!/bin/sh\n")  # no job of an earlier snakemake
    (spy / "bin" / "squeue").chmod(0o755)
    config = {
        "envs": {"local": {"device": "cpu", "threads": 1, "slurm": {"partition": "debug"}}},
        "study": {"models": ["resnet18"], "precisions": ["fp32"], "batch_sizes": [2], "runs": 1},
    }
    if cluster:
        config["cluster"] = cluster
    work = tmp_path / "work"
    work.mkdir()
    write_config(work, config)
    log = tmp_path / "commands.jsonl"
    path = os.pathsep.join([str(spy / "bin"), str(BIN), os.environ["PATH"]])
    env = {"PYTHONPATH": str(spy), "SUBPROCESS_LOG": str(log), "PATH": path}
    snakemake(work, "-n", "--cores", "1", env_extra=env)
    ours = []
    for line in log.read_text().splitlines() if log.exists() else []:
        started = json.loads(line)
        # who called subprocess (run, check_output or Popen itself): a library's own commands
        # (ctypes asking ldconfig while torch is imported) are not the workflow's
        callers = [f for f in started["stack"] if not f.endswith("subprocess.py")]
        caller = callers[-1]
        if caller.startswith(str(ROOT)) and ".venv" not in caller:
            ours.append(started["argv"])
    return ours


def test_no_command_runs_when_the_workflow_is_parsed_unless_on_slurm(tmp_path):
    assert commands_the_workflow_runs_when_parsed(tmp_path / "here", cluster=None) == []
    on_slurm = commands_the_workflow_runs_when_parsed(tmp_path / "slurm", cluster="slurm")
    # sinfo checks the envs' slurm blocks, squeue finds the jobs of an earlier, killed
    # snakemake, sacct the study's failed jobs (the report's)
    assert on_slurm == [
        ["sinfo", "-h", "-N", "-o", "%R|%c|%G|%f"],
        ["squeue", "--me", "-h", "-o", cluster.SQUEUE_FORMAT],
        ["sacct", "-X", "-D", "-n", "-P", "-S", "now-90days", "-o", cluster.SACCT_FORMAT],
    ]
