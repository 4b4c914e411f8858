"""The calibration users run: the simulator's coefficients fitted to real measurements (``rsi-env calibrate``).

- `samples`: real-tier measurement lines as samples, and the seeded split that holds whole configurations out;
- `metrics`: the error measures every fit and every evaluation reports (``mape``, ``spearman``, ``ranks``);
- `score`: the simulator's error under a calibration on samples (`score.evaluate`);
- `stage`: `Stage`, one stage of the fit; `memory`, `timing`, `host`, `launch`: the four stages
  (`step_groups`: the real steps the launch stage reads); `stages`: them by name (``STAGES``) and a stage run
  alone from a base (``run_stage``);
- `full`: the whole fit (memory, then timing, then optionally host); `from_store`: it on the experience store's rows;
- `report`: what a fit writes (its id and provenance) and prints.

The `Calibration` itself, and the memory plan and step cost it parameterises, are the simulator's
(`rsi_env.sim.calibration`): it reads them at run time; only the fitting lives here.
"""
