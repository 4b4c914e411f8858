"""Ray scale-out on a local two-worker Ray: remote measurements equal local ones, and searches spread over it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from baselines.distributed import gpus_per_measurement, measure_remote, ray_measurer, remote_measure
from rsi_env.search.evaluator import Evaluator
from rsi_env.search.optuna_tpe import optuna_tpe
from rsi_env.search.random_search import random_search


@pytest.fixture(scope="module")
def ray_two_workers():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_measure_remote_returns_what_the_tier_measures_in_process(ray_two_workers):
    ev = Evaluator("RSI/Batching-v0", seed=1000, budget=1)
    env = ev.env
    cfg = env.config.replace(max_num_seqs=256)
    ref = measure_remote("sim", env.tier.engine_version, cfg, env.model, env.hardware, env.workloads)
    remote = ray_two_workers.get(ref)
    assert [t.to_dict() for t in remote] == [t.to_dict() for t in env.tier.measure_all(cfg, env.model, env.hardware,
                                                                                       env.workloads)]


@pytest.mark.parametrize("search", [random_search, optuna_tpe], ids=lambda f: f.__name__)
def test_searches_spread_trials_over_workers(ray_two_workers, search):
    remote = Evaluator("RSI/Batching-v0", seed=1000, budget=6, measurer=ray_measurer)
    search(remote, np.random.default_rng(3), 2)
    local = Evaluator("RSI/Batching-v0", seed=1000, budget=6)
    search(local, np.random.default_rng(3), 2)
    assert remote.measurements == 6 and remote.progress.history == local.progress.history


def test_a_real_tier_measurement_asks_for_a_gpu(ray_two_workers):
    assert gpus_per_measurement("sim") == 0 and gpus_per_measurement("real") == 1
    assert remote_measure("real")._default_options["num_gpus"] == 1
    assert remote_measure("sim")._default_options["num_gpus"] == 0


def test_import_rsi_env_stays_light():
    code = ("import sys, rsi_env, rsi_env.wrappers, rsi_env.search.evaluator, rsi_env.search.random_search, "
            "baselines.distributed, baselines.run_all\n"
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'ray', 'torch', 'optuna', 'stable_baselines3', "
            "'sb3_contrib'})\nprint(heavy)\nassert not heavy, heavy")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stdout + proc.stderr
