"""Wall time of the Vidur LLM-inference simulator against ours (rsi_env.sim) on the same shape of trace.

Trace: 1000 requests, Poisson arrivals at 200 req/s, prompt 32-128 tokens and output 16-64 tokens (uniform),
one replica, TP 1, vLLM scheduling, at most 256 running sequences.

Vidur (PyPI ``vidur`` 0.0.26, the Georgia Tech / Microsoft simulator) runs in a subprocess of its own
interpreter (``--vidur-python``), offline, on profiling data already laid out as a Hugging Face cache
in ``--vidur-cache-dir`` with its trained predictions cached there (the first, cold run trains them: ~13 min).
Vidur has Llama-3-8B profiles only for A100 here, so it simulates meta-llama/Llama-3-8B on a100; ours simulates
llama-3.1-8b on h100-sxm. Vidur's uniform length generator draws total = U(48, 192) and splits it 2:1 into
prompt:output, which gives the same marginals as ours (prompt 32-128, output 16-64), but correlated.

Printed: Vidur's median (of ``--vidur-repeat``) process wall time, split into import, set-up (loading the
cached execution-time predictions) and the event loop (``Simulator.run``); our ``simulate`` median of 5
after a warm-up; and the ratios vidur/ours. Run: ``python benchmarks/vidur_compare.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VIDUR_DRIVER = """
import json, time
t0 = time.perf_counter()
from vidur.config import SimulationConfig
from vidur.simulator import Simulator
from vidur.utils.random import set_seeds
t1 = time.perf_counter()
config = SimulationConfig.create_from_cli_args()
set_seeds(config.seed)
sim = Simulator(config)
t2 = time.perf_counter()
sim.run()
t3 = time.perf_counter()
print("VIDUR_TIMES " + json.dumps({"import_s": t1 - t0, "init_s": t2 - t1, "run_s": t3 - t2, "sim_end_s": sim._time}))
"""

COMPUTE_DATASET = "local/vidur-llama-3-8b-a100"
NETWORK_DATASET = "local/vidur-a100-dgx"


def vidur_args(cache_dir: Path, out_dir: str) -> list[str]:
    rf = "--random_forrest_execution_time_predictor_config_"
    opts = {
        "--seed": "42", "--cluster_config_num_replicas": "1", "--replica_config_model_name": "meta-llama/Llama-3-8B",
        "--replica_config_device": "a100", "--replica_config_network_device": "a100_dgx",
        "--replica_config_num_pipeline_stages": "1", "--replica_config_tensor_parallel_size": "1",
        "--global_scheduler_config_type": "round_robin", "--replica_scheduler_config_type": "vllm",
        "--vllm_scheduler_config_batch_size_cap": "256", "--request_generator_config_type": "synthetic",
        "--synthetic_request_generator_config_num_requests": "1000", "--length_generator_config_type": "uniform",
        "--uniform_request_length_generator_config_min_tokens": "48",
        "--uniform_request_length_generator_config_max_tokens": "192",
        "--uniform_request_length_generator_config_prefill_to_decode_ratio": "2",
        "--interval_generator_config_type": "poisson", "--poisson_request_interval_generator_config_qps": "200",
        "--execution_time_predictor_config_type": "random_forrest", rf + "model_profiling_dataset": COMPUTE_DATASET,
        rf + "network_profiling_dataset": NETWORK_DATASET, rf + "cache_dir": str(cache_dir),
        rf + "prediction_max_batch_size": "256", "--metrics_config_output_dir": out_dir,
    }
    flags = ["--no-metrics_config_write_metrics", "--no-metrics_config_enable_chrome_trace",
             "--no-metrics_config_store_plots"]
    return [x for kv in opts.items() for x in kv] + flags


def run_vidur(python: str, cache_dir: Path, repeat: int) -> dict[str, float] | None:
    """Median phase times of ``repeat`` Vidur processes; None (with a message) if Vidur is not usable here."""
    if not Path(python).exists():
        print(f"vidur: interpreter {python} not found; skipping Vidur")
        return None
    if subprocess.run([python, "-c", "import vidur.simulator"], capture_output=True).returncode != 0:
        print(f"vidur: package 'vidur' cannot be imported by {python}; skipping Vidur")
        return None
    snap = cache_dir / "profiling_data" / "compute" / f"datasets--{COMPUTE_DATASET.replace('/', '--')}"
    if not snap.is_dir():
        print(f"vidur: no offline profiling data at {snap}; skipping Vidur")
        return None
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    runs: list[dict[str, float]] = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as out:
            t0 = time.perf_counter()
            proc = subprocess.run([python, "-c", VIDUR_DRIVER, *vidur_args(cache_dir, out)],
                                  capture_output=True, text=True, env=env)
            wall = time.perf_counter() - t0
        line = next((x for x in proc.stdout.splitlines() if x.startswith("VIDUR_TIMES ")), None)
        if proc.returncode != 0 or line is None:
            print(f"vidur: run failed (rc {proc.returncode}):\n{proc.stderr[-2000:]}")
            return None
        runs.append({"process_s": wall, **json.loads(line.split(" ", 1)[1])})
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def run_ours(repeat: int = 5) -> tuple[float, float]:
    """Median wall seconds of our ``simulate`` (after one warm-up) and the simulated duration."""
    from rsi_env.engine.workload import Workload
    from rsi_env.sim import simulate

    w = Workload.from_dict({"name": "vidur_match", "seed": 1, "requests": 1000,
                            "prompt_tokens": {"dist": "uniform", "min": 32, "max": 128},
                            "output_tokens": {"dist": "uniform", "min": 16, "max": 64},
                            "arrival": {"process": "poisson", "rate": 200}})
    tel = simulate({"max_num_seqs": 256}, "llama-3.1-8b", "h100-sxm", w)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        simulate({"max_num_seqs": 256}, "llama-3.1-8b", "h100-sxm", w)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), float(tel.duration_s)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--vidur-python", default="/tmp/vidur-venv/bin/python")
    p.add_argument("--vidur-cache-dir", type=Path, default=Path("/tmp/vidur-work/.vidur_cache"))
    p.add_argument("--vidur-repeat", type=int, default=3)
    args = p.parse_args()
    ours, ours_sim = run_ours()
    print(f"ours  (llama-3.1-8b, h100-sxm): simulate() median {ours * 1e3:.1f} ms; simulated {ours_sim:.2f} s")
    v = run_vidur(args.vidur_python, args.vidur_cache_dir, args.vidur_repeat)
    if v is None:
        sys.exit(0)
    print(f"vidur (Llama-3-8B, a100): process {v['process_s']:.2f} s = import {v['import_s']:.2f} s"
          f" + set-up {v['init_s']:.2f} s + Simulator.run {v['run_s'] * 1e3:.1f} ms;"
          f" simulated {v['sim_end_s']:.2f} s (median of {args.vidur_repeat})")
    print(f"ratio vidur/ours: whole process {v['process_s'] / ours:.0f}x, event loop alone {v['run_s'] / ours:.1f}x")


if __name__ == "__main__":
    main()
