"""The calibration loop: real-tier measurements in the store become a new calibration of the simulator.

:func:`calibrate_from_store` reads the store's real-tier rows of one (hardware, vLLM version),
fits with :func:`rsi_env.calibrate.full.run_calibration` (seeded split, whole configurations held out),
writes the result into the user's calibration directory — where :func:`load_calibration` finds it
and, being the newest, uses it — and registers it in the store with its provenance (store, rows
used, when) and held-out error.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

from rsi_env.errors import CalibrationError
from rsi_env.store.db import ExperienceStore

__all__ = ["calibrate_from_store", "real_rows"]


def real_rows(store: ExperienceStore, hardware: str, engine_version: str, num_gpus: int | None = 1
              ) -> list[dict[str, Any]]:
    """The store's successful real-tier measurements of (hardware, version), in the real tier's line form."""
    ver = ".".join(str(engine_version).split(".")[:2])
    where = "tier = 'real' AND ok = 1 AND hardware = ? AND (engine_version = ? OR engine_version LIKE ?)"
    params: list[Any] = [hardware, ver, f"{ver}.%"]
    if num_gpus is not None:
        where += " AND num_gpus = ?"
        params.append(num_gpus)
    out = []
    for r in store.measurements(where, params):
        extra = r.get("extra") or {}
        out.append({"model": r["model"], "flags": r["config"], "workload_spec": r["workload_spec"],
                    "telemetry": r["telemetry"], "resolved": r.get("resolved") or {},
                    "vllm_version": r["engine_version"], "startup_s": extra.get("startup_s") or 0.0, "uid": r["uid"]})
    return out


def calibrate_from_store(store: ExperienceStore, hardware: str, *, engine_version: str = "0.26",
                         out: str | Path | None = None, seed: int = 0, max_nfev: int = 60,
                         num_gpus: int | None = 1) -> dict[str, Any]:
    """Fit a calibration to the store's real rows; write it (default: the user's calibration dir) and register it."""
    from rsi_env.calibrate.full import run_calibration
    from rsi_env.sim.calibration import user_calibration_dir

    rows = real_rows(store, hardware, engine_version, num_gpus)
    if not rows:
        raise CalibrationError(
            f"the store {store.path} holds no successful real-tier measurements of {hardware} on vLLM "
            f"{engine_version}" + (f" with {num_gpus} GPU(s)" if num_gpus else "") +
            ": measure some (rsi-env bench --tier real) or import them (rsi-env experience import FILE.jsonl)")
    uids = sorted(r.pop("uid") for r in rows)
    origin = {"source": "experience store", "store": store.path, "rows_used": len(rows),
              "row_uids_sha256_12": hashlib.sha256("".join(uids).encode()).hexdigest()[:12]}
    if out is None:
        out = user_calibration_dir() / f"{hardware}-vllm{engine_version}-{time.strftime('%Y%m%dT%H%M%S')}.yaml"
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    report = run_calibration(hardware, [], engine_version=engine_version, out=str(out), seed=seed, max_nfev=max_nfev,
                             rows=rows, origin=origin)
    cal = report["calibration"]
    store.add_calibration({"id": cal["id"], "created": time.time(), "hardware": hardware,
                           "engine_version": engine_version, "rows_used": len(rows),
                           "held_out_error": cal["provenance"]["held_out_error"], "provenance": cal["provenance"],
                           "path": str(Path(out).resolve())})
    report["path"] = str(Path(out).resolve())
    return report
