"""The TRL adapter: `RsiTRLEnv`'s tools play an episode as the env's own tools do, `suite_rows` makes its dataset
from a suite's instances, and two real ``GRPOTrainer`` steps on the CPU (a tiny randomly initialised Qwen2 and a
tokenizer built here, with TRL's own Qwen2.5 chat template; nothing downloaded) on that dataset take their rewards
from it. Without TRL the trainer's test skips, and fails where ``RSI_REQUIRE_INTEGRATIONS=1`` (CI)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import gymnasium as gym
import pytest
import yaml

import rsi_env  # noqa: F401
from rsi_env.errors import SuiteError
from rsi_env.integrations.trl_env import RsiTRLEnv, suite_rows, trl_rows
from rsi_env.suite.instance import Suite
from rsi_env.wrappers.ladders import rsi_env_of
from tests.integrations.required import skip_or_fail
from tests.suite.conftest import bugfix_instance, flag_instance


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> tuple[Suite, Path]:
    """A flag instance and a BugFix one, as tests/suite makes them, and their suite file."""
    s = Suite(id="rsi-bench-trl-test", instances=(flag_instance(), bugfix_instance()), ceiling_fraction=0.95,
              calibrations={}, frozen="2026-12-05")
    path = tmp_path_factory.mktemp("suite") / "rsi-bench-trl-test.yaml"
    path.write_text(yaml.safe_dump(s.to_dict(), sort_keys=False))
    return s, path


def test_suite_rows_are_the_instances_and_reset_plays_each(suite: tuple[Suite, Path]):
    s, path = suite
    rows = suite_rows(str(path))
    assert rows == suite_rows(s) and [r["instance"] for r in rows] == [i.id for i in s.instances]
    for row, inst in zip(rows, s.instances, strict=True):
        assert (row["env_id"], row["seed"], json.loads(row["env_kwargs"])) == (inst.env_id, inst.seed, inst.kwargs())
        assert not {"reference", "criterion"} & set(row)
        env = RsiTRLEnv()
        first = env.reset(**row)
        assert env.env is not None
        rsi = rsi_env_of(env.env)
        # The instance's own env: its budget and pass line, the task's text first.
        assert (rsi.task.max_measurements, rsi.max_steps) == (inst.budget, inst.max_steps)
        assert env.env.spec is not None and env.env.spec.id == inst.env_id and first.startswith(f"# {inst.env_id}")
        env.env.close()
    assert [r["instance"] for r in suite_rows(s, ["bug-bugfix-s5"])] == ["bug-bugfix-s5"]
    with pytest.raises(SuiteError, match="no instance"):
        suite_rows(s, ["no-such-instance"])
    with pytest.raises(SuiteError, match="empty"):
        suite_rows(s, [])


def test_the_tools_play_the_episode_and_the_reward_is_the_submit_s():
    env = RsiTRLEnv()
    row = trl_rows([("RSI/Batching-v0", 2, {})])[0]
    first = env.reset(**row)
    assert "Batching" in first or "batch" in first.lower()
    assert env.get_reward() == 0.0
    assert "tool call refused" in env.set_flag("max_num_seqs", "7") and "ladder" in env.set_flag("max_num_seqs", "7")
    assert "tool call refused" in env.set_flag("max_num_seqs", ": [")
    env.set_flag("max_num_seqs", "64")
    env.bench()
    text = env.submit()
    twin = gym.make("RSI/Batching-v0").unwrapped
    twin.reset(seed=2)
    twin.step(twin.flag_action("max_num_seqs", 64))
    twin.step({"kind": 3})
    _, want, *_ = twin.step({"kind": 4})
    assert "submission" in text and env.get_reward() == float(want) != 0.0
    assert env.bench() == "the episode has ended" and env.get_reward() == float(want)
    env.reset(**row)  # a new rollout starts from nothing
    assert env.get_reward() == 0.0
    twin.close()


def _tiny_model_and_tokenizer():
    """A Qwen2 of two 32-wide layers and a byte-level BPE tokenizer trained on a few lines, with TRL's Qwen2.5
    chat template (one TRL recognises, so that it can parse tool calls out of what the model writes)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    from trl.chat_template_utils import qwen2_5_chat_template

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ['{"name": "set_flag", "arguments": {"flag": "max_num_seqs", "value": "512"}}',
              "system user assistant tool You are an engineer. submit bench list_files read_file",
              "# Tools You may call one or more functions <tools></tools> function"]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = qwen2_5_chat_template
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=None, tie_word_embeddings=True)
    return Qwen2ForCausalLM(config), tokenizer


def test_two_grpo_steps_take_their_rewards_from_the_env(tmp_path, monkeypatch, suite: tuple[Suite, Path]):
    if importlib.util.find_spec("trl") is None:
        skip_or_fail("the TRL adapter's test needs TRL: pip install '.[trl]'")
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer = _tiny_model_and_tokenizer()
    made: list[RsiTRLEnv] = []

    def factory() -> RsiTRLEnv:
        made.append(RsiTRLEnv())
        return made[-1]

    rows = suite_rows(str(suite[1]), ["opt-batching-test"]) * 4  # the suite's flag instance, four prompts
    args = GRPOConfig(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=16, max_tool_calling_iterations=2, learning_rate=1e-4,
                      use_cpu=True, report_to="none", logging_steps=1, save_strategy="no", seed=0)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=args, train_dataset=Dataset.from_list(rows),
                          environment_factory=factory)
    out = trainer.train()
    assert out.global_step == 2
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 2 and all(f"rewards/{RsiTRLEnv.__name__}/mean" in h for h in logged), logged
    # A random model never submits: every rollout's env reward is the unsubmitted episode's 0.0, and each
    # rollout had its own episode, the instance's env reset with its row.
    assert all(h[f"rewards/{RsiTRLEnv.__name__}/mean"] == 0.0 for h in logged)
    inst = suite[0].get("opt-batching-test")
    assert made and all(e.env is not None and rsi_env_of(e.env).task.max_measurements == inst.budget for e in made)
