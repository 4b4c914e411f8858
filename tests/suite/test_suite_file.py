"""The frozen suite, rsi-bench-v1: at least 200 instances over the three fronts, every flag instance's pass line
where its ceiling puts it, the simulator its ceilings were found with, and a sample whose ceilings reproduce.

A change to the simulator that moves a ceiling fails here: the suite is then frozen again, as a new version."""

from __future__ import annotations

import json
import math
import random

import pytest

from rsi_env.cli import main as cli_main
from rsi_env.suite.agents import ReferenceAgent
from rsi_env.suite.instance import DIFFICULTIES, FRONTS, load, threshold_for
from rsi_env.wrappers.ladders import rsi_env_of

SUITE = load("rsi-bench-v1")
FLAGS = [i for i in SUITE.instances if i.criterion["kind"] == "ceiling"]


def test_two_hundred_instances_over_three_fronts(capsys: pytest.CaptureFixture[str]):
    assert cli_main(["suite", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["count"] == len(SUITE.instances) >= 200
    assert {i["front"] for i in listed["instances"]} == set(FRONTS)
    assert all("reference" not in i for i in listed["instances"])  # a listing never shows a solution
    assert {i.difficulty for i in SUITE.instances} <= set(DIFFICULTIES)


def test_each_flag_instance_passes_at_its_fraction_of_its_ceiling():
    assert FLAGS
    for i in FLAGS:
        c = i.criterion
        assert c["ceiling"] >= math.log1p(0.10) and c["fraction"] == SUITE.ceiling_fraction, i.id
        assert i.env_kwargs["improvement_threshold"] == pytest.approx(threshold_for(c["ceiling"], c["fraction"]),
                                                                      rel=1e-5, abs=1e-6), i.id  # both rounded to 1e-6
        assert c["method"] == "exhaustive" or c["method"].startswith("search-"), i.id


def test_the_simulator_is_the_one_the_ceilings_were_found_with():
    assert SUITE.check_calibrations() == []


def test_no_trivial_baseline_passes_the_hard_split():
    hard = [i for i in SUITE.instances if i.difficulty == "hard"]
    assert hard
    for name in ("null", "vllm_auto_tune"):
        rates = [i.baselines[name] for i in hard if name in i.baselines]
        assert not rates or sum(rates) / len(rates) <= 0.30, name


@pytest.mark.parametrize("inst", random.Random(0).sample(FLAGS, min(3, len(FLAGS))), ids=lambda i: i.id)
def test_a_sample_of_ceilings_reproduces_and_its_reference_passes(inst):
    env = inst.make_env()
    try:
        ReferenceAgent().play(env, inst, None)  # type: ignore[arg-type]
        rsi = rsi_env_of(env)
        assert rsi.verdict is not None and rsi.verdict.passed, rsi.text
        assert rsi.verdict.score == pytest.approx(inst.criterion["ceiling"], abs=1e-6)
    finally:
        env.close()
