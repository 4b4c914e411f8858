"""The stages by name (`STAGES`), and a stage run alone from a base calibration (`run_stage`).

``rsi-env calibrate memory|host|launch`` is `run_stage` of that stage: ``base`` (default: the calibration in use for
the hardware) with the stage's terms refitted on the measurements, every other term kept. The calibration written
keeps the base's provenance, names the base, and records the stage beside it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from rsi_env.calibrate import host, launch, memory, timing
from rsi_env.calibrate.report import fitted_at, named
from rsi_env.calibrate.samples import read_rows
from rsi_env.calibrate.stage import Stage, StageRun, stage_base
from rsi_env.sim.calibration import Calibration

__all__ = ["STAGES", "run_host_calibration", "run_launch_calibration", "run_memory_calibration", "run_stage"]

STAGES: dict[str, Stage] = {s.name: s for s in (memory.STAGE, timing.STAGE, host.STAGE, launch.STAGE)}


def run_stage(name: str, hardware: str, measurements: list[str], *, base: Calibration | None = None,
              engine_version: str = "0.26", out: str | None = None, seed: int = 0, max_nfev: int = 60,
              refit_all: bool = True, terms: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The stage ``name`` alone from ``base`` (default: the calibration in use) on the files ``measurements``: its
    report, with the calibration (written to ``out`` if given) and the summary the CLI prints. ``terms``: only these of
    the stage's terms, where it reads each from items of its own (`Alone.select`: the launch stage).

    ValueError where the stage does not run alone, the base is another hardware's, the terms are not the stage's to
    choose, or the files hold nothing the stage fits on."""
    stage = STAGES[name]
    if stage.alone is None:
        raise ValueError(f"run_stage: the {name} stage runs within the whole fit (run_calibration), not alone")
    if terms is not None and (stage.alone.select is None or not set(terms) <= set(stage.terms)):
        raise ValueError(f"run_{name}_calibration: the {name} stage cannot fit {sorted(terms)} alone"
                         + (f" (its terms: {list(stage.terms)})" if stage.alone.select else " (it fits all its terms)"))
    hw, base = stage_base(f"run_{name}_calibration", hardware, base, engine_version)
    texts, rows = read_rows(measurements)
    items = stage.alone.items(rows, str(list(measurements)))
    if terms is not None and stage.alone.select is not None:
        items = stage.alone.select(items, terms)
        if not items:
            raise ValueError(f"run_{name}_calibration: no run in {list(measurements)} shows {sorted(terms)}")
    salt = json.dumps(hw.to_dict(), sort_keys=True) if stage.alone.digest_hardware else ""
    salt += json.dumps(sorted(terms)) if terms is not None else ""
    digest = hashlib.sha256((base.id + salt + "".join(texts)).encode()).hexdigest()[:12]
    r = StageRun(stage, items, rows, measurements, base, hw, digest, seed, max_nfev, refit_all)
    fitted, report, entries = stage.alone.run(r)
    fitted = named(fitted, digest, {**base.provenance, "fitted": fitted_at(), "base": base.id, **entries})
    report["calibration"] = fitted.to_dict()
    if out:
        fitted.save(out)
    report["summary"] = stage.alone.summary(r, report, fitted)
    return report


def run_memory_calibration(hardware: str, measurements: list[str], **kw: Any) -> dict[str, Any]:
    """The memory stage alone (`run_stage`, `rsi_env.calibrate.memory`)."""
    return run_stage("memory", hardware, measurements, **kw)


def run_host_calibration(hardware: str, measurements: list[str], **kw: Any) -> dict[str, Any]:
    """The host stage alone (`run_stage`, `rsi_env.calibrate.host`)."""
    return run_stage("host", hardware, measurements, **kw)


def run_launch_calibration(hardware: str, measurements: list[str], **kw: Any) -> dict[str, Any]:
    """The launch stage alone (`run_stage`, `rsi_env.calibrate.launch`)."""
    return run_stage("launch", hardware, measurements, **kw)
