"""The sim tier's model of SGLang 0.5.17's scheduler, read from SGLang's source.

RadixAttention's prefix cache (`radix`), the schedule policies (`policy`), new-token-ratio admission (`adder`,
`token_ratio`) and retraction, chunked prefill (`scheduler`), the loop (`engine`) priced on the sim's cost model, and
the entry point `simulate_sglang`, which returns the vLLM sim's `Telemetry`. Not yet behind the `Tier` seam.
"""

from rsi_env.sim.sglang.simulate import simulate_sglang, simulate_sglang_detailed

__all__ = ["simulate_sglang", "simulate_sglang_detailed"]
