"""SGLang's own calibration of the H100 (fitted on real SGLang rows, research/sglang_fit/fit.py): found by the
SGLang sim, never by vLLM's, reproducing the errors its fit recorded on the rows it held out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsi_env.calibrate.samples import load_samples, samples_from_rows
from rsi_env.calibrate.score import evaluate
from rsi_env.engine import load_hardware
from rsi_env.sim import simulate
from rsi_env.sim.calibration import load_calibration, release_tag
from rsi_env.sim.sglang import simulate_sglang
from rsi_env.sim.sglang.simulate import sglang_calibration

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def cal():
    return load_calibration("h100-sxm", "sglang-0.5.17")


def test_release_tags_keep_the_engines_apart():
    assert release_tag("0.26.0") == release_tag("0.26") == "vllm0.26"
    assert release_tag("sglang-0.5.17") == "sglang-0.5"


def test_the_sglang_sim_prices_with_sglangs_fit_and_vllms_sim_never_sees_it(cal):
    assert cal.id.startswith("h100-sxm-sglang-0.5-") and cal.engine_version == "sglang-0.5"
    assert simulate_sglang({}, "llama-3.1-8b", "h100-sxm", "many_small").calibration == cal.id
    assert simulate({}, "llama-3.1-8b", "h100-sxm", "many_small").calibration.startswith("default")
    # A chip without an SGLang fit: SGLang's passes are priced with that chip's vLLM calibration.
    assert sglang_calibration("h200").id == load_calibration("h200", "0.26").id


def test_the_held_out_rows_were_never_fitted_on(cal):
    prov = cal.provenance
    held, train = set(prov["held_out_measurements"]), set(prov["measurements"])
    assert held and train and not held & train
    assert prov["n_held_out"] == sum(len((ROOT / f).read_text().splitlines()) for f in held)


def test_the_calibration_reproduces_the_held_out_error_its_fit_recorded(cal):
    """A regression guard: the SGLang sim has not drifted from what the calibration was fitted with."""
    held = load_samples([ROOT / f for f in cal.provenance["held_out_measurements"]])
    err = evaluate(held, cal, load_hardware("h100-sxm"))
    for k, v in cal.provenance["held_out_error"].items():
        assert err[k] == pytest.approx(v, rel=1e-6, abs=1e-9), k


def test_an_sglang_row_is_a_sample_of_its_release_with_its_kv_pool():
    line = (ROOT / "data/sglang/0.5.17-h100/lease2/h1.jsonl").read_text().splitlines()[0]
    row = json.loads(line)
    (s,) = samples_from_rows([row])
    assert s.engine_version == "sglang-0.5.17"
    assert s.num_gpu_blocks == row["resolved"]["max_total_num_tokens"] > 0
    assert s.flags == row["flags"]
