"""Every two-tier evaluation shipped under data/eval is what its plan's own files produce today: its report is
rebuilt from the committed candidates (sim) and real rows, and must equal the committed report.json and report.md.
A hand-edited number, a row added without its report, or a change to the report's arithmetic that silently
changes a published result fails here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsi_env.evaluate import load_plan
from rsi_env.evaluate.report import build_report, finite, render_markdown

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p for p in (ROOT / "configs" / "eval").glob("*.yaml")
                 if (ROOT / load_plan(p).out / "report.md").exists())


def test_the_shipped_evaluations_include_both_engines():
    names = {p.stem for p in SHIPPED}
    assert {"batching_h200", "batching_sglang_h100", "batching_sglang_h100_on_h200", "batching_h100_on_h200"} <= names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_a_shipped_report_is_rebuilt_exactly_from_its_files(path, monkeypatch):
    monkeypatch.chdir(ROOT)  # plans name their files from the repository root
    plan = load_plan(path)
    rep = build_report(plan)
    out = ROOT / plan.out
    assert render_markdown(rep) == (out / "report.md").read_text()
    assert json.loads(json.dumps(finite(rep))) == json.loads((out / "report.json").read_text())
