"""`Stage`: one stage of the calibration — the terms it fits, how, and the error it reports.

The whole fit is the memory stage, then the timing stage (`rsi_env.calibrate.full`); the host and launch stages,
and the memory stage again, also run alone from a base calibration (`rsi_env.calibrate.stages.run_stage`), every
term but theirs kept: a few minutes of new evidence (a host, step traces, KV caches) does not repeat a main fit of
tens of minutes. Run alone, a stage is split by configuration as the whole fit is: fitted on part, its error on
the rest before and after, then refitted on all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rsi_env.calibrate.samples import split
from rsi_env.engine.hardware import HardwareSpec, load_hardware
from rsi_env.sim.calibration import Calibration, load_calibration

__all__ = ["Alone", "Error", "Fit", "Stage", "StageRun", "stage_base", "staged_fit"]

# (items, start, hardware, max_nfev) -> ``start`` with the stage's terms fitted to the items, every other term kept;
# ``max_nfev`` bounds a least-squares fit's evaluations (a stage that solves otherwise ignores it).
Fit = Callable[[list[Any], Calibration, HardwareSpec, int], Calibration]
# (items, calibration, hardware) -> the stage's error figures on the items.
Error = Callable[[list[Any], Calibration, HardwareSpec], dict[str, Any]]


@dataclass(frozen=True)
class Stage:
    """One stage of the calibration: its name, the coefficients it fits, its fit and its error.

    ``alone`` says how it runs alone from a base calibration; None where it runs only within the whole fit."""

    name: str
    terms: tuple[str, ...]
    fit: Fit
    error: Error
    alone: Alone | None = None


@dataclass(frozen=True)
class StageRun:
    """One run of a stage alone: what it fits on, from which measurements, and from which base."""

    stage: Stage
    items: list[Any]  # what the stage fits on (`Alone.items`)
    rows: list[dict[str, Any]]  # the measurement lines
    measurements: list[str]  # their files
    base: Calibration
    hw: HardwareSpec
    digest: str  # of the base and the measurements: the new calibration's id covers it
    seed: int
    max_nfev: int
    refit_all: bool


@dataclass(frozen=True)
class Alone:
    """How a stage runs alone: what it fits on, how it splits and fits it, and what it prints.

    ``items(rows, where)``: what the stage fits on, from the measurement lines of the files ``where`` names
    (ValueError where there is none). ``run(r)``: the fitted calibration, the run's report and the provenance
    entries that record the stage (beside the base's). ``summary(r, report, calibration)``: what the CLI prints.
    ``digest_hardware``: the new id covers the hardware spec as well (the memory stage: the device's memory is what
    its terms divide). ``select(items, terms)``: the items that fit some of the stage's terms only (a user's
    ``--terms``), where the stage reads each term from items of its own; None where it fits all its terms at once."""

    items: Callable[[list[dict[str, Any]], str], list[Any]]
    run: Callable[[StageRun], tuple[Calibration, dict[str, Any], dict[str, Any]]]
    summary: Callable[[StageRun, dict[str, Any], Calibration], str]
    digest_hardware: bool = False
    select: Callable[[list[Any], tuple[str, ...]], list[Any]] | None = None


def stage_base(who: str, hardware: str, base: Calibration | None,
               engine_version: str) -> tuple[HardwareSpec, Calibration]:
    """The hardware and the calibration a stage run alone starts from (``base``, or the one in use), or ValueError."""
    base = base or load_calibration(hardware, engine_version)
    if base.hardware != hardware:
        raise ValueError(f"{who}: base calibration {base.id!r} is for {base.hardware!r}, not {hardware!r}")
    return load_hardware(hardware), base


def staged_fit(r: StageRun) -> tuple[Calibration, dict[str, Any]]:
    """A stage alone, split by configuration (`split`): fitted on part, its error on the rest before and after,
    then (with ``refit_all``) refitted on all; and its error on all, before the stage and after.

    Returns the calibration and the stage's report (its base, split and errors)."""
    fit, error, base, hw = r.stage.fit, r.stage.error, r.base, r.hw
    train, held = split(r.items, r.seed)
    if not train:  # one configuration, not the defaults: nothing to hold out from (as the host stage)
        train, held = r.items, []
    fitted = fit(train, base, hw, r.max_nfev)
    report: dict[str, Any] = {
        "hardware": base.hardware, "engine_version": base.engine_version, "seed": r.seed, "base": base.id,
        "n_train_configs": len({x.config_key for x in train}), "n_held_out_configs": len({x.config_key for x in held}),
        "held_out_configs": sorted({x.config_key for x in held}),
        "before": error(held, base, hw), "after": error(held, fitted, hw)}
    if r.refit_all:
        fitted = fit(r.items, fitted, hw, r.max_nfev)
    report["all_configs_before"] = error(r.items, base, hw)
    report["all_configs"] = error(r.items, fitted, hw)
    return fitted, report
