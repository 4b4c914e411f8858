"""Your kernel: vLLM's fused residual add + RMSNorm (``fused_add_rms_norm``). Make it fast.

    rms_norm_residual(out, x, residual, weight, epsilon) -> None

``x``, ``residual`` and ``out`` are ``[num_tokens, hidden_size]``, ``weight`` is ``[hidden_size]``, all of
one dtype (bfloat16, float16 or float32); ``epsilon`` is a float. The kernel must

- add ``x`` into ``residual`` in place (``residual += x``), and
- write ``residual / sqrt(mean(residual ** 2, last dim) + epsilon) * weight`` into ``out``
  (vLLM takes the sum in float32 and normalises that, before rounding it to the dtype),

and must not change ``x`` or ``weight``. ``out`` arrives filled with NaN: every element must be written.
Checked against a float64 reference on fresh random inputs (tolerance: float32 1e-4, float16 1e-2,
bfloat16 3e-2, absolute and relative); timed against PyTorch eager (vLLM's ``forward_native``).
Plain PyTorch, Triton on a GPU, anything the sandbox's Python can import.

This version is deliberately naive: a line-by-line port of the CUDA kernel's structure, one Python iteration
per token (its thread block) and per 1024 elements of the row (one pass of the block's 1024 threads): a pass
that adds the residual and sums the squares, then a pass that normalises.
"""

import math

THREADS = 1024


def rms_norm_residual(out, x, residual, weight, epsilon):
    hidden = x.shape[-1]
    for i in range(x.shape[0]):
        squares = 0.0
        for j in range(0, hidden, THREADS):
            part = x[i, j:j + THREADS].float() + residual[i, j:j + THREADS].float()
            residual[i, j:j + THREADS] = part.to(residual.dtype)
            squares += float((part * part).sum())
        inv_rms = 1.0 / math.sqrt(squares / hidden + epsilon)
        for j in range(0, hidden, THREADS):
            part = residual[i, j:j + THREADS].float() * inv_rms
            out[i, j:j + THREADS] = (part * weight[j:j + THREADS].float()).to(out.dtype)
