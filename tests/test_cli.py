"""The command line: DESIGN.md's `rsi-env simulate … --json` contract, clear errors, and the demo."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rsi_env.cli import main

FIELDS = (  # noqa: SIM905
    "duration_s req_per_s out_tok_per_s total_tok_per_s ttft_p50 ttft_p90 ttft_p99 tpot_p50 tpot_p90 tpot_p99 "
          "e2e_p50 e2e_p99 goodput_req_per_s num_preemptions prefix_cache_hit_rate kv_cache_usage_peak "
          "num_gpu_blocks mean_batch_size cost_per_mtok_usd error").split()


def test_simulate_json_prints_one_telemetry(capsys, tmp_path):
    wl = tmp_path / "w.yaml"
    wl.write_text("name: t\nseed: 1\nrequests: 50\nprompt_tokens: 100\noutput_tokens: 20\n"
                  "arrival: {process: poisson, rate: 20}\n")
    rc = main(["simulate", "--model", "llama-3.1-8b", "--hardware", "h200", "--workload", str(wl),
               "--set", "max_num_seqs=64", "--set", "enable_prefix_caching=false", "--engine-version", "0.26",
               "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and set(FIELDS) <= set(out) and out["error"] is None and out["out_tok_per_s"] > 0


def test_simulate_accepts_a_config_json_path(capsys):
    from importlib import resources

    path = resources.files("rsi_env") / "catalog" / "models" / "tiny-llama.json"
    rc = main(["simulate", "--model", str(path), "--hardware", "cpu", "--workload", "many_small",
               "--engine-version", "0.32", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["num_gpu_blocks"] > 0


def test_a_refused_config_prints_the_reason_and_exits_nonzero(capsys):
    rc = main(["simulate", "--model", "llama-3.1-8b", "--hardware", "h200", "--workload", "short_long",
               "--set", "tensor_parallel_size=3", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 3 and "must be divisible by tensor parallel size (3)" in out["error"]


@pytest.mark.parametrize("argv, msg", [
    (["--set", "max_num_seq=8"], "did you mean ['max_num_seqs']"),
    (["--set", "noequals"], "--set expects flag=value"),
    (["--workload", "nope.yaml"], "no workload file 'nope.yaml'"),
])
def test_bad_input_is_a_clear_error(capsys, argv, msg):
    base = ["simulate", "--model", "llama-3.1-8b", "--hardware", "h200", "--workload", "short_long"]
    rc = main(base + argv)
    assert rc == 2 and msg in capsys.readouterr().err


def test_demo_finds_a_better_config_and_writes_a_plot(tmp_path):
    # Run as users do, in a fresh process.
    png = tmp_path / "demo.png"
    p = subprocess.run([sys.executable, "-m", "rsi_env.cli", "demo", "--budget", "30", "--plot", str(png)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    line = next(x for x in p.stdout.splitlines() if x.startswith("objective vs vLLM defaults:"))
    assert float(line.split()[4].rstrip("%")) > 5.0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_list_names_the_catalogs(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "llama-3.1-8b" in out and "ascend-910b" in out and "max_num_batched_tokens" in out
    assert "RSI/KVCache-v0" in out and "RSI/Parallelism-v0" in out


def test_list_prints_integer_ranges_as_integers(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "int in [1, 1048576]" in out and "e+06" not in out


def test_rsi_env_alone_shows_help_and_version_is_known(capsys):
    assert main([]) == 0
    assert "simulate" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    import rsi_env

    assert capsys.readouterr().out.strip() == f"rsi-env {rsi_env.__version__}"


def test_the_action_kinds_are_named_at_the_top():
    import rsi_env
    from rsi_env.envs.actions import KIND_NAMES

    kinds = [rsi_env.FLAG, rsi_env.EDIT, rsi_env.SHELL, rsi_env.BENCH, rsi_env.SUBMIT]
    assert kinds == list(range(5)) and [KIND_NAMES[k] for k in kinds] == ["flag", "edit", "shell", "bench", "submit"]


def test_import_stays_light():
    code = ("import sys, rsi_env, rsi_env.engine, rsi_env.sim, rsi_env.cli; "
            "heavy = [m for m in ('torch', 'vllm', 'ray', 'docker', 'scipy', 'matplotlib') if m in sys.modules]; "
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_bench_picks_the_real_tiers_engine_and_takes_its_flags(capsys, monkeypatch):
    import rsi_env.real.tier as real_tier

    monkeypatch.setattr(real_tier, "installed_sglang_version", lambda: None)
    common = ["bench", "--model", "tiny-llama", "--hardware", "h200", "--workload", "many_small", "--json"]
    # SGLang's flags, on an SGLang that is not installed here: the reason comes back as the telemetry's error.
    rc = main([*common, "--tier", "real", "--engine", "sglang", "--set", "schedule_policy=lpm",
               "--engine-arg", "attention_backend=triton"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 3 and out["error"].startswith("crash: SGLang is not installed here")  # 3: measured, failed
    # vLLM's flags on the SGLang tier are refused in SGLang's words, before anything runs.
    assert main([*common, "--tier", "real", "--engine", "sglang", "--set", "max_num_seqs=8"]) == 2
    assert "unexpected keyword argument 'max_num_seqs'" in capsys.readouterr().err
    # On the sim tier, SGLang's scheduler is simulated with SGLang's flags.
    assert main([*common, "--tier", "sim", "--engine", "sglang", "--set", "schedule_policy=lpm"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["error"] is None and sim["tier"] == "sim" and sim["out_tok_per_s"] > 0
    assert main(["simulate", *common[1:], "--engine", "sglang", "--set", "max_num_seqs=8"]) == 2
    assert "unexpected keyword argument 'max_num_seqs'" in capsys.readouterr().err
    # An endpoint is whichever engine serves it; --engine-arg is the real engine's.
    assert main([*common, "--tier", "endpoint", "--url", "http://127.0.0.1:9", "--engine", "sglang"]) == 2
    assert "drop --engine" in capsys.readouterr().err
    assert main([*common, "--tier", "sim", "--engine-arg", "attention_backend=triton"]) == 2
    assert "use it with --tier real" in capsys.readouterr().err
