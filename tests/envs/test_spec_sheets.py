"""Every env's spec sheet (its class docstring) states its task's numbers as the task data has them, and a
task's data cannot change under the same id: what an agent is paid for is the id's contract."""

from __future__ import annotations

import hashlib
import importlib
import json
from pathlib import Path

import gymnasium as gym
import pytest
import yaml

import rsi_env  # noqa: F401  (registers the envs)
from rsi_env.engine.task import load_task

TASK_DIR = Path(rsi_env.__file__).parent / "catalog" / "tasks"

IDS = sorted(k for k in gym.registry if k.startswith("RSI/"))

# sha256 (12) of each task's data as parsed, less its entry_point. A change of a task's rewards or dynamics is a new
# version of its id (Gymnasium's rule): register RSI/<Task>-v<n+1> with the new data rather than update this table.
TASK_DATA = {
    "RSI/Batching-v0": "7bdb60655cc9",  # + engines.sglang, on sim then real too (kwarg-only: vLLM task as it was)
    "RSI/BugFix-v0": "3b3ad18f5625",
    "RSI/DayZero-v0": "8c5edd6539ae",
    "RSI/DayZero-v1": "010a966291b2",
    "RSI/KVCache-v0": "da4e1eceee79",  # + engines.sglang (kwarg-only: the vLLM task is as it was)
    "RSI/KVCache-v1": "c6a86344c265",  # + engines.sglang (kwarg-only; real too); + bounds: the co-tenant cap binds
    #                                   (a reward hole closed in place: play within the cap scores as it did)
    "RSI/Kernel-v0": "5060483498c6",
    "RSI/Kernel-v1": "53ad9b79e1cc",
    "RSI/Parallelism-v0": "507fa222a65c",  # + variant x2, + engines.sglang (kwarg-only, sim and real: default as was)
    "RSI/PrefixCache-v0": "a5f18f941845",  # + engines.sglang, on sim then real too (kwarg-only: vLLM task as it was)
    "RSI/Quantization-v0": "f578924f744a",
    "RSI/Scheduler-v0": "dc5e5ba0fa63",
    "RSI/Scheduler-v1": "97e686e37391",
    "RSI/VLLMBugFix-v0": "80e83dcb2789",
}


def _data_hash(task_id: str) -> str:
    """The hash of what the id promises: the task's data, less ``entry_point`` (where its code lives)."""
    raw = next(yaml.safe_load(p.read_text()) for p in sorted(TASK_DIR.glob("*.yaml"))
               if yaml.safe_load(p.read_text())["id"] == task_id)
    raw.pop("entry_point")
    return hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()[:12]


def _doc(task_id: str) -> str:
    module, name = load_task(task_id).entry_point.split(":")
    return " ".join((getattr(importlib.import_module(module), name).__doc__ or "").split())


def _ms(ms: float) -> str:
    return f"{ms / 1000:g} s" if ms >= 1000 else f"{ms:g} ms"


@pytest.mark.parametrize("task_id", IDS)
def test_the_spec_sheet_states_the_task_data(task_id: str):
    t, doc = load_task(task_id), _doc(task_id)
    facts = [f"``max_steps`` ({t.max_steps}) steps", f"At most {t.max_measurements} measurements",
             f"x {t.cost_per_gpu_second:g}"]
    if t.load and t.load.get("process") == "closed":
        facts.append(f"{t.load['concurrency']} concurrent users")
    if "ttft_ms" in t.slo and t.metric != "ttft_p99":
        facts.append(f"TTFT <= {_ms(t.slo['ttft_ms'])}")
    if "tpot_ms" in t.slo:
        facts.append(f"TPOT <= {_ms(t.slo['tpot_ms'])}")
    if "default to" in doc:
        facts.append(f"default to {t.default_model} on {t.default_hardware}")
    if "beats the defaults by" in doc:
        facts.append(f"beats the defaults by {t.improvement_threshold * 100:g}%")
    missing = [f for f in facts if f not in doc]
    assert not missing, f"{task_id}'s spec sheet lacks {missing} (its task data)"


@pytest.mark.parametrize("task_id", IDS)
def test_a_task_s_data_is_its_id_s_contract(task_id: str):
    assert _data_hash(task_id) == TASK_DATA[task_id], (
        f"{task_id}'s task data changed: a change of its rewards or dynamics is a new version of the id")
