"""RSI/DayZero-v0 and -v1 on the sim tier: the package's reference solution, written with edit actions as the
suite's reference agent writes it, earns the binary reward on every instance (feature x model size), the
unmodified workspace does not (each feature fails its own checks), a plausible mistake fails with a clear
message, and hostile workspaces are contained — their code runs in fresh sandboxes, never in the env's process."""

from __future__ import annotations

import json
import os
import sys
import uuid

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rsi_env  # noqa: F401  (registers the envs)
from rsi_env.engine.model import ModelSpec
from rsi_env.errors import RsiEnvError
from rsi_env.tasks.dayzero import checks
from rsi_env.tasks.dayzero.checks import FEATURES, MODEL_SIZES, DayZeroError, load_feature, model_spec, reference_spec
from rsi_env.tasks.dayzero.env import DayZeroEnv, DayZeroV1Env
from rsi_env.tasks.dayzero.reference import BLOCK, SPEC, VLLM_MODEL, reference_files
from rsi_env.tasks.dayzero.vllm_check import NEW_TOKENS, TOLERANCE, _tokens, reference_gaps, reference_tokens, root_cause

BACKEND = "bubblewrap"

# A plausible mistake: QK-norm applied after the rotary embedding instead of before.
_NORM_BEFORE_ROPE = """    if config.get("use_qk_norm"):  # per head, before RoPE
        q = rms_norm(q, w["self_attn.q_norm.weight"], config["rms_norm_eps"])
        k = rms_norm(k, w["self_attn.k_norm.weight"], config["rms_norm_eps"])
    if uses_rope(config, layer_idx):
        q, k = rotary(q, positions, config), rotary(k, positions, config)
"""
BLOCK_NORM_AFTER_ROPE = BLOCK.replace(_NORM_BEFORE_ROPE, """    if uses_rope(config, layer_idx):
        q, k = rotary(q, positions, config), rotary(k, positions, config)
    if config.get("use_qk_norm"):
        q = rms_norm(q, w["self_attn.q_norm.weight"], config["rms_norm_eps"])
        k = rms_norm(k, w["self_attn.k_norm.weight"], config["rms_norm_eps"])
""")
assert _NORM_BEFORE_ROPE in BLOCK and BLOCK_NORM_AFTER_ROPE != BLOCK

# Which hidden checks the Llama templates fail, per feature: the new part shows in the loader's fields, the cost
# model or the layer (``block N``: the block's three cases at layer N fail), each where it should and nowhere else.
TEMPLATE_FAILS = {
    "qk_norm": {"fields", "param_count", "block 0", "block 3"},
    "yarn": {"fields", "block 0", "block 3"},
    "sliding_window": {"fields", "flops_per_token", "kv_bytes", "block 0"},  # layer 1 is global
    "shared_experts": {"fields", "param_count", "flops_per_token", "block 1"},  # layer 0 is dense
    "logit_softcap": {"block 0", "block 1"},
    "partial_rotary": {"block 0", "block 3"},
    "attention_sinks": {"param_count", "block 0", "block 1"},
    "nope_layers": {"block 3"},  # layer 0 keeps RoPE
    "sigmoid_routing": {"fields", "param_count", "flops_per_token", "block 1"},
}


def _kind(check: str) -> str:
    if check.startswith("loader: ModelSpec fields"):
        return "fields"
    if check.startswith("block: "):
        return f"block {check.rsplit('layer=', 1)[1]}"
    return check.removeprefix("cost: ")


def make(feature: str | None = "qk_norm", seed: int = 0, task: str = "RSI/DayZero-v0", **kw) -> DayZeroEnv:
    env = gym.make(task, feature=feature, sandbox=BACKEND, **kw).unwrapped
    # These tests judge what the checks decide, not the step's clock (tests/security/test_hangs.py holds every
    # step to it): on a loaded two-core CI a block run (torch imported in a fresh sandbox) has outlasted 15 s.
    env.action_timeout_s = checks.BLOCK_TIMEOUT_S
    env.reset(seed=seed)
    return env


def solve(env: DayZeroEnv) -> tuple[str, float, dict]:
    """What the suite's reference agent does: write the reference files with edit actions, then submit."""
    for path, text in reference_files(env).items():
        write(env, path, text)
    obs, r, term, _, info = env.step({"kind": 4})
    assert term
    return obs["text"], float(r), info


def write(env: DayZeroEnv, path: str, text: str):
    return env.step({"kind": 1, "path": path, "old": "", "new": text})


@pytest.fixture
def env():
    e = make()
    yield e
    e.close()


@pytest.mark.parametrize("feature, size", DayZeroV1Env.instances())
def test_the_reference_passes_every_instance_and_the_template_fails_its_own_checks(feature: str, size: str):
    env = make(feature, task="RSI/DayZero-v1", model_size=size)
    obs, r, term, _, info = env.step({"kind": 4})
    assert term and r < 1.0 and not info["verdict"]["passed"], obs["text"]
    assert {_kind(k) for k, ok in info["checks"].items() if not ok} == TEMPLATE_FAILS[feature], obs["text"]
    env.reset(seed=0)
    text, r, info = solve(env)
    assert info["verdict"]["passed"] and r >= 1.0, text
    assert (info["feature"], info["model_size"]) == (feature, size)
    assert all(info["checks"].values()) and len(info["checks"]) == 11
    assert "vllm_model.py" not in reference_files(env)  # the sim tier has no model class to write
    if feature == "shared_experts":  # the sim serves the loaded model, not the template's dense 1.9B
        assert env.model.num_experts == {"small": 60, "large": 128}[size]
        assert env.last_tels[0].num_gpu_blocks < env.base_tels[0].num_gpu_blocks
    env.close()


@pytest.mark.parametrize("feature", DayZeroEnv.features)
def test_v0_keeps_its_four_features_and_the_reference_passes_them(feature: str):
    env = make(feature)
    assert env.feature.size == "small" and env.feature.config == load_feature(feature).config
    _, r1, *_ = write(env, "spec.py", SPEC)
    obs, r2, *_ = write(env, "block.py", BLOCK)
    assert r1 > 0 and r2 > 0 and "hidden checks: 11/11 pass" in obs["text"], obs["text"]
    obs, r, term, _, info = env.step({"kind": 4})
    assert term and info["verdict"]["passed"] and r >= 1.0, obs["text"]
    env.close()


def test_qk_norm_after_rope_fails_with_a_clear_message(env: DayZeroEnv):
    write(env, "spec.py", SPEC)
    obs, *_ = write(env, "block.py", BLOCK_NORM_AFTER_ROPE)
    assert "hidden checks: 5/11 pass" in obs["text"], obs["text"]
    obs, r, term, _, info = env.step({"kind": 4})
    assert term and not info["verdict"]["passed"] and r < 1.0
    assert "FAIL] hidden block: seed=11 tokens=7 first_position=0 layer=0: " in obs["text"]
    assert "values differ from the reference; max |error|" in obs["text"]
    assert "[ok] hidden cost: param_count" in obs["text"]


def test_the_wrong_cost_names_the_number_and_the_expected_one():
    env = make("sliding_window")
    obs, *_ = write(env, "spec.py", SPEC.replace("if _sliding(c, i) else context_tokens for i", "if False else "
                                                 "context_tokens for i"))
    res = {c.name: c for c in env.checks}
    assert not res["cost: kv_bytes"].ok and res["cost: flops_per_token"].ok
    assert "config.json at 5000 tokens: 696,320,000 (expected 224,034,816" in res["cost: kv_bytes"].reason
    env.close()


def test_continuous_reward_pays_only_new_bests(env: DayZeroEnv):
    _, r1, *_ = write(env, "spec.py", SPEC)
    assert r1 == pytest.approx(3 / 11, abs=5e-3)  # two field checks and param_count, less the sim cost
    _, r2, *_ = write(env, "spec.py", env.templates["spec.py"])
    _, r3, *_ = write(env, "spec.py", SPEC)
    assert r2 <= 0 and r3 <= 0


def test_the_feature_comes_from_the_seed():
    """v0 draws its four features as it always did; v1 draws its eighteen instances, sizes outer."""
    env = make(None, seed=0)
    seen = []
    for s in range(5):
        env.reset(seed=s)
        seen.append(env.feature.name)
        arch = json.loads((env.workspace.root / "config.json").read_text())["architectures"][0]
        assert arch == env.feature.config["architectures"][0]
        assert json.loads((env.workspace.root / "tiny/weights.json").read_text())
    assert seen == ["qk_norm", "yarn", "sliding_window", "shared_experts", "qk_norm"]
    env.close()
    assert DayZeroV1Env.instances() == [(f, s) for s in MODEL_SIZES for f in FEATURES] and len(FEATURES) == 9
    env = make(None, task="RSI/DayZero-v1")
    drawn = []
    for s in (0, 8, 9, 17, 18):
        env.reset(seed=s)
        drawn.append((env.feature.name, env.feature.size))
        assert json.loads((env.workspace.root / "config.json").read_text()) == env.feature.config
    assert drawn == [("qk_norm", "small"), ("sigmoid_routing", "small"), ("qk_norm", "large"),
                     ("sigmoid_routing", "large"), ("qk_norm", "small")]
    env.close()
    env = make("nope_layers", task="RSI/DayZero-v1")  # the size alone is drawn
    sizes = [env.reset(seed=s) and (env.feature.name, env.feature.size) for s in range(3)]
    assert sizes == [("nope_layers", "small"), ("nope_layers", "large"), ("nope_layers", "small")]
    env.close()
    env = make(None, task="RSI/DayZero-v1", model_size="large")  # the feature alone is drawn
    env.reset(seed=4)
    assert (env.feature.name, env.feature.size) == ("logit_softcap", "large")
    env.close()


@pytest.mark.parametrize("feature", FEATURES)
def test_the_two_sizes_are_one_architecture(feature: str):
    """Same model_type, same new keys, and the same tiny variant; only the shapes (and the new keys' values) differ."""
    small, large = load_feature(feature, "small"), load_feature(feature, "large")
    assert small.config.keys() == large.config.keys() and small.tiny == large.tiny and small.card == large.card
    assert small.config["model_type"] == large.config["model_type"] == small.tiny["model_type"]
    ref = reference_spec()
    assert ref.param_count(large.config) > 1.8 * ref.param_count(small.config)


def test_bad_arguments_are_refused():
    with pytest.raises(RsiEnvError, match="no model argument"):
        gym.make("RSI/DayZero-v0", model="llama-3.1-8b")
    with pytest.raises(RsiEnvError, match="unknown feature"):
        gym.make("RSI/DayZero-v0", feature="mamba")
    with pytest.raises(RsiEnvError, match="runs on tier 'sim' or 'real'"):
        gym.make("RSI/DayZero-v0", feature="yarn", tier="gpu")
    with pytest.raises(RsiEnvError, match="'attention_sinks' is RSI/DayZero-v1's"):
        gym.make("RSI/DayZero-v0", feature="attention_sinks")
    with pytest.raises(RsiEnvError, match="model_size= is RSI/DayZero-v1's"):
        gym.make("RSI/DayZero-v0", feature="yarn", model_size="large")
    with pytest.raises(RsiEnvError, match="unknown model_size 'huge'"):
        gym.make("RSI/DayZero-v1", feature="yarn", model_size="huge")
    with pytest.raises(RsiEnvError, match="not Env"):
        reference_files(gym.Env())


HOSTILE_SPECS = [
    ("while True:\n    pass\n", "did not finish"),
    ("def spec_fields(c):\n    raise ValueError('boom')\n" + SPEC.split("def _mlp_params")[0].split(
        "def spec_fields")[0], "must define a function param_count"),
    (SPEC.replace('"qk_norm": bool(c.get("use_qk_norm"))', '"qk_norm": bool(c.get("use_qk_norm")), "rocket": 1'),
     "fields ModelSpec does not have: ['rocket']"),
    (SPEC.replace('"num_kv_heads": kv,', '"num_kv_heads": "eight",'), "num_kv_heads='eight' is not a valid value"),
    (SPEC + "\ndef param_count(c):\n    return 1.5\n", "param_count(config.json) must return an int"),
    ("import json, os\nopen('out.json', 'w').write(json.dumps({'config.json': {}}))\nos._exit(0)\n",
     "do not cover exactly the configs"),
    ("import os\nos.system('yes')\n", "produced no answers"),
]


@pytest.mark.parametrize("source, expect", HOSTILE_SPECS)
def test_hostile_or_broken_loaders_come_back_as_clear_errors(env: DayZeroEnv, source: str, expect: str,
                                                             monkeypatch: pytest.MonkeyPatch):
    if expect == "did not finish":  # the hang alone is cut short: a loaded machine takes seconds for an honest loader
        monkeypatch.setattr(checks, "SPEC_TIMEOUT_S", 2.0)
    obs, r, term, _, _ = write(env, "spec.py", source)
    assert expect in obs["text"] and np.isfinite(r) and not term, obs["text"]
    obs, *_ = write(env, "spec.py", SPEC)  # the env still works
    assert "hidden checks: 5/11 pass" in obs["text"]


@pytest.mark.parametrize("source, expect", [
    ("import torch\ndef decoder_layer(x, positions, weights, config, layer_idx):\n    return x[:3]\n",
     "output shape [3, 128], expected [7, 128]"),
    ("def decoder_layer(x, positions, weights, config, layer_idx):\n    return x * float('nan')\n", "NaN or inf"),
    ("def decoder_layer(x, positions, weights, config, layer_idx):\n    raise KeyError('self_attn.q_norm')\n",
     "KeyError: 'self_attn.q_norm'"),
    ("import os\nos._exit(3)\n", "produced no outputs"),
    ("import json\nopen('out.json', 'w').write('{}')\nraise SystemExit\n", "outputs file is malformed"),
    (f"print(open('{checks.HIDDEN / 'reference_block.py'}').read())\n", "No such file"),
])
def test_hostile_or_broken_blocks_come_back_as_clear_errors(env: DayZeroEnv, source: str, expect: str):
    obs, r, term, _, _ = write(env, "block.py", source)
    text = obs["text"] + "\n".join(c.reason for c in env.checks)
    assert expect in text and np.isfinite(r) and not term, text


def test_workspace_code_never_runs_in_the_env_s_process(env: DayZeroEnv):
    marker = f"/tmp/rsi-dayzero-{uuid.uuid4().hex[:8]}"
    torch_before = "torch" in sys.modules  # other test modules of the same session may have imported it
    obs, *_ = write(env, "block.py", f"open({marker!r}, 'w').write('x')\n" + BLOCK)
    obs, *_ = write(env, "spec.py", f"open({marker!r}, 'w').write('x')\n" + SPEC)
    assert "hidden checks: 11/11 pass" in obs["text"], obs["text"]
    assert not os.path.exists(marker)  # the sandbox's /tmp is private
    assert "block" not in sys.modules and "spec" not in sys.modules
    assert torch_before or "torch" not in sys.modules  # measuring the workspace did not import torch here


def test_shell_commands_cannot_see_the_hidden_references(env: DayZeroEnv):
    res = env._run_shell(f"ls tiny; ls {checks.HIDDEN}; echo end")
    assert "weights.json" in res.output and "end" in res.output and "reference_block" not in res.output
    env._run_shell("rm block.py")
    obs, *_ = env.step({"kind": 3})
    assert "block.py" in obs["text"] and "block runs" in {c.name for c in env.checks}


def test_deleting_the_loader_fails_the_sim_tier_guard(env: DayZeroEnv):
    env._run_shell("rm spec.py")
    obs, r, term, _, info = env.step({"kind": 4})
    assert term and not info["verdict"]["passed"]
    assert "FAIL] sim tier serves the loaded model" in obs["text"] and "FAIL] hidden loader runs" in obs["text"]


# ---- the hidden reference agrees with the project's own loader where the project already knows the model ----
@settings(max_examples=40, deadline=None)
@given(layers=st.integers(1, 80), heads=st.sampled_from([8, 16, 32, 64]), ratio=st.sampled_from([1, 2, 4, 8]),
       head_dim=st.sampled_from([64, 128, 256]), inter=st.integers(1, 30000), vocab=st.integers(1000, 300000),
       tied=st.booleans(), context=st.integers(1, 300000))
def test_reference_spec_agrees_with_model_spec_on_llama(layers, heads, ratio, head_dim, inter, vocab, tied, context):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": heads * head_dim,
           "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": heads // ratio,
           "head_dim": head_dim, "intermediate_size": inter, "vocab_size": vocab, "max_position_embeddings": 8192,
           "tie_word_embeddings": tied, "torch_dtype": "bfloat16"}
    ref = reference_spec()
    project = ModelSpec.from_hf_config(cfg, name="x")
    assert ModelSpec(name="x", raw=cfg, **ref.spec_fields(cfg)) == project
    norms = (2 * layers + 1) * heads * head_dim
    assert ref.param_count(cfg) == project.total_params + norms
    assert ref.kv_bytes(cfg, context) == project.kv_bytes_per_token() * context
    attn = 4 * heads * head_dim * context * layers
    assert ref.flops_per_token(cfg, context) == 2 * (project.active_layer_params + project.lm_head_params) + attn


@pytest.mark.parametrize("feature", FEATURES)
@pytest.mark.parametrize("size", MODEL_SIZES)
def test_the_project_s_loader_misreads_exactly_the_features_that_change_the_model_spec(feature: str, size: str):
    """Where a feature changes what ModelSpec holds, the project's own loader gets the config wrong; where it
    changes only the layer or its cost (soft-caps, partial rotary, sinks, NoPE layers), the fields are Llama's."""
    f = load_feature(feature, size)
    want = ModelSpec(name="x", raw=f.config, **reference_spec().spec_fields(f.config))
    assert (ModelSpec.from_hf_config(f.config, name="x") != want) == ("fields" in TEMPLATE_FAILS[feature])


def test_model_spec_validation():
    cfg = load_feature("qk_norm").config
    fields = reference_spec().spec_fields(cfg)
    assert model_spec(fields, cfg, "n").qk_norm
    with pytest.raises(DayZeroError, match="must give"):
        model_spec({k: v for k, v in fields.items() if k != "hidden_size"}, cfg, "n")
    with pytest.raises(DayZeroError, match="multiple of num_kv_heads"):
        model_spec({**fields, "num_kv_heads": 7}, cfg, "n")
    with pytest.raises(DayZeroError, match="qk_norm=1"):
        model_spec({**fields, "qk_norm": 1}, cfg, "n")


def test_the_docker_sandbox_gives_the_same_verdicts(dockerd: None):
    """The strongest backend (a container with the host's Python bound read-only) runs torch too."""
    f = load_feature("shared_experts")
    got = checks.check_workspace(SPEC, BLOCK_NORM_AFTER_ROPE, f, "docker")
    assert [(c.name, c.ok) for c in got] == [(c.name, c.ok) for c in checks.check_workspace(
        SPEC, BLOCK_NORM_AFTER_ROPE, f, BACKEND)]
    assert all(c.ok for c in got)  # shared_experts has no QK-norm: the misplaced norm never runs


@pytest.mark.parametrize("task, kw", [("RSI/DayZero-v0", {}), ("RSI/DayZero-v1", {"model_size": "large"})])
def test_an_episode_replays_to_the_same_rewards(task: str, kw: dict):
    env = make("yarn", seed=2, task=task, **kw)
    write(env, "spec.py", SPEC)
    env.step({"kind": 4})
    assert env.state()["kwargs"].get("model_size") == kw.get("model_size")
    res = rsi_env.validate(env.state())
    assert res.ok and res.replayed_total == pytest.approx(env.state()["rewards"][0]) and res.replayed_total > 0
    env.close()


def test_the_real_tier_s_reference_adds_the_model_class():
    env = gym.make("RSI/DayZero-v1", feature="attention_sinks", tier="real", sandbox=BACKEND).unwrapped
    env.reset(seed=0)
    files = reference_files(env)
    assert set(files) == {"spec.py", "block.py", "vllm_model.py"} and files["vllm_model.py"] == VLLM_MODEL
    assert VLLM_MODEL.startswith(env.templates["vllm_model.py"].split("\n\n")[0])  # the template, extended
    env.close()


ENGINE_LOG = """\
(EngineCore pid=17) ERROR 11-30 01:15:54 [core.py:1512] EngineCore encountered a fatal error.
(EngineCore pid=17) ERROR 11-30 01:15:54 [core.py:1512] Traceback (most recent call last):
(EngineCore pid=17) ERROR 11-30 01:15:54 [core.py:1512]   File "vllm/v1/engine/core.py", line 90, in run
(EngineCore pid=17) ERROR 11-30 01:15:54 [core.py:1512] RuntimeError: Unsupported CPU attention configuration: head_dim=16
Traceback (most recent call last):
  File "vllm/v1/engine/core_client.py", line 1235, in get_output_async
vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
Exception ignored in: <function AsyncLLM.__del__ at 0x7f2239d39300>
TypeError: 'NoneType' object is not callable
"""
CONFIG_LOG = """\
Traceback (most recent call last):
  File "rsi_env/real/vllm_driver.py", line 88, in main
pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig
  Value error, User-specified max_model_len (256) is greater than the derived max_model_len (64).
    For further information visit https://errors.pydantic.dev/2.13/v/value_error
"""


def test_a_failed_vllm_run_is_explained_by_its_first_exception():
    """The engine core's own error, not the EngineDeadError echoes that fill the log's tail."""
    assert root_cause(ENGINE_LOG) == "RuntimeError: Unsupported CPU attention configuration: head_dim=16"
    why = root_cause(CONFIG_LOG)
    assert why.startswith("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig")
    assert "max_model_len (256) is greater than the derived max_model_len (64)" in why
    assert root_cause("INFO starting\nkilled\n") == "INFO starting\nkilled"


@pytest.mark.parametrize("feature", ["yarn", "shared_experts", "logit_softcap", "sigmoid_routing"])
def test_the_reference_scores_tokens_teacher_forced(feature: str):
    """Its own greedy tokens lie 0 below its choice; a swapped token lies exactly its logit gap below; the
    tokens of a model that is not the reference (another seed's) lie whole logits below, far past TOLERANCE."""
    f = load_feature(feature)
    _, want, margin = reference_tokens(f, 11)
    assert margin > 0 and all(len(t) == NEW_TOKENS for t in want)
    assert reference_gaps(f, 11, want) == [[0.0] * NEW_TOKENS] * len(want)
    swapped = [list(t) for t in want]
    swapped[1][3] = (want[1][3] + 1) % int(f.tiny["vocab_size"])
    gaps = reference_gaps(f, 11, swapped)
    assert gaps[0] == [0.0] * NEW_TOKENS and gaps[1][:3] == [0.0] * 3 and gaps[1][3] >= margin
    _, other, _ = reference_tokens(f, 12)
    wrong = sorted(g for row in reference_gaps(f, 11, other) for g in row)
    assert wrong[len(wrong) // 2] > 10 * TOLERANCE, wrong


def test_driver_tokens_outside_the_vocabulary_are_refused_before_the_reference_sees_them():
    """The driver's report is the agent's word: ids the tiny model has no embedding for would crash the trusted
    teacher-forced run, so they make the output malformed instead."""
    row = {"counters": {"output_token_ids": {"0": [1] * NEW_TOKENS, "1": [2] * NEW_TOKENS}}}
    assert _tokens(json.dumps(row).encode(), 2, 256) == [[1] * NEW_TOKENS, [2] * NEW_TOKENS]
    for bad in ([10**6] * NEW_TOKENS, [-1] * NEW_TOKENS, [1.0] * NEW_TOKENS, [True] * NEW_TOKENS, [1] * 3):
        row["counters"]["output_token_ids"]["1"] = bad
        assert _tokens(json.dumps(row).encode(), 2, 256) is None, bad
    assert _tokens(b"not json", 2, 256) is None
