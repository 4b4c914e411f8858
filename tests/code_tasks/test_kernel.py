"""RSI/Kernel-v1 (and v0): the package's reference solution earns the binary reward for every op, the starting kernel
does not, wrong, lazy, cheating, hanging and crashing kernels are caught with a clear message while the env survives,
instances are pinned by ``op``/``dtype``/``model`` and the seed, and v0's four ops draw what they drew before v1."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import sys
import uuid

import gymnasium as gym
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rsi_env  # noqa: F401  (registers the envs)
from rsi_env.envs.state import validate
from rsi_env.errors import RsiEnvError
from rsi_env.sandbox.hidden import CODE_DIR
from rsi_env.sandbox.runtime import EXCLUDED, PACKAGE
from rsi_env.tasks.kernel import tier as kernel_tier
from rsi_env.tasks.kernel.env import OPS, TEMPLATES, V0_OPS, KernelEnv, model_sizes
from rsi_env.tasks.kernel.reference import SOLUTION, reference_files
from rsi_env.tasks.kernel.tier import DTYPES, INTEGER_OPS, KERNEL_DIR, measure_kernel

sys.path.insert(0, str(KERNEL_DIR))   # the harness's public op definitions (they import torch: tests may)
import ops  # noqa: E402

SIZES = model_sizes("llama-3.1-8b")
TEMPLATE = (CODE_DIR / "kernel" / "templates" / "silu_and_mul.py").read_text()
SOLUTION_TEXT = SOLUTION.read_text()
# One dtype per op, rotating through the three so that every dtype is played (benchmarks/bench_kernel.py measures
# every op x dtype, and docs/kernel.md has its numbers).
PLAYED = [(op, None if op in INTEGER_OPS else DTYPES[i % len(DTYPES)]) for i, op in enumerate(OPS)]


def write(env: KernelEnv, text: str, path: str = "kernel.py"):
    return env.step({"kind": 1, "path": path, "old": "", "new": text})


@pytest.mark.parametrize(("op", "dtype"), PLAYED)
def test_the_reference_solution_passes_and_the_starting_kernel_does_not(op: str, dtype: str | None):
    env = gym.make("RSI/Kernel-v1", op=op, dtype=dtype).unwrapped
    env.reset(seed=0)
    obs, r, term, _, info = env.step({"kind": 4})
    # The starting kernel is no faster than itself; on a loaded machine its own (slow) measurement may also
    # outlast the step's 15 s for the agent's code: either way it fails.
    assert term and not info["verdict"]["passed"] and r <= 0, obs["text"]
    assert "FAIL] speedup: 1.00x" in obs["text"] or "did not finish within" in obs["text"], obs["text"]
    env.reset(seed=0)
    for path, text in reference_files(env).items():
        write(env, text, path)
    obs, r, term, _, info = env.step({"kind": 4})
    start, result = env._submit_start, env.last
    assert start is not None and start.speedup and result is not None and result.speedup, obs["text"]
    print(f"{op} {dtype or 'int32'}: starting kernel {start.speedup:.2f}x eager, reference {result.speedup:.2f}x: "
          f"{result.speedup / start.speedup:.1f}x the start (submit needs {env.min_speedup:.1f}x)")
    assert term and info["verdict"]["passed"] and r > 0.9, obs["text"]
    if dtype:
        assert all(f"dtype={dtype}," in shape for shape in result.checked), result.checked
    assert validate(env.state()).ok   # replayed in this process: the cached measurements give the same rewards
    env.close()


def test_v0_keeps_its_starting_kernels_and_judges_the_same_solution_correct():
    """v0's starts are its own (templates/v0); the solution is correct there too. Its speedup over v0's start is
    not asserted: that margin (2.4-4x on this loaded machine, 1.5x once) is why v1 has other starts."""
    env = gym.make("RSI/Kernel-v0", op="silu_and_mul").unwrapped
    assert type(env) is not KernelEnv and env.task.id == "RSI/Kernel-v0"
    assert env.template == (TEMPLATES / "v0" / "silu_and_mul.py").read_text() != TEMPLATE
    env.reset(seed=0)
    write(env, reference_files(env)["kernel.py"])
    obs, r, term, _, info = env.step({"kind": 4})
    assert term and "[ok] correct" in obs["text"], obs["text"]
    if env._submit_start is not None and env._submit_start.speedup and env.last and env.last.speedup:
        print(f"v0 silu_and_mul: the reference {env.last.speedup / env._submit_start.speedup:.1f}x v0's start")
    env.close()


def _fingerprint(op_names: tuple[str, ...]) -> str:
    """Every shape, input set (public and salted), byte count of the ops' draws, for two models and five seeds."""
    h = hashlib.sha256()
    for model in ("llama-3.1-8b", "qwen2.5-7b"):
        sizes = model_sizes(model)
        for op in op_names:
            for seed in (0, 1, 2, 7, 1000003):
                shape = ops.draw_shape(op, seed, sizes, "cpu")
                h.update(json.dumps(shape, sort_keys=True).encode())
                for key in ("", "k3y"):
                    inp = ops.make_inputs(shape, 3, "cpu", key)
                    for name in sorted(inp):
                        v = inp[name]
                        h.update(name.encode())
                        h.update(v.contiguous().view(torch.uint8).numpy().tobytes() if isinstance(v, torch.Tensor)
                                 else repr(v).encode())
                h.update(str(ops.min_bytes(shape)).encode() + str(ops.set_bytes(shape)).encode())
    return h.hexdigest()[:16]


def test_v0_s_ops_draw_the_shapes_and_inputs_they_drew_before_v1():
    """Recorded from the harness's ops.py before v1 added its ops and the dtype pin (commit f8f6fdf)."""
    assert set(V0_OPS) == {"rms_norm_residual", "silu_and_mul", "rotary_embedding", "paged_attention_decode"}
    assert _fingerprint(("rms_norm_residual", "silu_and_mul", "rotary_embedding", "paged_attention_decode")) == \
        "b05bec8f84960ec7"


@settings(max_examples=40, deadline=None)
@given(op=st.sampled_from([o for o in OPS if o not in INTEGER_OPS]), seed=st.integers(0, 2**31),
       dtype=st.sampled_from(DTYPES), scale=st.sampled_from(["cpu", "cuda"]))
def test_a_pinned_dtype_changes_the_dtype_and_nothing_else(op: str, seed: int, dtype: str, scale: str):
    drawn = ops.draw_shape(op, seed, SIZES, scale)
    assert ops.draw_shape(op, seed, SIZES, scale, dtype) == {**drawn, "dtype": dtype}


def test_the_env_s_lists_are_the_harness_s():
    assert set(OPS) == set(ops.OPS) and set(V0_OPS) < set(OPS)
    assert DTYPES == ops.DTYPES and INTEGER_OPS == ops.INTEGER_OPS


def test_an_instance_is_pinned_by_its_arguments_and_seed():
    env = gym.make("RSI/Kernel-v1", op="moe_sum", dtype="float16", model="qwen3-30b-a3b").unwrapped
    env.reset(seed=4)
    assert env.seeds(submit=True) == [4 * 3 + 1_000_003 + k for k in range(3)]
    shapes = [ops.draw_shape("moe_sum", s, env.sizes, "cpu", env.dtype) for s in env.seeds()]
    assert all(s["dtype"] == "float16" and s["topk"] == 8 and s["hidden_size"] == 2048 for s in shapes)
    assert "dtype float16" in env._task_text() and "float16" in env.text
    env.close()


def test_the_suite_s_instances_are_every_op_x_dtype_pinned():
    from rsi_env.tasks.kernel.instances import suite_instances

    rows = list(suite_instances())
    assert {(kw["op"], kw["dtype"]) for _, _, kw, _ in rows} == {
        (op, dt) for op in OPS for dt in ((None,) if op in INTEGER_OPS else DTYPES)}
    assert len({name for name, *_ in rows}) == len(rows) == 7 * 3 + 1
    for _, env_id, kwargs, seed in rows[:3]:
        env = gym.make(env_id, **kwargs).unwrapped
        env.reset(seed=seed)
        assert (env.op, env.dtype) == (kwargs["op"], kwargs["dtype"])
        env.close()


def test_reference_files_are_hidden_and_solve_every_op():
    env = gym.make("RSI/Kernel-v1", op="reshape_and_cache").unwrapped
    env.reset(seed=0)
    files = reference_files(env)
    assert files == {"kernel.py": SOLUTION_TEXT}
    assert all(f"def {op}(" in SOLUTION_TEXT for op in OPS)
    rel = SOLUTION.resolve().relative_to(PACKAGE).as_posix()
    assert any(rel.startswith(e + "/") for e in EXCLUDED), rel   # no sandbox sees it (test_visible_files walks)
    env.close()


def _check(source: str, op: str = "silu_and_mul", seeds=(0,), dtype: str | None = None,
           timed: int = 1) -> kernel_tier.KernelResult:
    return measure_kernel(source, op, list(seeds), SIZES, timed_shapes=timed, dtype=dtype)


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


# Plausible mistakes in the ops v1 added, each caught by the correctness sets alone: (op, dtype, kernel, message).
_FP8 = ("def dynamic_per_token_scaled_fp8_quant(out, scales, x):\n{scale}"
        "    out.copy_((x.float() / scales).clamp(-448.0, 448.0))\n")
WRONG = {
    "cache write: a padding token written to slot -1": (
        "reshape_and_cache", "bfloat16",
        "def reshape_and_cache(key, value, key_cache, value_cache, slot_mapping):\n"
        "    key_cache.view(-1, *key.shape[1:])[slot_mapping] = key\n"
        "    value_cache.view(-1, *key.shape[1:])[slot_mapping] = value\n", "differs from the float64 reference"),
    "cache write: the value cache forgotten": (
        "reshape_and_cache", "float32",
        "def reshape_and_cache(key, value, key_cache, value_cache, slot_mapping):\n"
        "    keep = slot_mapping >= 0\n    key_cache.view(-1, *key.shape[1:])[slot_mapping[keep]] = key[keep]\n",
        "value_cache are NaN"),
    "fp8: one scale for the whole tensor": (
        "dynamic_per_token_scaled_fp8_quant", "bfloat16",
        _FP8.format(scale="    scales.fill_(max(float(x.abs().max()) / 448.0, 1 / (448.0 * 512)))\n"),
        "scales differs from the float64 reference"),
    "fp8: a power-of-two scale": (
        "dynamic_per_token_scaled_fp8_quant", "float32",
        _FP8.format(scale="    import torch\n    scales.copy_(torch.exp2(torch.ceil(torch.log2("
                          "x.abs().amax(-1, keepdim=True).float().clamp(min=1e-30) / 448.0))))\n"),
        "scales differs from the float64 reference"),
    "fp8: no floor under the scale (an all-zero row)": (
        "dynamic_per_token_scaled_fp8_quant", "float16",
        _FP8.format(scale="    scales.copy_(x.abs().amax(-1, keepdim=True) / 448.0)\n"), "are NaN"),
    "moe_sum: the mean": ("moe_sum", "float16", "def moe_sum(out, x):\n    out.copy_(x.mean(1))\n",
                          "differs from the float64 reference"),
    "moe align: groups not padded": (
        "moe_align_block_size", None,
        "import torch\n"
        "def moe_align_block_size(sorted_token_ids, expert_ids, num_tokens_post_pad, topk_ids, num_experts, "
        "block_size):\n    flat = topk_ids.flatten()\n    order = torch.sort(flat, stable=True).indices\n"
        "    sorted_token_ids.fill_(flat.numel())\n    sorted_token_ids[: flat.numel()] = order.int()\n"
        "    expert_ids.zero_()\n    num_tokens_post_pad.fill_(flat.numel())\n",
        "differs from the float64 reference"),
    "moe align: the blocks past the groups left unwritten": (
        "moe_align_block_size", None,
        SOLUTION_TEXT + "\n_solved = moe_align_block_size\n\n"
        "def moe_align_block_size(sorted_token_ids, expert_ids, num_tokens_post_pad, topk_ids, num_experts, "
        "block_size):\n    saved = expert_ids.clone()\n"
        "    _solved(sorted_token_ids, expert_ids, num_tokens_post_pad, topk_ids, num_experts, block_size)\n"
        "    n = int(num_tokens_post_pad) // block_size\n    expert_ids[n:] = saved[n:]\n",
        "still hold the poison value -2147483648"),
}


@pytest.mark.parametrize("case", sorted(WRONG))
def test_wrong_kernels_of_the_v1_ops_are_caught(case: str):
    op, dtype, source, expect = WRONG[case]
    res = _check(source, op, seeds=(0, 1), dtype=dtype, timed=0)
    assert not res.correct and expect in (res.error or ""), res.error


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
    env = gym.make("RSI/Kernel-v1", op="silu_and_mul").unwrapped
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
           + SOLUTION_TEXT)
    res = _check(spy)
    assert res.ok, res.error
    assert not os.path.exists(marker)
    env = gym.make("RSI/Kernel-v1", op="silu_and_mul").unwrapped
    env.reset(seed=0)
    out = env._run_shell(f"ls {CODE_DIR}/kernel/hidden; ls {PACKAGE}/tasks/kernel; cat kernel.py | head -1; "
                         "echo end").output
    assert "end" in out and "reference.py" not in out and "solution.py" not in out
    obs, *_ = env.step({"kind": 0, "flag": 0, "value": 0.5})
    assert "no engine flags" in obs["text"]
    env.close()


def test_measurements_of_unchanged_code_are_reused():
    a = measure_kernel(SOLUTION_TEXT, "rms_norm_residual", [5], SIZES, timed_shapes=1)
    b = measure_kernel(SOLUTION_TEXT, "rms_norm_residual", [5], SIZES, timed_shapes=1)
    assert a is b and a.ok


def test_bad_arguments_are_refused():
    with pytest.raises(RsiEnvError, match="unknown op"):
        KernelEnv(op="gemm")
    with pytest.raises(RsiEnvError, match="no CUDA device"):
        KernelEnv(tier="real")
    with pytest.raises(RsiEnvError, match="unknown dtype 'int8'"):
        KernelEnv(op="silu_and_mul", dtype="int8")
    with pytest.raises(RsiEnvError, match="no floating-point tensors"):
        KernelEnv(op="moe_align_block_size", dtype="float16")
    with pytest.raises(RsiEnvError, match="a later version of the task has it"):
        gym.make("RSI/Kernel-v0", op="moe_sum")
    with pytest.raises(RsiEnvError, match="RSI/Kernel-v1 pins it"):
        gym.make("RSI/Kernel-v0", op="silu_and_mul", dtype="float16")
