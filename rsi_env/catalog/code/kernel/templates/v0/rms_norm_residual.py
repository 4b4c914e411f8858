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

This version is deliberately naive (one Python iteration per token, every step a separate op).
"""

import torch


def rms_norm_residual(out, x, residual, weight, epsilon):
    w = weight.float()
    for i in range(x.shape[0]):
        row = x[i].float() + residual[i].float()
        residual[i] = row.to(residual.dtype)
        variance = (row * row).sum() / row.numel()
        out[i] = (row / torch.sqrt(variance + epsilon) * w).to(out.dtype)
