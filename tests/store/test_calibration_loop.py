"""The calibration loop: real-tier rows in the store -> a fitted calibration the simulator then uses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsi_env.calibrate.from_store import real_rows
from rsi_env.calibrate.samples import load_samples, samples_from_rows
from rsi_env.cli import main
from rsi_env.sim import simulate
from rsi_env.sim.calibration import load_calibration
from rsi_env.store import ExperienceStore
from rsi_env.store.transfer import import_files

DATA = Path(__file__).resolve().parents[2] / "data" / "measurements"


def _subset(tmp_path: Path) -> Path:
    """Llama-3.2-1B and every model's defaults: enough configurations to split, quick to fit."""
    files = sorted(DATA.parents[1] / m for m in load_calibration("h200", "0.26").provenance["measurements"]
                   if "/h200-vllm" in m)  # the one-H200 host's files of the shipped calibration's main fit
    lines = [x for f in files for x in f.read_text().splitlines()
             if x.strip() and (json.loads(x)["model"] == "llama-3.2-1b" or json.loads(x)["flags"] == {})]
    out = tmp_path / "subset.jsonl"
    out.write_text("\n".join(lines) + "\n")
    return out


def test_imported_real_rows_are_the_samples_of_the_files(tmp_path):
    st = ExperienceStore(str(tmp_path / "s.sqlite"))
    files = sorted(DATA.glob("*/*.jsonl"))
    added = import_files(st, files)
    assert added["measurement"] == sum(len(f.read_text().splitlines()) for f in files)
    rows = st.measurements("tier = 'real'")
    assert {r["source"] for r in rows} == {"import:real-tier-file"} and all(r["gpu_seconds"] > 0 for r in rows)
    one_gpu = samples_from_rows(real_rows(st, "h200", "0.26"))
    from_files = [s for s in load_samples(files)  # every one-GPU row, whichever host measured it
                  if s.flags.get("tensor_parallel_size", 1) * s.flags.get("pipeline_parallel_size", 1) == 1]
    key = (lambda s: (s.config_key, s.workload.content_hash))  # noqa: E731
    assert sorted(map(key, one_gpu)) == sorted(map(key, from_files))
    assert len(real_rows(st, "h200", "0.26", num_gpus=2)) == len((DATA / "h200x2-vllm0.26" / "tp2.jsonl")
                                                                  .read_text().splitlines())


def test_calibrate_from_store_writes_a_newer_calibration_that_the_simulator_uses(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RSI_ENV_CALIBRATION_DIR", str(tmp_path / "cal"))
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    assert main(["experience", "import", str(_subset(tmp_path)), "--store", url]) == 0
    before = load_calibration("h200", "0.26")
    assert main(["calibrate", "full", "--hardware", "h200", "--from-store", "--store", url, "--max-nfev", "2"]) == 0
    assert "the simulator now uses it" in capsys.readouterr().out
    after = load_calibration("h200", "0.26")
    assert after.id != before.id and after.provenance["source"] == "experience store"
    assert after.provenance["store"] == str(tmp_path / "s.sqlite") and after.provenance["rows_used"] > 0
    assert set(after.provenance["held_out_error"]) >= {"out_tok_per_s_mape", "ttft_p50_mape"}
    assert after.provenance["fitted"] > str(before.provenance["fitted"])
    assert simulate({}, "llama-3.2-1b", "h200", "short_long").calibration == after.id
    assert simulate({}, "llama-3.2-1b", "h100-sxm", "short_long").calibration.startswith("default")
    cals = ExperienceStore(url).calibrations()
    assert [c["id"] for c in cals] == [after.id] and cals[0]["rows_used"] == after.provenance["rows_used"]
    assert Path(cals[0]["path"]).is_file()


def test_calibrate_from_an_empty_store_says_what_to_do(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'e.sqlite'}"
    assert main(["calibrate", "full", "--hardware", "h200", "--from-store", "--store", url]) == 2
    assert "no successful real-tier measurements" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["calibrate", "full", "--hardware", "h200"]])
def test_calibrate_needs_a_source(argv, capsys):
    assert main(argv) == 2
    assert "--from-store" in capsys.readouterr().err


def test_an_imported_row_keeps_the_machine_it_was_measured_on(tmp_path):
    raw = json.loads((DATA / "h200-vllm0.26" / "llama8b.jsonl").read_text().splitlines()[0])
    raw["host"] = {"cpu": "Intel(R) Xeon(R) Processor", "cpus": 32, "cpus_usable": 16, "gpus": ["NVIDIA H200"]}
    f = tmp_path / "one.jsonl"
    f.write_text(json.dumps(raw) + "\n")
    st = ExperienceStore(str(tmp_path / "s.sqlite"))
    assert import_files(st, [f])["measurement"] == 1
    (row,) = st.measurements("tier = 'real'")
    assert row["extra"]["host"] == raw["host"] and row["extra"]["startup_s"] == raw["startup_s"]


def test_sglangs_driver_rows_import_under_their_release_and_never_feed_vllms_calibration(tmp_path):
    f = DATA.parent / "sglang" / "0.5.17-h100" / "lease2" / "h1.jsonl"
    lines = [json.loads(x) for x in f.read_text().splitlines()]
    st = ExperienceStore(str(tmp_path / "s.sqlite"))
    assert import_files(st, [f])["measurement"] == len(lines) == 3
    rows = st.measurements("tier = 'real'")
    assert {r["engine_version"] for r in rows} == {"sglang-0.5.17"} and {r["hardware"] for r in rows} == {"h100-sxm"}
    assert rows[0]["config"] == lines[0]["flags"] and rows[0]["extra"]["startup_s"] == lines[0]["startup_s"]
    assert real_rows(st, "h100-sxm", "0.26") == []  # vLLM's calibration from the store reads vLLM's rows only
    assert import_files(st, [f])["measurement"] == 0  # a second import adds nothing
