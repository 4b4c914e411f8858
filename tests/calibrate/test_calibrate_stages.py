"""The stage registry: one `Stage` per term family, the CLI's stages the ones that run alone."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rsi_env.calibrate.full import FULL
from rsi_env.calibrate.stages import STAGES, run_stage
from rsi_env.calibrate.timing import fit_terms
from rsi_env.engine.hardware import load_hardware
from rsi_env.sim.calibration import COEFFICIENTS
from rsi_env.sim.sglang.simulate import sglang_calibration


def test_every_stage_fits_coefficients_of_the_calibration_and_the_cli_s_stages_run_alone():
    assert list(STAGES) == ["memory", "timing", "host", "launch"] and FULL == ("memory", "timing")
    assert all(s.name == name and s.terms and set(s.terms) <= set(COEFFICIENTS) for name, s in STAGES.items())
    assert {name for name, s in STAGES.items() if s.alone is not None} == {"memory", "host", "launch"}
    with pytest.raises(ValueError, match="the timing stage runs within the whole fit"):
        run_stage("timing", "h200", [])


def test_fit_terms_minimises_the_extra_residuals_beside_the_samples():
    """A target outside the samples' summaries (``extra``) pulls the fitted term: with no samples, the least squares
    lands the term where the extra residual is zero, inside its bounds."""
    hw = load_hardware("h100-sxm")
    start = sglang_calibration(hw.name)
    target = 2.0 * start.cpu_step_s
    fitted = fit_terms([], hw, start, ("cpu_step_s",), max_nfev=20,
                       extra=lambda c: np.asarray([math.log(c.cpu_step_s / target)]))
    assert fitted.cpu_step_s == pytest.approx(target, rel=1e-3)
    assert fit_terms([], hw, start, ("cpu_step_s",), max_nfev=20,
                     extra=lambda c: np.asarray([math.log(c.cpu_step_s / 1.0)])).cpu_step_s <= 2e-2  # its bound
