"""The shipped H200 calibration against the real measurements it was fitted on and held out from,
and the fitting machinery itself."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from rsi_env.calibrate.full import run_calibration
from rsi_env.calibrate.samples import load_samples, split
from rsi_env.calibrate.score import evaluate
from rsi_env.engine import load_hardware
from rsi_env.sim import simulate
from rsi_env.sim.calibration import Calibration, load_calibration

ROOT = Path(__file__).resolve().parents[2]
# The one-H200 host's files of the shipped calibration's main fit (neither the held-out leases nor the host stage's).
DATA = sorted(ROOT / m for m in load_calibration("h200", "0.26").provenance["measurements"] if "/h200-vllm" in m)


@pytest.fixture(scope="module")
def samples():
    """The measurements the shipped calibration was fitted on and held out from (its provenance says which)."""
    return load_samples([ROOT / m for m in load_calibration("h200", "0.26").provenance["measurements"]])


def test_the_h200_calibration_is_the_fitted_one_and_says_so():
    cal = load_calibration("h200", "0.26.0")
    assert cal.id.startswith("h200-vllm0.26-") and cal.provenance["n_held_out"] > 0
    t = simulate({}, "llama-3.1-8b", "h200", "short_long")
    assert t.calibration == cal.id
    assert simulate({}, "llama-3.1-8b", "l40s", "short_long").calibration.startswith("default")


def test_the_shipped_calibration_reproduces_the_errors_its_fit_recorded(samples):
    """A regression guard: the simulator's code has not drifted from what the calibration was fitted with.

    The calibration is refitted on every measurement after the held-out evaluation (``run_calibration``'s
    ``refit_all``); its provenance keeps both the procedure's held-out error and its own error on all."""
    cal = load_calibration("h200", "0.26")
    _, held = split(samples, seed=0)
    assert {s.config_key for s in held} == set(cal.provenance["held_out_configs"])
    e = evaluate(samples, cal, load_hardware("h200"))
    assert e["n_failed_in_sim"] == 0
    rec = cal.provenance["all_configs_error"]
    for key in ("out_tok_per_s_mape", "ttft_p50_mape", "tpot_p50_mape", "num_gpu_blocks_mape"):
        assert e[key] <= rec[key] * 1.05 + 1e-3, key
    assert set(cal.provenance["held_out_error"]) >= {"out_tok_per_s_mape", "ttft_p50_mape", "tpot_p50_mape"}


def test_kv_memory_matches_vllms_own_numbers():
    # Real vLLM 0.26 refused gpu_memory_utilization=0.22 for Llama-3.1-8B on an H200 with
    # "… (16.0 GiB KV cache is needed, which is larger than the available KV cache memory (14.42 GiB).
    #  Based on the available memory, the estimated maximum model length is 118144."  (campaign log, 2026-11-29)
    t = simulate({"gpu_memory_utilization": 0.22}, "llama-3.1-8b", "h200", "short_long")
    assert not t.ok and "To serve at least one request with the model's max seq len (131072)" in t.error
    avail = float(re.search(r"available KV cache memory \(([\d.]+) GiB\)", t.error).group(1))
    est = int(re.search(r"estimated maximum model length is (\d+)", t.error).group(1))
    # With the device total CUDA reports (the hardware catalog's h200) and the memory stage's terms, within 1 %
    # (the calibration before both was 0.42 GB, 2.9 %, short).
    assert avail == pytest.approx(14.42, rel=0.01)
    assert est == pytest.approx(118144, rel=0.01)


def test_fitting_reduces_the_training_error(tmp_path):
    small = [s for s in load_samples(DATA) if s.model == "llama-3.2-1b" or s.config_key.endswith("{}")]
    path = tmp_path / "m.jsonl"
    lines = []
    for f in DATA:
        for line in f.read_text().splitlines():
            if '"model": "llama-3.2-1b"' in line or '"flags": {}' in line:
                lines.append(line)
    path.write_text("\n".join(lines) + "\n")
    assert len(small) == len(lines)
    out = tmp_path / "cal.yaml"
    rep = run_calibration("h200", [str(path)], out=str(out), max_nfev=4)
    prior = evaluate(small, Calibration(hardware="h200", engine_version="0.26"), load_hardware("h200"))
    after = rep["after"]["train"]
    assert after["tpot_p50_mape"] < prior["tpot_p50_mape"]
    cal = load_calibration("h200", "0.26", out)
    assert cal.provenance["n_train"] == rep["n_train"] and cal.id != "default"


def test_moe_models_pay_for_the_fused_moe_caches_of_the_profile_run():
    """vLLM profiles a MoE model with its fused-MoE intermediate caches allocated for the whole token budget:
    the KV cache loses memory in proportion to ``max_num_batched_tokens``, a dense model does not pay it, and
    the shipped calibration gives Qwen3-30B-A3B the KV blocks real vLLM found (46,542 under the defaults)."""
    from rsi_env.engine import EngineConfig, load_model
    from rsi_env.sim.memory import plan_memory

    hw, cal = load_hardware("h200"), load_calibration("h200", "0.26")
    assert cal.act_moe_coef > 0

    def act(model: str, cal: Calibration, tokens: int) -> float:
        m = load_model(model)
        return plan_memory(m, hw, EngineConfig(max_num_batched_tokens=tokens).resolve(m, hw, "0.26"), cal).activation_bytes

    no_moe = cal.with_coefficients({"act_moe_coef": 0.0})
    for tokens in (4096, 16384):
        extra = act("qwen3-30b-a3b", cal, tokens) - act("qwen3-30b-a3b", no_moe, tokens)
        assert extra == pytest.approx(cal.act_moe_coef * tokens * 8 * (2048 + 768) * 2, rel=1e-9)
        assert act("llama-3.1-8b", cal, tokens) == act("llama-3.1-8b", no_moe, tokens)
    m = load_model("qwen3-30b-a3b")
    blocks = plan_memory(m, hw, EngineConfig().resolve(m, hw, "0.26"), cal).num_gpu_blocks
    assert blocks == pytest.approx(46542, rel=0.02)


def test_moe_terms_are_fitted_on_moe_models_and_the_shared_terms_on_dense_ones():
    """`fit` in two stages: the terms every model shares from the dense models' measurements alone (so a MoE
    engine's own one-off costs cannot bend them), then the MoE terms from the MoE models' with the shared ones
    fixed. Without a MoE measurement the MoE terms keep their prior. The memory terms likewise: the KV blocks of
    the dense configurations fit the shared ones, the MoE configurations only the fused-MoE caches' term."""
    from rsi_env.calibrate.full import fit
    from rsi_env.calibrate.memory import MEMORY
    from rsi_env.calibrate.timing import MOE, TIMING

    rows = load_samples([ROOT / "data" / "measurements" / "h200x2-vllm0.26" / "campaign4.jsonl"])
    dense = [s for s in rows if s.model == "llama-3.2-1b" and s.workload.name in ("short_long", "burst_256")]
    moe = [s for s in rows if s.model == "qwen3-30b-a3b" and s.workload.name == "burst_256"]
    assert len(dense) == 2 and len(moe) == 1
    hw, prior = load_hardware("h200"), Calibration(hardware="h200", engine_version="0.26")
    alone = fit(dense, hw, prior, max_nfev=1)
    both = fit(dense + moe, hw, prior, max_nfev=1)
    for n in TIMING + MEMORY:
        assert getattr(both, n) == getattr(alone, n), n
    assert alone.act_moe_coef == prior.act_moe_coef != both.act_moe_coef
    for n in MOE:
        assert getattr(alone, n) == getattr(prior, n), n
    assert any(getattr(both, n) != getattr(prior, n) for n in MOE)
    # A MoE run that stopped mid-workload (vLLM JIT-compiling its fused-MoE kernel) does not inform the MoE terms.
    paused = fit(dense + [dataclasses.replace(s, longest_gap_s=1.5) for s in moe], hw, prior, max_nfev=1)
    assert all(getattr(paused, n) == getattr(alone, n) for n in TIMING + MOE)
    # ... nor, without a dense model, any term.
    other = [s for s in rows if s.model == "qwen3-30b-a3b" and s.workload.name == "short_long"]
    clean = fit(moe, hw, prior, max_nfev=2)
    with_paused = fit(moe + [dataclasses.replace(s, longest_gap_s=1.5) for s in other], hw, prior, max_nfev=2)
    assert all(getattr(with_paused, n) == getattr(clean, n) for n in TIMING + MOE)


def test_a_calibration_id_names_its_coefficients_not_only_its_measurements():
    from rsi_env.calibrate.report import calibration_id

    cal = Calibration(hardware="h200", engine_version="0.26")
    same = calibration_id(cal, "abc")
    assert same.startswith("h200-vllm0.26-") and same == calibration_id(cal, "abc")
    assert calibration_id(cal, "abd") != same  # other measurements
    assert calibration_id(cal.with_coefficients({"moe_mm_eff": 0.5}), "abc") != same  # another fit of the same ones


def test_the_host_stage_refits_only_the_hosts_terms_and_fits_that_host_better():
    """`fit_host`: the CPU-side terms (`HOST`) refitted on one host's runs, every GPU and model term kept; on the
    one-H200 host's `many_small` runs (steps of 8-12 ms where the two-GPU host's took 13-30) the error drops."""
    from rsi_env.calibrate.host import HOST, fit_host

    hw, base = load_hardware("h200"), Calibration(hardware="h200", engine_version="0.26", cpu_per_new_req_s=2e-3,
                                                  frontend_s=2e-2)
    runs = [s for s in load_samples([ROOT / "data" / "measurements" / "h200-vllm0.26" / "campaign13.jsonl"])
            if s.model == "llama-3.2-1b"]
    assert len(runs) == 4
    fitted = fit_host(runs, hw, base, max_nfev=6)
    for n in set(base.to_dict()) - set(HOST) - {"id", "provenance"}:
        assert getattr(fitted, n) == getattr(base, n), n
    assert any(getattr(fitted, n) != getattr(base, n) for n in HOST)
    before, after = evaluate(runs, base, hw), evaluate(runs, fitted, hw)
    assert after["ttft_p50_mape"] < before["ttft_p50_mape"]


def test_the_shipped_calibration_is_the_one_h200_hosts_and_reproduces_its_host_stage():
    """The shipped calibration's host stage was fitted on the one-H200 host's runs (its provenance names them and
    the host); the launch stage after it (`rsi_env.calibrate.launch`) recorded the end-to-end error on those runs
    before and after, and the simulator reproduces the error after."""
    cal = load_calibration("h200", "0.26")
    stage = cal.provenance["host_stage"]
    assert stage["host"]["cpus"] == 16 and stage["n_held_out"] > 0
    runs = cal.provenance["launch_stage"]["host_runs"]
    assert runs["measurements"] == stage["measurements"]
    e = evaluate(load_samples([ROOT / m for m in stage["measurements"]]), cal, load_hardware("h200"))
    for key in ("out_tok_per_s_mape", "ttft_p50_mape", "tpot_p50_mape"):
        assert e[key] == pytest.approx(runs["after"][key], rel=1e-9), key


def test_calibrate_with_host_measurements_records_the_host_stage(tmp_path, capsys):
    """`run_calibration(host_measurements=...)`: the host stage's split, errors and host land in the provenance,
    its files in the id's digest; the CLI refuses it beside --from-store, which has no files to name."""
    from rsi_env.cli import main

    rows = (ROOT / "data" / "measurements" / "h200-vllm0.26" / "campaign13.jsonl").read_text().splitlines()
    main_rows = [x for x in rows if '"model": "qwen2.5-7b"' in x]
    host_rows = [x for x in rows if '"model": "llama-3.2-1b"' in x or '"kv_cache_dtype": "fp8", "max_num_seqs"' in x]
    (tmp_path / "m.jsonl").write_text("\n".join(main_rows) + "\n")
    (tmp_path / "h.jsonl").write_text("\n".join(host_rows) + "\n")
    rep = run_calibration("h200", [str(tmp_path / "m.jsonl")], max_nfev=2, out=str(tmp_path / "c.yaml"),
                          host_measurements=[str(tmp_path / "h.jsonl")])
    stage = load_calibration("h200", "0.26", tmp_path / "c.yaml").provenance["host_stage"]
    assert stage["n_train"] + stage["n_held_out"] == len(host_rows) == 8 and stage["n_held_out"] == 4
    assert stage["host"]["cpus"] == 16 and stage["terms"][0] == "cpu_step_s"
    assert "host stage after" in rep["summary"]
    plain = run_calibration("h200", [str(tmp_path / "m.jsonl")], max_nfev=1, refit_all=False)
    assert plain["calibration"]["id"] != rep["calibration"]["id"] and "host" not in plain
    assert main(["calibrate", "full", "--hardware", "h200", "--from-store", "--host-measurements",
                 str(tmp_path / "h.jsonl")]) == 2
    assert "--from-store fits the store's rows; give it no measurement files" in capsys.readouterr().err
    # A missing file is named before any fit starts (the main fit takes minutes on the real measurements).
    assert main(["calibrate", "full", "--hardware", "h200", "--measurements", str(tmp_path / "m.jsonl"),
                 "--host-measurements", str(tmp_path / "nope.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "no measurements file" in err and "nope.jsonl" in err


def test_rank_agreement_gives_tied_predictions_their_mean_rank():
    """The simulator finds 1,024 batched tokens no different from the defaults on `short_long`'s short prompts; the
    real engine ranks the two a hair apart. Tied predictions share their mean rank (Spearman's definition), so the
    rows' order in the file does not decide whether the sim "agrees"."""
    from rsi_env.calibrate.score import predict, rank_agreement
    from rsi_env.evaluate.fidelity import spearman

    hw, cal = load_hardware("h200"), load_calibration("h200", "0.26")
    rows = [s for s in load_samples([ROOT / "data" / "measurements" / "h200-vllm0.26" / "heldout_campaign15.jsonl"])
            if s.model == "llama-3.1-8b" and s.workload.name == "short_long"]
    assert len(rows) == 5
    pairs = [(s, predict(s, cal, hw)) for s in rows]
    tied = [p.tpot_p50 for s, p in pairs if s.flags in ({}, {"max_num_batched_tokens": 1024})]
    assert len(tied) == 2 and tied[0] == tied[1]
    want = spearman([s.real.tpot_p50 for s, _ in pairs], [p.tpot_p50 for _, p in pairs])
    assert rank_agreement(pairs)["tpot_p50"] == pytest.approx(want)
    assert rank_agreement(pairs[::-1])["tpot_p50"] == pytest.approx(want)  # the same in either order


def test_the_host_stage_alone_moves_a_calibration_to_a_new_host(tmp_path, capsys):
    """`rsi-env calibrate host`: the host stage from the calibration in use
    (or --base), every GPU and model term kept, the base named in the provenance, the host's split recorded; the
    CLI refuses --base beside --measurements and names a missing base file."""
    from rsi_env.calibrate.host import HOST
    from rsi_env.calibrate.stages import run_host_calibration
    from rsi_env.cli import main

    rows = (ROOT / "data" / "measurements" / "h200-vllm0.26" / "heldout_campaign17.jsonl").read_text().splitlines()
    host_rows = [x for x in rows if '"flags": {}' in x or '"flags": {"max_num_seqs": 96}' in x][:8]
    assert len(host_rows) == 8
    (tmp_path / "h.jsonl").write_text("\n".join(host_rows) + "\n")
    base = load_calibration("h200", "0.26")
    rep = run_host_calibration("h200", [str(tmp_path / "h.jsonl")], max_nfev=6, out=str(tmp_path / "c.yaml"))
    cal = load_calibration("h200", "0.26", tmp_path / "c.yaml")
    assert rep["base"] == base.id == cal.provenance["base"] and cal.id != base.id and cal.id.startswith("h200-vllm0.26-")
    for n in set(base.to_dict()) - set(HOST) - {"id", "provenance"}:
        assert getattr(cal, n) == getattr(base, n), n
    assert any(getattr(cal, n) != getattr(base, n) for n in HOST)
    stage = cal.provenance["host_stage"]
    assert stage["measurements"] == [str(tmp_path / "h.jsonl")] and stage["n_train"] == stage["n_held_out"] == 4
    assert cal.provenance["measurements"] == base.provenance["measurements"]  # the main fit's, unchanged
    assert "host stage after" in rep["summary"] and base.id in rep["summary"]
    # One configuration other than the defaults: nothing to hold out from, so it fits on all of it.
    (tmp_path / "one.jsonl").write_text("\n".join(x for x in host_rows if '"max_num_seqs": 96' in x) + "\n")
    one = run_host_calibration("h200", [str(tmp_path / "one.jsonl")], max_nfev=2)
    assert (one["host"]["n_train"], one["host"]["n_held_out"]) == (4, 0) and "n/a" in one["summary"]
    # From a given base: the same runs, another base, another id.
    other = base.with_coefficients({"cpu_step_s": 3e-3})
    other_path = tmp_path / "other.yaml"
    dataclasses.replace(other, id="h200-vllm0.26-other").save(other_path)
    assert main(["calibrate", "host", "--hardware", "h200", "--measurements", str(tmp_path / "h.jsonl"),
                 "--base", str(other_path), "--max-nfev", "2", "--out", str(tmp_path / "c2.yaml")]) == 0
    assert "h200-vllm0.26-other" in capsys.readouterr().out
    assert load_calibration("h200", "0.26", tmp_path / "c2.yaml").provenance["base"] == "h200-vllm0.26-other"
    with pytest.raises(SystemExit):  # the whole fit starts from nothing: it has no --base
        main(["calibrate", "full", "--hardware", "h200", "--measurements", str(tmp_path / "h.jsonl"),
              "--base", str(other_path)])
    assert "unrecognized arguments: --base" in capsys.readouterr().err
    assert main(["calibrate", "host", "--hardware", "h200", "--measurements", str(tmp_path / "h.jsonl"),
                 "--base", str(tmp_path / "nope.yaml")]) == 2
    assert "no calibration file" in capsys.readouterr().err
    # No run to fit on, or a base of another GPU: refused before any fit, with what was wrong.
    (tmp_path / "empty.jsonl").write_text("")
    assert main(["calibrate", "host", "--hardware", "h200", "--measurements", str(tmp_path / "empty.jsonl")]) == 2
    assert "no usable measurements" in capsys.readouterr().err
    dataclasses.replace(other, hardware="h100-sxm").save(tmp_path / "h100.yaml")
    assert main(["calibrate", "host", "--hardware", "h200", "--measurements", str(tmp_path / "h.jsonl"),
                 "--base", str(tmp_path / "h100.yaml")]) == 2
    assert "is for 'h100-sxm', not 'h200'" in capsys.readouterr().err


def test_the_memory_stage_alone_refits_the_kv_terms_and_keeps_the_timing(tmp_path, capsys):
    """`rsi-env calibrate memory`: the memory terms refitted on the KV caches real runs found (one per
    configuration), every timing term kept, the base named; from a base whose non-torch memory is 2 GB off, the
    eighteenth lease's caches (gpu_memory_utilization 0.14 to 0.92, 131,072 batched tokens) come back within 2.5 %.
    The CLI refuses a file without KV-cache sizes."""
    from rsi_env.calibrate.memory import MEMORY
    from rsi_env.calibrate.stages import run_memory_calibration
    from rsi_env.cli import main

    files = [str(ROOT / m) for m in load_calibration("h200", "0.26").provenance["measurements"]]
    files.append(str(ROOT / "data" / "measurements" / "h200-vllm0.26" / "heldout_campaign18.jsonl"))
    shipped = load_calibration("h200", "0.26")
    off = shipped.with_coefficients({"non_torch_bytes": shipped.non_torch_bytes + 2e9})
    dataclasses.replace(off, id="h200-vllm0.26-off").save(tmp_path / "off.yaml")
    base = load_calibration("h200", "0.26", tmp_path / "off.yaml")
    rep = run_memory_calibration("h200", files, base=base, out=str(tmp_path / "m.yaml"))
    cal = load_calibration("h200", "0.26", tmp_path / "m.yaml")
    assert cal.provenance["base"] == "h200-vllm0.26-off" and cal.id not in (base.id, shipped.id)
    for n in set(base.to_dict()) - set(MEMORY) - {"act_moe_coef", "id", "provenance"}:
        assert getattr(cal, n) == getattr(base, n), n
    stage = cal.provenance["memory_stage"]
    assert stage["n_held_out_configs"] > 0 and stage["device_memory_bytes"] == load_hardware("h200").memory_bytes
    assert rep["before"]["num_gpu_blocks_mape"] > 3 * rep["after"]["num_gpu_blocks_mape"]
    assert rep["all_configs"]["num_gpu_blocks_max_ape"] < 0.025
    for flags, real in (({"gpu_memory_utilization": 0.14, "max_model_len": 12288}, 1658),
                        ({"enable_chunked_prefill": False}, 51096), ({}, 57489)):
        assert simulate(flags, "llama-3.1-8b", "h200", "short_long", calibration=cal).num_gpu_blocks == (
            pytest.approx(real, rel=0.025)), flags
    assert "memory stage after" in rep["summary"]
    rows = [json.loads(x) for x in Path(files[-1]).read_text().splitlines()[:2]]
    for row in rows:
        row["resolved"]["num_gpu_blocks"] = None
    (tmp_path / "noblocks.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert main(["calibrate", "memory", "--hardware", "h200", "--measurements", str(tmp_path / "noblocks.jsonl")]) == 2
    assert "reports num_gpu_blocks" in capsys.readouterr().err
