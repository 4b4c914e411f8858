"""The sim tier's model of SGLang 0.5.17's scheduler, read from SGLang's source.

RadixAttention's prefix cache (`radix`), the schedule policies (`policy`), new-token-ratio admission (`adder`,
`token_ratio`) and retraction, chunked prefill (`scheduler`), the loop (`engine`) priced on the sim's cost model, and
the entry point `simulate_sglang`, which returns the vLLM sim's `Telemetry`; `SglangSimTier` puts it behind the
`Tier` seam (``get_tier("sim", "sglang-0.5.17")``).
"""

from rsi_env.sim.sglang.simulate import simulate_sglang, simulate_sglang_detailed
from rsi_env.sim.sglang.tier import SGLANG_SIM_VERSION, SglangSimTier

__all__ = ["SGLANG_SIM_VERSION", "SglangSimTier", "simulate_sglang", "simulate_sglang_detailed"]
