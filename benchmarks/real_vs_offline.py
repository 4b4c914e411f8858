"""The real tier's throughput against vLLM's own offline throughput (``LLM.generate``) on the same requests.

The real tier drives vLLM's ``AsyncLLM`` the way a serving client does (per-request streams, the workload's
arrival schedule); vLLM's offline API hands the whole batch to ``LLM.generate``. On a burst workload both see
every request at t=0, so a faithful driver must reach the same output tokens/s: the check of issue 4 is that they
agree within 3 %. Both use the same engine flags (the real tier's resolved ``max_num_seqs`` and
``max_num_batched_tokens``, passed explicitly so the LLM class's own defaults do not differ), dummy weights, the
workload's exact token ids, greedy sampling, ``ignore_eos`` with fixed output lengths. Each side starts its engine
once, warms up, and measures the workload ``--repeats`` times with the prefix cache emptied before each (the same
prompts sent again would otherwise skip their prefill: the driver resets it too); the medians are compared.

With two GPUs (``--gpus 0,1``) the two sides run at once, each on its own GPU; with one they run one after the
other. Prints one JSON object; rows go to ``--out``. Run from the repository root on a GPU machine:
``python benchmarks/real_vs_offline.py --model llama-3.1-8b --workload configs/calibration/burst_256.yaml --gpus 0,1``.
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
from typing import Any

import yaml

FLAGS = {"max_num_seqs": 1024, "max_num_batched_tokens": 8192}


def _offline(model: str, workload: str, repeats: int, out: Path, flags: dict[str, Any]) -> None:
    """Child: time ``LLM.generate`` on the workload's requests, ``repeats`` times after a warm-up."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from rsi_env.engine.model import load_model
    from rsi_env.engine.workload import Workload

    spec = load_model(model)
    tmp = Path(tempfile.mkdtemp(prefix="rsi-model-"))
    (tmp / "config.json").write_text(json.dumps(spec.to_hf_config()))
    t0 = time.perf_counter()
    llm = LLM(model=str(tmp), load_format="dummy", skip_tokenizer_init=True, generation_config="vllm", seed=0,
              **flags)
    startup = time.perf_counter() - t0
    trace = Workload.from_yaml(workload).trace()
    prompts = [TokensPrompt(prompt_token_ids=trace.prompt_token_ids(i, spec.vocab_size)) for i in range(len(trace))]
    params = [SamplingParams(max_tokens=int(n), min_tokens=int(n), ignore_eos=True, temperature=0.0,
                             detokenize=False) for n in trace.output_len]
    llm.generate(prompts[:16], [SamplingParams(max_tokens=16, ignore_eos=True, detokenize=False)] * 16,
                 use_tqdm=False)
    for r in range(repeats):
        llm.reset_prefix_cache()  # as the driver does before each workload: the same prompts must not hit the cache
        t = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        dt = time.perf_counter() - t
        produced = sum(len(o.outputs[0].token_ids) for o in outs)
        row = {"side": "offline", "repeat": r, "duration_s": dt, "out_tok_per_s": produced / dt,
               "output_tokens": produced, "startup_s": startup}
        with open(out, "a") as f:
            f.write(json.dumps(row) + "\n")


def _launch(cmd: list[str], gpu: str | None, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return subprocess.Popen(cmd, stdout=open(log, "ab"), stderr=subprocess.STDOUT, env=env, start_new_session=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama-3.1-8b")
    p.add_argument("--workload", default="configs/calibration/burst_256.yaml")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--gpus", default="0", help="one GPU: sequential; two (0,1): the sides run at once")
    p.add_argument("--out", default="real_vs_offline", help="folder for the JSON-lines rows and logs")
    p.add_argument("--timeout-s", type=float, default=400)
    p.add_argument("--set", action="append", default=[], metavar="FLAG=VALUE", help="another engine flag, both sides")
    p.add_argument("--offline-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows_off, rows_real = out / "offline.jsonl", out / "real.jsonl"
    flags = dict(FLAGS)
    for item in args.set:
        k, _, v = item.partition("=")
        flags[k] = yaml.safe_load(v)
    if args.offline_child:
        _offline(args.model, args.workload, args.repeats, rows_off, flags)
        return 0
    gpus = [g for g in args.gpus.split(",") if g]
    real_cmd = [sys.executable, "-m", "rsi_env.real.vllm_driver", "--model", args.model, "--out", str(rows_real),
                "--usage-context", "llm"] + [a for k, v in flags.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    real_cmd += [a for _ in range(args.repeats) for a in ("--workload", args.workload)]
    off_cmd = [sys.executable, __file__, "--offline-child", "--model", args.model, "--workload", args.workload,
               "--repeats", str(args.repeats), "--out", str(out)] + [a for s in args.set for a in ("--set", s)]
    t0 = time.perf_counter()
    if len(gpus) >= 2:
        procs = [_launch(real_cmd, gpus[0], out / "real.log"), _launch(off_cmd, gpus[1], out / "offline.log")]
    else:
        procs = []
        for cmd, log in ((real_cmd, "real.log"), (off_cmd, "offline.log")):
            proc = _launch(cmd, gpus[0] if gpus else None, out / log)
            proc.wait(timeout=args.timeout_s)
            procs.append(proc)
    for proc in procs:
        proc.wait(timeout=max(1.0, args.timeout_s - (time.perf_counter() - t0)))

    def med(path: Path, key: str) -> tuple[float | None, list[float]]:
        if not path.exists():
            return None, []
        vals = []
        for line in path.read_text().splitlines():
            row: dict[str, Any] = json.loads(line)
            vals.append(float(row["telemetry"][key] if "telemetry" in row else row[key]))
        return (statistics.median(vals) if vals else None), vals

    real, real_all = med(rows_real, "out_tok_per_s")
    off, off_all = med(rows_off, "out_tok_per_s")
    report = {"model": args.model, "workload": args.workload, "flags": flags, "gpus": gpus,
              "real_tier_out_tok_per_s": real, "offline_out_tok_per_s": off,
              "real_tier_runs": real_all, "offline_runs": off_all,
              "ratio_real_over_offline": (real / off) if real and off else None,
              "within_3pct": (abs(real / off - 1.0) <= 0.03) if real and off else None,
              "return_codes": [proc.returncode for proc in procs]}
    print(json.dumps(report, indent=2))
    return 0 if report["within_3pct"] is not None else 1


if __name__ == "__main__":
    sys.exit(main())
