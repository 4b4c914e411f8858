"""The stage registry: one `Stage` per term family, the CLI's stages the ones that run alone."""

from __future__ import annotations

import pytest

from rsi_env.calibrate.full import FULL
from rsi_env.calibrate.stages import STAGES, run_stage
from rsi_env.sim.calibration import COEFFICIENTS


def test_every_stage_fits_coefficients_of_the_calibration_and_the_cli_s_stages_run_alone():
    assert list(STAGES) == ["memory", "timing", "host", "launch"] and FULL == ("memory", "timing")
    assert all(s.name == name and s.terms and set(s.terms) <= set(COEFFICIENTS) for name, s in STAGES.items())
    assert {name for name, s in STAGES.items() if s.alone is not None} == {"memory", "host", "launch"}
    with pytest.raises(ValueError, match="the timing stage runs within the whole fit"):
        run_stage("timing", "h200", [])
