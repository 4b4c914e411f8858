"""vLLM V1's engine loop, compiled (numba): `loop` (arrivals, schedule, admit, price, advance, finish) over
`block_pool` (the paged KV cache), `decode_group` (the decoding requests as one) and `price` (the cost model's
arithmetic); `jit` says how it is compiled, cached, or run as plain Python. `rsi_env.sim.engine.EngineSim` is its
interface. Nothing here is imported by ``import rsi_env``: numba loads when a simulation first runs.
"""
