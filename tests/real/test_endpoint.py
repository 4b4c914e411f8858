"""Endpoint mode against a scripted OpenAI-compatible server on loopback (a fake only for the code around it)."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

aiohttp = pytest.importorskip("aiohttp", reason="endpoint mode uses aiohttp (installed with the real-cpu extra)")
from aiohttp import web  # noqa: E402

from rsi_env.engine import Workload  # noqa: E402
from rsi_env.real.endpoint import EndpointTier, parse_prometheus  # noqa: E402

FIRST_S, PER_TOKEN_S = 0.05, 0.01


class FakeServer:
    """Streams ``max_tokens`` completion chunks: the first after FIRST_S, then one every PER_TOKEN_S."""

    def __init__(self, drop_tokens: bool = False) -> None:
        self.requests = 0
        self.drop_tokens = drop_tokens
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    async def completions(self, req: web.Request) -> web.StreamResponse:
        body = await req.json()
        assert isinstance(body["prompt"], list) and body["stream"] and body["ignore_eos"]
        self.requests += 1
        n = body["max_tokens"] - (1 if self.drop_tokens else 0)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(req)
        await asyncio.sleep(FIRST_S)
        for k in range(n):
            if k:
                await asyncio.sleep(PER_TOKEN_S)
            await resp.write(f"data: {json.dumps({'choices': [{'text': 'x'}]})}\n\n".encode())
        usage = {"choices": [], "usage": {"completion_tokens": n}}
        await resp.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        return resp

    async def metrics(self, req: web.Request) -> web.Response:
        text = ("# HELP vllm:num_preemptions_total x\n"
                f'vllm:num_preemptions_total{{model_name="m"}} {self.requests // 4}\n'
                f'vllm:prefix_cache_queries_total{{model_name="m"}} {100 * self.requests}\n'
                f'vllm:prefix_cache_hits_total{{model_name="m"}} {50 * self.requests}\n'
                f'vllm:kv_cache_usage_perc{{model_name="m"}} 0.25\n'
                f'vllm:num_requests_running{{model_name="m"}} 3\n')
        return web.Response(text=text)

    async def models(self, req: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "tiny"}]})

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.add_routes([web.post("/v1/completions", self.completions), web.get("/metrics", self.metrics),
                        web.get("/v1/models", self.models)])
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        self._loop.run_forever()

    def __enter__(self) -> FakeServer:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


W = Workload.from_dict({"name": "ep", "seed": 1, "requests": 12, "prompt_tokens": 20, "output_tokens": 6,
                        "arrival": {"process": "poisson", "rate": 100}, "slo": {"ttft_ms": 1000}})


def test_endpoint_times_the_stream_and_reads_the_servers_metrics():
    with FakeServer() as srv:
        t = EndpointTier(f"http://127.0.0.1:{srv.port}", sample_every_s=0.02).measure(None, "tiny-llama", "cpu", W)
    assert t.ok and t.tier == "endpoint" and srv.requests == 12
    assert t.ttft_p50 == pytest.approx(FIRST_S, abs=0.04)
    assert t.tpot_p50 == pytest.approx(PER_TOKEN_S, abs=0.008)
    assert t.num_preemptions == 3 and t.prefix_cache_hit_rate == pytest.approx(0.5)
    assert t.kv_cache_usage_peak == pytest.approx(0.25) and t.goodput_req_per_s == pytest.approx(t.req_per_s)


def test_a_server_that_ignores_max_tokens_or_is_down_is_a_failed_measurement():
    with FakeServer(drop_tokens=True) as srv:
        t = EndpointTier(f"http://127.0.0.1:{srv.port}").measure(None, "tiny-llama", "cpu", W)
    assert not t.ok and "different number of tokens" in t.error
    down = EndpointTier("http://127.0.0.1:9", timeout_s=5).measure(None, "tiny-llama", "cpu", W)
    assert not down.ok and down.error.startswith("crash:")


def test_an_endpoint_takes_no_engine_flags():
    with pytest.raises(Exception, match="its own engine flags"):
        EndpointTier("http://127.0.0.1:9").measure({"max_num_seqs": 8}, "tiny-llama", "cpu", W)


def test_parse_prometheus_sums_label_sets():
    m = parse_prometheus('# TYPE a counter\na_total{x="1"} 2\na_total{x="2"} 3.5\nb 1e3\n')
    assert m == {"a_total": 5.5, "b": 1000.0}


def test_bench_cli_endpoint(capsys, tmp_path):
    from rsi_env.cli import main

    wl = tmp_path / "w.yaml"
    wl.write_text(json.dumps(W.to_dict()))
    with FakeServer() as srv:
        rc = main(["bench", "--tier", "endpoint", "--url", f"http://127.0.0.1:{srv.port}", "--model", "tiny-llama",
                   "--hardware", "cpu", "--workload", str(wl), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["tier"] == "endpoint" and out["out_tok_per_s"] > 0


def test_any_env_measures_on_a_running_server_with_tier_endpoint(tmp_path):
    import gymnasium as gym
    import yaml

    import rsi_env  # noqa: F401

    (tmp_path / "ep.yaml").write_text(yaml.safe_dump(W.to_dict()))
    with FakeServer() as srv:
        env = gym.make("RSI/Batching-v0", tier=f"endpoint:http://127.0.0.1:{srv.port}", model="tiny-llama",
                       hardware="cpu", workloads=[str(tmp_path / "ep.yaml")], auto_bench=True,
                       sandbox="local").unwrapped
        _, info = env.reset(seed=0)
        assert srv.requests == 12 and info["telemetry"][0]["tier"] == "endpoint"
        obs, *_ = env.step({"kind": rsi_env.BENCH})
        assert "measured: score" in obs["text"] and srv.requests == 24
        obs, reward, *_ = env.step(env.flag_action("max_num_seqs", env.task.ladder("max_num_seqs")[0]))
        assert "its own engine flags" in obs["text"] and reward == 0.0 and srv.requests == 24  # refused, not sent
        env.close()
