"""What ``rsi-env calibrate`` writes and prints: a fitted calibration's id and provenance, and each run's summary.

A calibration's id covers the measurements it was fitted on and the coefficients fitted to them
(`calibration_id`); its provenance keeps the error figures of `errors`. The summaries are the lines the CLI
prints (its ``--json`` prints the whole report, the summary in it).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rsi_env.sim.calibration import COEFFICIENTS, Calibration, release_tag

if TYPE_CHECKING:
    from rsi_env.calibrate.samples import Sample
    from rsi_env.calibrate.stage import StageRun

__all__ = ["calibration_id", "errors", "fitted_at", "full_summary", "host_stage_lines", "host_summary",
           "launch_summary", "mapes", "memory_summary", "named", "pct"]


def calibration_id(cal: Calibration, measurements_digest: str) -> str:
    """``<hardware>-vllm<version>-<hash>`` (``<hardware>-sglang-<version>-<hash>`` for SGLang): the hash covers the
    measurements and the coefficients fitted to them.

    Two fits of the same measurements by different code (a new term, a new procedure) are different
    calibrations; every simulated measurement names the one it used (`Telemetry.calibration`).
    """
    coeffs = json.dumps({n: getattr(cal, n) for n in COEFFICIENTS}, sort_keys=True)
    h = hashlib.sha256(f"{measurements_digest}:{coeffs}".encode()).hexdigest()[:12]
    return f"{cal.hardware}-{release_tag(cal.engine_version)}-{h}"


def named(cal: Calibration, measurements_digest: str, provenance: dict[str, Any]) -> Calibration:
    """``cal`` under its id (`calibration_id`) with ``provenance``: the calibration a fit writes."""
    return replace(cal, id=calibration_id(cal, measurements_digest), provenance=provenance)


def fitted_at() -> str:
    """Now, as a provenance's ``fitted`` records it (UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def errors(e: dict[str, Any]) -> dict[str, Any]:
    """The error figures a calibration's provenance keeps, from an `evaluate` result."""
    return {k: e[k] for k in ("out_tok_per_s_mape", "ttft_p50_mape", "tpot_p50_mape", "num_gpu_blocks_mape")}


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:5.1f}%"


def mapes(e: dict[str, Any]) -> str:
    """Throughput, TTFT p50 and TPOT p50 MAPE of an `evaluate` result, as every summary line prints them."""
    return (f"throughput MAPE {pct(e['out_tok_per_s_mape'])}  TTFT p50 MAPE {pct(e['ttft_p50_mape'])}  "
            f"TPOT p50 MAPE {pct(e['tpot_p50_mape'])}")


def host_stage_lines(host: dict[str, Any]) -> list[str]:
    """A summary's lines for the host stage (`rsi_env.calibrate.host.host_stage`'s report): its held-out error
    before and after."""
    return [f"  host stage {when:6s} held_out ({host['n_held_out']} of the host's): {mapes(host[when])}"
            for when in ("before", "after")]


def _written(refit_all: bool) -> str:
    return "written" if refit_all else "fitted"


def full_summary(report: dict[str, Any], cal_id: str, samples: list[Sample], refit_all: bool) -> str:
    """The whole fit's summary: both splits' errors before and after, the host stage's, and the written
    calibration's on every measurement."""
    lines = [f"calibration {cal_id}: {report['n_train']} training and {report['n_held_out']} held-out measurements"]
    for when in ("before", "after"):
        for part in ("train", "held_out"):
            e = report[when][part]
            lines.append(f"  {when:6s} {part:8s} {mapes(e)}  blocks MAPE {pct(e['num_gpu_blocks_mape'])}")
    if "host" in report:
        lines += host_stage_lines(report["host"])
    lines.append(f"  {_written(refit_all)} calibration ({'refit on all' if refit_all else 'split fit'}) "
                 f"on all {len(samples)}: {mapes(report['after_all_configs'])}")
    lines.append(f"  ranks across all {len({s.config_key for s in samples})} configurations (Spearman, per model and "
                 f"workload, mean): {report['after_all_configs']['spearman']}")
    return "\n".join(lines)


def memory_summary(r: StageRun, report: dict[str, Any], fitted: Calibration) -> str:
    """The memory stage's summary: the KV blocks' error held out before and after, and on all."""

    def line(e: dict[str, Any]) -> str:
        return f"blocks MAPE {pct(e['num_gpu_blocks_mape'])} (worst {pct(e['num_gpu_blocks_max_ape'])})"

    return "\n".join([
        f"calibration {fitted.id}: {r.base.id} with the memory stage refitted on {report['all_configs']['n_configs']} "
        f"configurations' KV caches ({report['n_train_configs']} to fit, {report['n_held_out_configs']} held out)",
        f"  memory stage before held_out: {line(report['before'])}",
        f"  memory stage after  held_out: {line(report['after'])}",
        f"  {_written(r.refit_all)} calibration on all: {line(report['all_configs'])} "
        f"(the base: {line(report['all_configs_before'])})"])


def host_summary(r: StageRun, report: dict[str, Any], fitted: Calibration) -> str:
    """The host stage's summary: its held-out error before and after, and on all the host's runs."""
    host = report["host"]
    lines = [f"calibration {fitted.id}: {r.base.id} with the host stage refitted on {len(r.items)} runs"
             f" ({host['n_train']} to fit, {host['n_held_out']} held out)"]
    lines += host_stage_lines(host)
    lines.append(f"  {_written(r.refit_all)} calibration on all {len(r.items)} of the host's: "
                 f"{mapes(host['after_all_configs'])}")
    return "\n".join(lines)


def launch_summary(r: StageRun, report: dict[str, Any], fitted: Calibration) -> str:
    """The launch stage's summary: each term it fitted before and after, with its runs' priced steps held out before
    and after and on all, and the end-to-end error on the base's host-stage runs where it has them."""

    def line(e: dict[str, Any]) -> str:
        return (f"{e['n_groups']} groups ({e['n_steps']} steps): real/priced median {e['median_real_over_priced']}, "
                f"mean |log ratio| {e['mean_abs_log_ratio']}")

    lines = [f"calibration {fitted.id}: {r.base.id} with the launch stage from the step traces of "
             f"{len({x.config_key for x in r.items})} configurations ({report['n_train_configs']} to fit, "
             f"{report['n_held_out_configs']} held out)"]
    for term, t in report["terms"].items():
        lines += [f"  {term} {t['base_value'] * 1e6:.0f} -> {t['value'] * 1e6:.0f} us",
                  f"    launch stage before held_out: {line(t['held_out_before'])}",
                  f"    launch stage after  held_out: {line(t['held_out_after'])}",
                  f"    {_written(r.refit_all)} calibration on all: {line(t['all_configs'])} "
                  f"(the base: {line(t['all_configs_before'])})"]
    return "\n".join(lines + (
        [f"  end to end on the base's host-stage runs: before {mapes(report['host_runs']['before'])}",
         f"                                          after  {mapes(report['host_runs']['after'])}"]
        if "host_runs" in report else []))
