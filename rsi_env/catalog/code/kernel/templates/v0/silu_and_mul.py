"""Your kernel: SiLU-and-multiply, the gated MLP activation of Llama-style models. Make it fast.

    silu_and_mul(out, x) -> None

``x`` is ``[num_tokens, 2 * d]`` and ``out`` ``[num_tokens, d]``, one dtype (bfloat16, float16 or float32).
Write ``silu(x[:, :d]) * x[:, d:]`` into ``out`` (``silu(g) = g * sigmoid(g)``); do not change ``x``.
``out`` arrives filled with NaN: every element must be written. Checked against a float64 reference on
fresh random inputs (tolerance: float32 1e-4, float16 1e-2, bfloat16 3e-2, absolute and relative);
timed against PyTorch eager (vLLM's ``forward_native``). Plain PyTorch, Triton on a GPU, anything the
sandbox's Python can import.

This version is deliberately naive (one Python iteration per token, in float64).
"""

import torch


def silu_and_mul(out, x):
    d = x.shape[-1] // 2
    for i in range(x.shape[0]):
        gate = x[i, :d].double()
        up = x[i, d:].double()
        out[i] = (gate / (1.0 + torch.exp(-gate)) * up).to(out.dtype)
