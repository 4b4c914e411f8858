"""Your kernel: SiLU-and-multiply, the gated MLP activation of Llama-style models. Make it fast.

    silu_and_mul(out, x) -> None

``x`` is ``[num_tokens, 2 * d]`` and ``out`` ``[num_tokens, d]``, one dtype (bfloat16, float16 or float32).
Write ``silu(x[:, :d]) * x[:, d:]`` into ``out`` (``silu(g) = g * sigmoid(g)``); do not change ``x``.
``out`` arrives filled with NaN: every element must be written. Checked against a float64 reference on
fresh random inputs (tolerance: float32 1e-4, float16 1e-2, bfloat16 3e-2, absolute and relative);
timed against PyTorch eager (vLLM's ``forward_native``). Plain PyTorch, Triton on a GPU, anything the
sandbox's Python can import.

This version is deliberately naive: a line-by-line port of the CUDA kernel's structure, one Python iteration
per token (its thread block) and per 1024 elements of the row (one pass of the block's 1024 threads), in float64.
"""

import torch

THREADS = 1024


def silu_and_mul(out, x):
    d = x.shape[-1] // 2
    for i in range(x.shape[0]):
        for j in range(0, d, THREADS):
            gate = x[i, j:j + THREADS].double()
            up = x[i, d + j:d + j + THREADS].double()
            out[i, j:j + THREADS] = (gate / (1.0 + torch.exp(-gate)) * up).to(out.dtype)
