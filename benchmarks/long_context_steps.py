"""`long_context`'s real steps, each rebuilt to its exact composition and priced by the simulator's cost model.

`rsi_env.calibrate.step_groups` leaves `long_context` out: its decode requests' contexts are far from any mean. But its
schedule can be rebuilt exactly. The workload's prompts are seeded, vLLM's FCFS scheduler computes them in arrival
order, and the step trace says how many prompt tokens, prompt requests and decode requests each step ran: walking the
prompts in order through the steps' prompt tokens gives each chunk and the context before it; a request decodes from
the step after its last chunk until its output is done, so the decode requests and their contexts follow too. A run
counts as rebuilt when every step's rebuilt prompt and decode requests match the trace's (a configuration with
``long_prefill_token_threshold`` or one that preempts is not followed).

Each rebuilt step's gap before its output is set beside the cost model's price for the gap (its kernels and device
overhead against the next step's launches and the engine core's work: `step_groups.price_gap`, as for a group), per
model and kind of step: ``big`` (more than 2,048 tokens: a prompt chunk past every CUDA graph), ``decode`` (decode
requests only, a decode step next; binned by requests) and ``mixed`` (a small prompt chunk with decodes). Prints
how many runs were rebuilt, then per group the steps, the median real and priced gap and their median ratio.

Read with care: under async scheduling a step's kernels can start inside the previous step's gap (the next step is
launched before a step's output is emitted), so a big chunk's own gap is shorter than its kernels' time.

``python benchmarks/long_context_steps.py [CALIBRATION.yaml]`` (default: the shipped calibration; every
`long_context` row under ``data/measurements``).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from rsi_env.calibrate.step_groups import price_gap
from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import load_hardware
from rsi_env.engine.model import load_model
from rsi_env.engine.workload import Workload
from rsi_env.sim.calibration import Calibration, load_calibration
from rsi_env.sim.cost import StepCost

ROOT = Path(__file__).resolve().parents[1]
BIG = 2048
DECODE_BINS = ((1, 4), (4, 8), (8, 16), (16, 64))


def rebuild(row: dict[str, Any]) -> list[dict[str, Any] | None] | None:
    """Each step's composition (``None`` for the trace's trailing unknown steps), or None if the rebuild disagrees
    with the trace anywhere: ``chunks`` (tokens, context before them), ``decodes`` and ``decode_ctx`` (tokens the
    decode requests read)."""
    steps = row["steps"]
    trace = Workload.from_dict(row["workload_spec"]).trace()
    order = np.argsort(trace.arrival_s, kind="stable")
    prompt, output = trace.prompt_len[order].astype(int), trace.output_len[order].astype(int)
    done = np.zeros(len(prompt), int)  # prompt tokens computed
    gen = np.zeros(len(prompt), int)  # tokens generated
    head = 0  # the first request with prompt tokens left
    out: list[dict[str, Any] | None] = []
    for k in range(len(steps["t"])):
        todo, n_prompt, n_dec = (int(steps[c][k]) for c in ("prefill_tokens", "prefill_reqs", "decode_reqs"))
        if n_dec < 0:
            out.append(None)
            continue
        decoding = [i for i in range(head) if done[i] == prompt[i] and 0 < gen[i] < output[i]]
        chunks = []
        i = head
        while todo > 0 and i < len(prompt):
            take = min(todo, int(prompt[i] - done[i]))
            chunks.append((take, int(done[i])))
            done[i] += take
            todo -= take
            if done[i] == prompt[i]:
                gen[i] = 1  # the first token, sampled at the end of the last chunk
                i += 1
        head = i
        if len(decoding) != n_dec or len(chunks) != n_prompt:
            return None
        out.append({"chunks": chunks, "decodes": n_dec, "decode_ctx": float(sum(prompt[j] + gen[j] for j in decoding))})
        for j in decoding:
            gen[j] += 1
    return out


def price(cost: StepCost, step: dict[str, Any], nxt: dict[str, Any]) -> float:
    """The gap before ``step``'s output (`rsi_env.calibrate.step_groups.price_gap`), with each chunk's own context; a chunk
    with none before it is a request the step admits."""
    chunks = step["chunks"]
    reqs = step["decodes"] + len(chunks)
    return price_gap(cost, sum(a for a, _ in chunks) + step["decodes"], reqs, step["decode_ctx"],
                     sum(cost.chunk_pairs(a, b) for a, b in chunks), float(sum(b for _, b in chunks)), not chunks,
                     (sum(a for a, _ in nxt["chunks"]) + nxt["decodes"], not nxt["chunks"]), reqs,
                     sum(1 for _, b in chunks if b == 0))


def kind(step: dict[str, Any], nxt: dict[str, Any]) -> str | None:
    tokens = sum(a for a, _ in step["chunks"]) + step["decodes"]
    if tokens > BIG:
        return "big"
    if step["chunks"]:
        return "mixed"
    if nxt["chunks"]:
        return None  # the next step's launch shows in this gap: a launch stage matter
    return next((f"decode {a}-{b - 1}" for a, b in DECODE_BINS if a <= step["decodes"] < b), None)


def main(argv: list[str]) -> int:
    cal = Calibration.from_dict(yaml.safe_load(Path(argv[0]).read_text())) if argv else load_calibration("h200", "0.26")
    table: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    rebuilt = runs = 0
    for path in sorted((ROOT / "data" / "measurements").glob("h200*/*.jsonl")):
        for line in filter(str.strip, path.read_text().splitlines()):
            row = json.loads(line)
            steps = row.get("steps") or {}
            if row["workload"] != "long_context" or row["telemetry"].get("error") or max(
                    steps.get("decode_reqs") or [-1]) < 0:
                continue
            runs += 1
            comp = rebuild(row)
            if comp is None:
                continue
            rebuilt += 1
            flags = row["flags"]
            if flags.get("enforce_eager") or flags.get("kv_cache_dtype") or flags.get("quantization") or int(
                    (row.get("resolved") or {}).get("tensor_parallel_size", 1)) > 1:
                continue  # one GPU, bf16, CUDA graphs: the terms the groups read
            spec, hw = load_model(row["model"]), load_hardware(row["hardware"])
            cost = StepCost(spec, hw, EngineConfig.from_dict(flags).resolve(spec, hw, row["vllm_version"]), cal)
            t = np.asarray(steps["t"], dtype=float)
            for k in range(1, len(t) - 1):
                step, nxt = comp[k], comp[k + 1]
                if step is None or nxt is None or t[k] - t[k - 1] > 0.4:
                    continue
                group = kind(step, nxt)
                if group is not None:
                    table[(row["model"], group)].append((t[k] - t[k - 1], price(cost, step, nxt)))
    print(json.dumps({"calibration": cal.id, "long_context_runs": runs, "rebuilt_exactly": rebuilt}))
    for (model, group), v in sorted(table.items()):
        a = np.asarray(v)
        print(json.dumps({"model": model, "steps": group, "n": len(a), "real_ms": round(float(np.median(a[:, 0])) * 1e3, 2),
                          "priced_ms": round(float(np.median(a[:, 1])) * 1e3, 2),
                          "real_over_priced": round(float(np.median(a[:, 0] / a[:, 1])), 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
