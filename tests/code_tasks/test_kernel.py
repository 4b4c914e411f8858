"""RSI/Kernel-v0: the reference solution earns the binary reward for every op, the starting kernel does not,
and wrong, lazy, cheating, hanging and crashing kernels are caught with a clear message while the env survives."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import uuid

import gymnasium as gym
import numpy as np
import pytest

import rsi_env  # noqa: F401  (registers the envs)
from rsi_env.envs.state import validate
from rsi_env.errors import RsiEnvError
from rsi_env.sandbox.hidden import CODE_DIR
from rsi_env.tasks.kernel import tier as kernel_tier
from rsi_env.tasks.kernel.env import OPS, KernelEnv, model_sizes
from rsi_env.tasks.kernel.tier import measure_kernel

SIZES = model_sizes("llama-3.1-8b")

# The reference solution (kept here, never in the package): one kernel.py that does every op. Each op writes
# straight into its destinations (``out=`` / in-place ops), skips the dtype round trips of vLLM's
# ``forward_native`` and, for paged attention, reads the cache per sequence with grouped-query heads batched.
SOLUTION = '''
import torch
import torch.nn.functional as F


def rms_norm_residual(out, x, residual, weight, epsilon):
    residual.add_(x)
    r = residual.float() if residual.dtype != torch.float32 else residual
    rs = torch.rsqrt(r.square().mean(-1, keepdim=True).add_(epsilon))
    if out.dtype == torch.float32:
        torch.mul(r, rs, out=out)
        out.mul_(weight)
    else:
        out.copy_(r.mul(rs).mul_(weight))


def silu_and_mul(out, x):
    d = x.shape[-1] // 2
    torch.mul(F.silu(x[:, :d]), x[:, d:], out=out)


def rotary_embedding(query_out, key_out, positions, query, key, cos_sin_cache):
    d = cos_sin_cache.shape[-1]
    h = d // 2
    cs = cos_sin_cache.index_select(0, positions)
    cos, sin = cs[:, None, :h], cs[:, None, h:]
    for src, dst in ((query, query_out), (key, key_out)):
        t = src.shape[0]
        x, o = src.view(t, -1, d), dst.view(t, -1, d)
        torch.mul(x[..., :h], cos, out=o[..., :h])
        o[..., :h].addcmul_(x[..., h:], sin, value=-1)
        torch.mul(x[..., h:], cos, out=o[..., h:])
        o[..., h:].addcmul_(x[..., :h], sin)


def paged_attention_decode(out, query, key_cache, value_cache, block_tables, seq_lens, scale):
    s, heads, dim = query.shape
    bs, kvh = key_cache.shape[1], key_cache.shape[2]
    q = (query.float() * scale).view(s, kvh, heads // kvh, dim)
    for i, n in enumerate(seq_lens.tolist()):
        nb = (n + bs - 1) // bs
        blocks = block_tables[i, :nb].long()
        k = key_cache.index_select(0, blocks).view(nb * bs, kvh, dim)[:n].float()
        v = value_cache.index_select(0, blocks).view(nb * bs, kvh, dim)[:n].float()
        p = torch.softmax(torch.matmul(q[i], k.permute(1, 2, 0)), dim=-1)
        out[i] = torch.matmul(p, v.transpose(0, 1)).view(heads, dim)
'''
TEMPLATE = (CODE_DIR / "kernel" / "templates" / "silu_and_mul.py").read_text()


def write(env: KernelEnv, text: str):
    return env.step({"kind": 1, "path": "kernel.py", "old": "", "new": text})


@pytest.mark.parametrize("op", OPS)
def test_reference_solution_passes_and_the_starting_kernel_does_not(op: str):
    env = gym.make("RSI/Kernel-v0", op=op).unwrapped
    env.reset(seed=0)
    obs, r, term, _, info = env.step({"kind": 4})
    assert term and not info["verdict"]["passed"] and "FAIL] speedup" in obs["text"], obs["text"]
    env.reset(seed=0)
    write(env, SOLUTION)
    obs, r, term, _, info = env.step({"kind": 4})
    assert term and info["verdict"]["passed"] and r > 0.9, obs["text"]
    assert validate(env.state()).ok   # replayed in this process: the cached measurements give the same rewards
    env.close()


def _check(source: str, op: str = "silu_and_mul", seeds=(0,)) -> kernel_tier.KernelResult:
    return measure_kernel(source, op, list(seeds), SIZES, timed_shapes=1)


BROKEN = {
    "wrong": ("import torch\ndef silu_and_mul(out, x):\n    d = x.shape[-1] // 2\n"
              "    out.copy_(torch.sigmoid(x[:, :d]) * x[:, d:])\n", "differs from the float64 reference"),
    "lazy": ("def silu_and_mul(out, x):\n    pass\n", "it still holds the NaN poison"),
    "partial": ("import torch.nn.functional as F\ndef silu_and_mul(out, x):\n    d = x.shape[-1] // 2\n"
                "    out[1:] = F.silu(x[1:, :d]) * x[1:, d:]\n", "are NaN"),
    "alters input": ("import torch.nn.functional as F\ndef silu_and_mul(out, x):\n    d = x.shape[-1] // 2\n"
                     "    out.copy_(F.silu(x[:, :d]) * x[:, d:])\n    x.zero_()\n", "changed its input x"),
    "new tensor": ("import torch.nn.functional as F\ndef silu_and_mul(out, x):\n    d = x.shape[-1] // 2\n"
                   "    return F.silu(x[:, :d]) * x[:, d:]\n", "NaN poison"),
    "raises": ("def silu_and_mul(out, x):\n    raise ValueError('boom')\n", "ValueError: boom"),
    "missing": ("def something_else(out, x):\n    pass\n", "must define a function silu_and_mul"),
    "crash": ("import os\ndef silu_and_mul(out, x):\n    os._exit(3)\n", "ended during run (exit code 3)"),
    "kills the harness": ("import os\ndef silu_and_mul(out, x):\n    os.kill(os.getppid(), 9)\n",
                          "the harness produced no report"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_kernels_fail_with_a_clear_message(case: str):
    source, expect = BROKEN[case]
    res = _check(source)
    assert not res.correct and not res.ok and expect in (res.error or ""), res.error


def test_a_kernel_that_caches_its_first_answer_is_caught():
    """Correct on the first call, then replays it: the spot checks of the timed blocks see stale outputs."""
    cheat = ("import torch.nn.functional as F\n_memo = {}\ndef silu_and_mul(out, x):\n"
             "    key = tuple(x.shape)\n    if key not in _memo:\n        d = x.shape[-1] // 2\n"
             "        _memo[key] = F.silu(x[:, :d]) * x[:, d:]\n    out.copy_(_memo[key])\n")
    res = _check(cheat)
    assert not res.correct and "differs from the float64 reference" in (res.error or ""), res.error


def test_a_forged_report_is_never_believed():
    """The kernel's process writes result.json during its calls, and leaves a detached process behind to write
    it again once the harness has: the env takes the harness's signed report, refuses the file, or (where the
    harness cannot hold the kernel's processes still within its deadline, seen once on a loaded two-core CI
    machine) fails the call."""
    fake = json.dumps({"body": json.dumps({"correct": True, "speedup": 100.0}), "mac": "00"})
    forge = (f"import os, subprocess\nFAKE = {fake!r}\n"
             "subprocess.Popen(['/bin/sh', '-c', 'while [ ! -e result.json ]; do sleep 0.01; done; "
             "sleep 0.05; cat > result.json'], stdin=subprocess.PIPE, start_new_session=True).stdin.write(FAKE.encode())\n"
             "def _forge():\n    open('result.json', 'w').write(FAKE)\n" + TEMPLATE + "\n_orig = silu_and_mul\n"
             "def silu_and_mul(out, x):\n    _forge()\n    _orig(out, x)\n")
    res = _check(forge)
    assert res.speedup != 100.0
    assert res.ok or any(w in (res.error or "") for w in ("signature", "could not be stopped")), res.error


def test_a_kernel_that_answers_for_the_worker_is_caught():
    """Replying "done" to the harness before the work is done stops its clock early: the harness then reads the
    outputs unfinished (the worker stopped at the reply: all NaN poison, or part of it where the copy had begun),
    or, had they been finished, sees the extra reply."""
    early = ("import json, sys\nimport torch.nn.functional as F\n"
             "def silu_and_mul(out, x):\n    worker = sys._getframe(1).f_locals\n"
             "    worker['replies'].write(json.dumps({'turn': worker['turn'][0], 'ok': True}) + '\\n')\n"
             "    d = x.shape[-1] // 2\n    out.copy_(F.silu(x[:, :d]) * x[:, d:])\n")
    res = _check(early)
    assert not res.correct and any(m in (res.error or "") for m in ("out of turn", "NaN poison", "are NaN")), res.error


def test_only_a_report_signed_with_the_run_s_secret_is_believed():
    secret = secrets.token_hex(32)
    body = json.dumps({"correct": True, "speedup": 100.0})
    sign = lambda key: hmac.new(key, body.encode(), hashlib.sha256).hexdigest()  # noqa: E731
    forged = kernel_tier._parse(json.dumps({"body": body, "mac": sign(b"a guess")}).encode(), secret, "")
    assert not forged.ok and "signature" in (forged.error or "")
    assert kernel_tier._parse(b"not json", secret, "").error == forged.error
    genuine = kernel_tier._parse(json.dumps({"body": body, "mac": sign(bytes.fromhex(secret))}).encode(), secret, "")
    assert genuine.ok and genuine.speedup == 100.0


def test_tampering_in_the_kernel_s_process_cannot_touch_the_clock_or_the_reference():
    """Stopping the clock and slowing torch down help nothing: both live in the harness's own process."""
    tamper = ("import time, torch, torch.nn.functional as F\n_silu = F.silu\n"
              "time.perf_counter = lambda: 0.0\ntime.perf_counter_ns = lambda: 0\n"
              "F.silu = lambda x, inplace=False: (time.sleep(0.01), _silu(x))[1]\n" + TEMPLATE)
    res = _check(tamper)
    assert res.ok and res.speedup is not None and res.speedup < 2.0, res.summary()


def test_a_kernel_that_skips_calls_is_caught():
    """Only the first call of a block is computed: a later set's outputs stay poisoned, and the spot check sees it."""
    lazy = ("import torch.nn.functional as F\n_n = [0]\ndef silu_and_mul(out, x):\n    _n[0] += 1\n"
            "    if _n[0] <= 2 or _n[0] % 50 == 0:\n        d = x.shape[-1] // 2\n"
            "        out.copy_(F.silu(x[:, :d]) * x[:, d:])\n")
    res = _check(lazy)
    assert not res.correct and "NaN poison" in (res.error or ""), res.error


def test_a_hanging_kernel_times_out_and_the_env_survives(monkeypatch: pytest.MonkeyPatch):
    env = gym.make("RSI/Kernel-v0", op="silu_and_mul").unwrapped
    env.reset(seed=0)
    obs, *_ = env.step({"kind": 3})                        # measures the starting kernel (and caches it)
    assert "correct on 3 input sets" in obs["text"], obs["text"]
    monkeypatch.setattr(kernel_tier, "HARNESS_TIMEOUT_S", 4.0)
    write(env, "def silu_and_mul(out, x):\n    while True:\n        pass\n")
    obs, r, term, _, _ = env.step({"kind": 3})
    assert "did not finish within 4 s" in obs["text"] and np.isfinite(r) and not term
    monkeypatch.undo()
    write(env, TEMPLATE)
    obs, r, term, *_ = env.step({"kind": 3})
    assert "correct on 3 input sets" in obs["text"] and np.isfinite(r) and not term, obs["text"]
    env.close()


def test_the_kernel_never_runs_in_the_env_s_process_and_cannot_see_the_references():
    marker = f"/tmp/rsi-kernel-{uuid.uuid4().hex[:8]}"
    spy = (f"import os\nopen({marker!r}, 'w').write(repr(sorted(os.listdir('.'))))\n"
           "assert not os.path.exists('reference.py') and not os.path.exists('harness.py'), os.listdir('.')\n"
           + SOLUTION)
    res = _check(spy)
    assert res.ok, res.error
    assert not os.path.exists(marker)
    env = gym.make("RSI/Kernel-v0", op="silu_and_mul").unwrapped
    env.reset(seed=0)
    out = env._run_shell(f"ls {CODE_DIR}/kernel/hidden; cat kernel.py | head -1; echo end").output
    assert "end" in out and "reference.py" not in out
    obs, *_ = env.step({"kind": 0, "flag": 0, "value": 0.5})
    assert "no engine flags" in obs["text"]
    env.close()


def test_measurements_of_unchanged_code_are_reused():
    a = measure_kernel(SOLUTION, "rms_norm_residual", [5], SIZES, timed_shapes=1)
    b = measure_kernel(SOLUTION, "rms_norm_residual", [5], SIZES, timed_shapes=1)
    assert a is b and a.ok


def test_bad_arguments_are_refused():
    with pytest.raises(RsiEnvError, match="unknown op"):
        KernelEnv(op="gemm")
    with pytest.raises(RsiEnvError, match="no CUDA device"):
        KernelEnv(tier="real")
