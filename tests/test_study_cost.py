"""What the study itself cost: Snakemake benchmark files and the timed runs."""

import pytest

from dnnroofline.errors import InputError
from dnnroofline.study.cost import benchmark_stage, read_benchmark, study_cost

# The header and a row as Snakemake 9 writes them (two repeats: a rule with repeat()).
HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def write(path, *rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + "".join(rows))
    return str(path)


def test_benchmark_files_give_stage_and_mean_figures(tmp_path):
    ceil = write(
        tmp_path / "results/local/benchmarks/ceilings.tsv",
        "10.0\t0:00:10\t200.5\t900\t150\t160\t0\t1\t180\t18.0\n",
        "12.0\t0:00:12\t210.5\t900\t150\t160\t0\t1\t180\t20.0\n",
    )
    rec = read_benchmark(ceil)
    assert rec["stage"] == "ceilings"
    assert rec["wall_s"] == pytest.approx(11.0)
    assert rec["cpu_s"] == pytest.approx(19.0)
    assert rec["max_rss_mb"] == pytest.approx(205.5)
    assert benchmark_stage("results/gpu/benchmarks/ncu/gpu_resnet50_amp_bs64.tsv") == "ncu"
    assert benchmark_stage("results/benchmarks/complexity/resnet18_bs2.tsv") == "complexity"


def test_short_jobs_without_memory_figures_still_count(tmp_path):
    # jobs shorter than psutil's first sample have NA memory figures
    path = write(
        tmp_path / "results/benchmarks/complexity/resnet18_bs2.tsv",
        "1.5\t0:00:01\tNA\tNA\tNA\tNA\tNA\tNA\tNA\tNA\n",
    )
    rec = read_benchmark(path)
    assert rec["wall_s"] == 1.5 and rec["max_rss_mb"] is None and rec["cpu_s"] is None


def test_cost_per_stage_with_timed_runs_last():
    benchmarks = [
        {"stage": "complexity", "wall_s": 2.0, "cpu_s": 1.0, "max_rss_mb": 300.0},
        {"stage": "complexity", "wall_s": 3.0, "cpu_s": None, "max_rss_mb": 500.0},
        {"stage": "ceilings", "wall_s": 40.0, "cpu_s": 70.0, "max_rss_mb": 200.0},
    ]
    runs = [
        {"wall_s": 5.0, "user_s": 8.0, "sys_s": 1.0, "max_rss_bytes": 400e6},
        {"wall_s": 7.0, "user_s": 10.0, "sys_s": 1.0, "max_rss_bytes": 450e6},
        {"status": "error", "message": "no timings"},
    ]
    rows = study_cost(benchmarks, runs)
    assert [r["stage"] for r in rows] == ["ceilings", "complexity", "timed runs"]
    cx = rows[1]
    assert (cx["jobs"], cx["wall_s"], cx["cpu_s"], cx["max_rss_mb"]) == (2, 5.0, 1.0, 500.0)
    timed = rows[2]
    assert (timed["jobs"], timed["wall_s"], timed["cpu_s"]) == (2, 12.0, 20.0)
    assert timed["max_rss_mb"] == pytest.approx(450.0)


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("results/benchmarks/x.tsv", "", "is not a Snakemake benchmark file"),
        ("results/benchmarks/x.tsv", "a\tb\n1\t2\n", "is not a Snakemake benchmark file"),
        ("results/elsewhere/x.tsv", HEADER + "1\t0\t1\t1\t1\t1\t1\t1\t1\t1\n", "benchmarks/"),
    ],
)
def test_bad_benchmark_files_are_named(tmp_path, name, text, message):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    with pytest.raises(InputError, match=message) as err:
        read_benchmark(str(path))
    assert str(path) in str(err.value)
    with pytest.raises(InputError, match="cannot read"):
        read_benchmark(str(tmp_path / "results/benchmarks/missing.tsv"))
