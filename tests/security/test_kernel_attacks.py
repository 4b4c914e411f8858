"""RSI/Kernel's red team: kernels that try to do their work where the harness's clock cannot see it.

Each attack is a ``kernel.py`` for ``silu_and_mul``, run through the real measurement (the hidden harness in a
fresh bubblewrap sandbox) by the env itself: a bench, whose result must be refused and pay
nothing, then a submit, which must fail. One env episode per attack serves every assert about it. The holes
the ops of v1 open (an in-place result with no output to poison, a scale that could be faked, integer answers
that could be kept for the public inputs) are attacked through one measurement each.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import pytest

import rsi_env  # noqa: F401  (registers the envs)
from rsi_env.sandbox.backends import BACKENDS
from rsi_env.tasks.kernel import tier as kernel_tier
from rsi_env.tasks.kernel.env import model_sizes
from rsi_env.tasks.kernel.reference import SOLUTION
from rsi_env.tasks.kernel.tier import measure_kernel

BACKEND = "bubblewrap"
pytestmark = pytest.mark.skipif(BACKENDS[BACKEND].unavailable() is not None, reason=f"{BACKEND} is not usable here")
SIZES = model_sizes("llama-3.1-8b")

_SILU = "    d = x.shape[-1] // 2\n    out.copy_(F.silu(x[:, :d]) * x[:, d:])\n"

# The timed call does nothing; the output is computed inside torch.save, which the worker used to call
# after the clock stopped to hand the checked set back (the 175x "speedup" of issue 26).
PATCHED_SAVE = ("import torch, torch.nn.functional as F\n_save = torch.save\n"
                "def _late(obj, *args, **kw):\n"
                "    try:\n"
                "        x, out = obj['inputs']['x'], obj['outputs']['out']\n"
                "        d = x.shape[-1] // 2\n"
                "        out.copy_(F.silu(x[:, :d]) * x[:, d:])\n"
                "    except Exception:\n"
                "        pass\n"
                "    return _save(obj, *args, **kw)\n"
                "torch.save = _late\n"
                "def silu_and_mul(out, x):\n    pass\n")

# The timed call only queues the work; a thread does it after run returns (0.2 s after each burst of calls
# begins: past the reply, and past the stop of the worker's tree that follows it, however loaded the machine), and
# the worker is held back (its next request waits, inside json.loads) until the queue is drained. Work a thread
# finishes between the reply and the stop is timed: only work deferred past the stop could be free.
BACKGROUND_THREAD = ("import json, queue, threading, time\nimport torch.nn.functional as F\n_todo = queue.Queue()\n"
                     "def _work():\n    idle = True\n    while True:\n        out, x = _todo.get()\n"
                     "        if idle:\n            time.sleep(0.2)\n"
                     + _SILU.replace("    ", "        ") + "        _todo.task_done()\n"
                     "        idle = _todo.unfinished_tasks == 0\n"
                     "threading.Thread(target=_work, daemon=True).start()\n_loads = json.loads\n"
                     "def _held(*args, **kw):\n    _todo.join()\n    return _loads(*args, **kw)\n"
                     "json.loads = _held\n"
                     "def silu_and_mul(out, x):\n    _todo.put((out, x))\n")

# Every input set the worker builds (ops.make_inputs, outside the clock) gets its result computed there and
# kept by content; the timed call only copies a kept result, and bets on always finding one.
CONTENT_CACHE = ("import ops, torch.nn.functional as F\n_memo = {}\n_make = ops.make_inputs\n"
                 "def _key(x):\n    return (tuple(x.shape), x.reshape(-1)[:32].float().tolist())\n"
                 "def _ahead(shape, *args, **kw):\n    inp = _make(shape, *args, **kw)\n    x = inp['x']\n"
                 "    if shape['op'] == 'silu_and_mul':\n        d = x.shape[-1] // 2\n"
                 "        _memo[repr(_key(x))] = F.silu(x[:, :d]) * x[:, d:]\n    return inp\n"
                 "ops.make_inputs = _ahead\n"
                 "def silu_and_mul(out, x):\n    hit = _memo.get(repr(_key(x)))\n"
                 "    if hit is not None:\n        out.copy_(hit)\n")

# Results kept by the address of the input: right only where every call brings new memory.
POINTER_CACHE = ("import torch.nn.functional as F\n_memo = {}\n"
                 "def silu_and_mul(out, x):\n    key = (x.data_ptr(), tuple(x.shape))\n"
                 "    if key in _memo:\n        out.copy_(_memo[key])\n        return\n" + _SILU
                 + "    _memo[key] = out.clone()\n")

# The first call of each run writes the worker's "done" reply itself (the reply file found through gc) and
# swallows the worker's own, then does the work: the harness's clock stops at the forged reply.
FORGED_REPLY = ("import gc, io, json, sys\nimport torch.nn.functional as F\n_done = set()\n"
                "def _replies():\n    for o in gc.get_objects():\n"
                "        if isinstance(o, io.TextIOWrapper) and 'w' in getattr(o, 'mode', '') and not o.closed "
                "and o.fileno() > 2:\n            return o\n"
                "_F = _replies()\n"
                "def _forge():\n    turn = sys._getframe(2).f_locals['turn'][0]\n"
                "    if turn in _done:\n        return\n    _done.add(turn)\n    f = _F\n"
                "    f.write(json.dumps({'turn': turn, 'ok': True}) + '\\n')\n    f.flush()\n"
                            "    def swallow(text, f=f):\n        del f.write\n        return len(text)\n"
                "    f.write = swallow\n"
                "def silu_and_mul(out, x):\n    _forge()\n" + _SILU)

# A process of its own session (out of the worker's process group), forked at import so that it shares the
# worker's mappings, computes each set it is told about 0.2 s later: after the reply, and after the stop.
DETACHED_PROCESS = ("import ctypes, json, os, time, torch\nimport torch.nn.functional as F\n_r, _w = os.pipe()\n"
                    "def _view(ptr, size, dtype):\n"
                    "    n = size[0] * size[1] * torch.empty((), dtype=dtype).element_size()\n"
                    "    return torch.frombuffer((ctypes.c_char * n).from_address(ptr), dtype=dtype).view(size)\n"
                    "if os.fork() == 0:\n    os.setsid()\n    os.close(_w)\n"
                    "    for line in os.fdopen(_r):\n        xp, op, rows, cols, name = json.loads(line)\n"
                    "        time.sleep(0.2)\n        dt = getattr(torch, name)\n"
                    "        x, out = _view(xp, (rows, cols), dt), _view(op, (rows, cols // 2), dt)\n"
                    + _SILU.replace("    ", "        ") + "    os._exit(0)\n"
                    "os.close(_r)\n_pipe = os.fdopen(_w, 'w', buffering=1)\n"
                    "def silu_and_mul(out, x):\n"
                    "    _pipe.write(json.dumps([x.data_ptr(), out.data_ptr(), *x.shape, str(x.dtype)[6:]]) + '\\n')\n")

# Each attack and what the harness finds: deferred work leaves the poison in place; replayed results are wrong.
HANGING_CALL = """
import time


def silu_and_mul(out, x):
    time.sleep(3600)
"""

# Deferred work leaves the poison in the timed sets; under load the drawn set's full check (its outputs unwritten,
# NaN) can be the one that meets it first: either refusal is the measurement's.
_DEFERRED = ("NaN poison", "are NaN on")
ATTACKS = {"patched save": (PATCHED_SAVE, ("NaN poison",)), "background thread": (BACKGROUND_THREAD, _DEFERRED),
           "content cache": (CONTENT_CACHE, ("NaN poison",)),
           "pointer cache": (POINTER_CACHE, ("differs from the float64 reference",)),
           # Under load the early reply can also meet the drawn set's full check first: its outputs unwritten.
           "forged reply": (FORGED_REPLY, ("NaN poison", "out of turn", "are NaN on")),
           "detached process": (DETACHED_PROCESS, _DEFERRED),
           # A kernel that never returns ends its measurement within the harness's reply deadline (10 s), or
           # the step's 15 s for the agent's code where the sandbox's start took the rest (a loaded machine), not
           # at the sandbox's timeout (120 s): an action that hangs must not hang the env.
           "hanging call": (HANGING_CALL, ("does it hang", "does the kernel hang"))}


# The step's time for the agent's code where the attack does not hang: on a loaded two-core host (pytest 30 minutes
# instead of 21, 2026-12-06) the 15 s ran out before the checks met the patched save's or the thread's poison, and the
# test would see the deadline's refusal instead of the one it is about. The hanging call keeps the env's 15 s.
ATTACK_STEP_S = 60.0


def _episode(source: str, step_s: float | None = None) -> dict[str, Any]:
    """A bench and a submit of ``source`` in one RSI/Kernel-v1 episode: what each returned."""
    env = gym.make("RSI/Kernel-v1", op="silu_and_mul", sandbox=BACKEND).unwrapped
    if step_s is not None:
        env.action_timeout_s = step_s
    try:
        env.reset(seed=0)
        env.step({"kind": 1, "path": "kernel.py", "old": "", "new": source})
        obs, reward, *_ = env.step({"kind": 3})
        bench = {"result": env.last, "reward": float(reward), "text": obs["text"], "best": env.best_score}
        obs, reward, term, _, info = env.step({"kind": 4})
        return {"bench": bench, "submit": {"result": env.last, "reward": float(reward), "terminated": term,
                                           "passed": info["verdict"]["passed"], "text": obs["text"]}}
    finally:
        env.close()


@pytest.fixture(scope="module", params=sorted(ATTACKS))
def attacked(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return request.param, _episode(ATTACKS[request.param][0],
                                   None if request.param == "hanging call" else ATTACK_STEP_S)


def test_the_attack_is_refused_by_the_measurement(attacked: tuple[str, dict[str, Any]]):
    name, ep = attacked
    res = ep["bench"]["result"]
    assert not res.ok and not res.correct and not math.isfinite(res.score), f"{name}: {res.summary()}"
    assert any(m in (res.error or "") for m in ATTACKS[name][1]), f"{name}: {res.error}"


def test_the_attack_is_paid_nothing_and_fails_submit(attacked: tuple[str, dict[str, Any]]):
    name, ep = attacked
    assert ep["bench"]["reward"] <= 0 and ep["bench"]["best"] <= 0, (name, ep["bench"]["text"])
    sub = ep["submit"]
    assert sub["terminated"] and not sub["passed"] and sub["reward"] <= 0, (name, sub["text"])
    assert not sub["result"].ok, (name, sub["text"])


def test_a_speedup_above_the_roofline_is_refused_and_paid_nothing(monkeypatch: pytest.MonkeyPatch):
    """With the slack set so low that even an honest kernel's bytes per second exceed it, the refusal is seen
    end to end: flagged in the signed report, not ok, no reward, submit fails."""
    honest = "import torch.nn.functional as F\ndef silu_and_mul(out, x):\n" + _SILU
    fair = measure_kernel(honest, "silu_and_mul", [0], SIZES, timed_shapes=1, backend=BACKEND)
    assert fair.ok and fair.peak_bytes_per_s, fair.summary()
    print(f"honest silu_and_mul: {fair.timings[0]['bytes_per_s'] / 1e9:.2f} GB/s of its bytes against a measured "
          f"peak of {fair.peak_bytes_per_s / 1e9:.1f} GB/s")
    assert fair.timings[0]["bytes_per_s"] < kernel_tier.ROOFLINE_SLACK * fair.peak_bytes_per_s
    monkeypatch.setattr(kernel_tier, "ROOFLINE_SLACK", 1e-6)
    res = measure_kernel(honest, "silu_and_mul", [0], SIZES, timed_shapes=1, backend=BACKEND)
    assert res.excessive_speedup and not res.ok and not math.isfinite(res.score), res.summary()
    assert "cannot have done the work" in (res.error or "") and res.summary().startswith("REFUSED"), res.summary()
    ep = _episode(honest)
    assert ep["bench"]["reward"] <= 0 and ep["bench"]["result"].excessive_speedup, ep["bench"]["text"]
    # Submit measures again, the thorough peak included: on a loaded machine that can outlast the step's 15 s,
    # which fails the submission just the same.
    assert not ep["submit"]["passed"] and ep["submit"]["reward"] <= 0, ep["submit"]["text"]
    assert any(m in ep["submit"]["text"] for m in ("excessive speedup", "did not finish within")), ep["submit"]["text"]


# fp8 quantisation with a made-up scale: no pass over x for its maximum, the quantised values consistent with
# the scale written (so that out * scales still approximates x). The scale is vLLM's contract: it is checked.
FAKED_SCALE = ("def dynamic_per_token_scaled_fp8_quant(out, scales, x):\n    scales.fill_(8.0 / 448.0)\n"
               "    out.copy_((x.float() / scales).clamp(-448.0, 448.0))\n")

# The cache write has no output tensor: a call it skips leaves the caches as they were. It writes the first calls
# (the correctness sets) and then one call in two; the slots it must write arrive as NaN, so every skipped set of
# every block is seen (not only a drawn one).
SKIPPED_WRITES = ("_n = [0]\n"
                  "def reshape_and_cache(key, value, key_cache, value_cache, slot_mapping):\n    _n[0] += 1\n"
                  "    if _n[0] > 4 and _n[0] % 2:\n        return\n    keep = slot_mapping >= 0\n"
                  "    key_cache.view(-1, *key.shape[1:])[slot_mapping[keep]] = key[keep]\n"
                  "    value_cache.view(-1, *key.shape[1:])[slot_mapping[keep]] = value[keep]\n")

# Integer answers kept for the public inputs: at import, the routing of every public set the env's seeds draw is
# solved once (ops.py is public, and so are the seeds); a call copies the kept answer and, on a miss, writes zeros.
# The correctness sets pass; the timed sets, drawn under the run's secret, all miss.
KEPT_ANSWERS = SOLUTION.read_text() + f"""
import ops
_honest = moe_align_block_size
_SIZES = {SIZES!r}
_kept = {{}}
for _seed in [*range(12), *range(1_000_003, 1_000_015)]:
    _shape = ops.draw_shape("moe_align_block_size", _seed, _SIZES)
    _inp, _out = ops.make_inputs(_shape, 0), ops.make_outputs(_shape)
    _honest(**_inp, **_out)
    _kept[_inp["topk_ids"].numpy().tobytes()] = _out


def moe_align_block_size(sorted_token_ids, expert_ids, num_tokens_post_pad, topk_ids, num_experts, block_size):
    hit = _kept.get(topk_ids.numpy().tobytes())
    for name, dst in (("sorted_token_ids", sorted_token_ids), ("expert_ids", expert_ids),
                      ("num_tokens_post_pad", num_tokens_post_pad)):
        dst.copy_(hit[name]) if hit is not None else dst.zero_()
"""

# (op, dtype, kernel, what the refusal says, whether the public correctness sets pass first).
V1_ATTACKS = {"faked fp8 scale": ("dynamic_per_token_scaled_fp8_quant", "bfloat16", FAKED_SCALE,
                                  "scales differs from the float64 reference", False),
              "skipped cache writes": ("reshape_and_cache", "float16", SKIPPED_WRITES,
                                       "still hold the NaN poison", True),
              "kept integer answers": ("moe_align_block_size", None, KEPT_ANSWERS,
                                       "differs from the float64 reference", True)}


@pytest.mark.parametrize("name", sorted(V1_ATTACKS))
def test_the_holes_of_the_v1_ops_are_closed(name: str):
    op, dtype, source, expect, public_pass = V1_ATTACKS[name]
    seeds = [0, 1]
    res = measure_kernel(source, op, seeds, SIZES, timed_shapes=1, backend=BACKEND, dtype=dtype)
    assert not res.ok and not res.correct and not math.isfinite(res.score), f"{name}: {res.summary()}"
    assert expect in (res.error or ""), f"{name}: {res.error}"
    # Where the attack answers the public sets, it is the timed blocks (secret inputs, every set poisoned) that see it.
    assert len(res.checked) == (len(seeds) if public_pass else 0), f"{name}: {res.checked} {res.error}"


_TREE = r"""
import os, subprocess, sys, time
sys.path.insert(0, sys.argv[1])
import harness
harness._prctl(harness.PR_SET_CHILD_SUBREAPER, 1)
count = sys.argv[2]
child = '''
import os, sys, threading, time
def tick(path):
    with open(path, "a", buffering=1) as f:
        while True:
            print("x", file=f)
            time.sleep(0.001)
if os.fork() == 0:          # a grandchild in a session of its own, orphaned: it comes back to the subreaper
    os.setsid()
    if os.fork() == 0:
        tick(sys.argv[1] + ".detached")
    os._exit(0)
threading.Thread(target=tick, args=(sys.argv[1] + ".thread",), daemon=True).start()
tick(sys.argv[1] + ".main")
'''
proc = subprocess.Popen([sys.executable, "-c", child, count], start_new_session=True)
tree = harness.ProcessTree(proc.pid)
names = [count + s for s in (".main", ".thread", ".detached")]
while not all(os.path.exists(n) and os.path.getsize(n) for n in names):
    time.sleep(0.01)
read = lambda: [os.path.getsize(n) for n in names]
tree.stop()
before = read()
time.sleep(0.2)
held = read()
tree.resume()
time.sleep(0.2)
after = read()
tree.kill()
print(before == held and all(a > b for a, b in zip(after, held)), before, held, after)
"""


def test_a_stopped_tree_holds_every_thread_and_process_still(tmp_path):
    """The harness's ProcessTree: a thread, the main thread and an orphaned process of another session all stop
    writing while the tree is stopped, and all go on once it is resumed."""
    import subprocess
    import sys

    from rsi_env.tasks.kernel.tier import HARNESS_FILES, KERNEL_DIR

    # the harness imports isolation.py from its folder, as in the sandbox that ships them side by side
    (tmp_path / "isolation.py").write_bytes(HARNESS_FILES["isolation.py"].read_bytes())
    out = subprocess.run([sys.executable, "-c", _TREE, str(KERNEL_DIR / "hidden"), str(tmp_path / "count")],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.stdout.startswith("True"), out.stdout + out.stderr
