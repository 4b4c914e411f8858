"""Your kernel: dynamic per-token fp8 quantisation (vLLM's ``dynamic_per_token_scaled_fp8_quant``). Make it fast.

    dynamic_per_token_scaled_fp8_quant(out, scales, x) -> None

``x`` is ``[num_tokens, hidden_size]`` (bfloat16, float16 or float32), ``out`` ``[num_tokens, hidden_size]``
``torch.float8_e4m3fn`` and ``scales`` float32 ``[num_tokens, 1]``. For each row ``r``:

- ``scales[r] = max(max(|x[r]|) / 448, 1 / (448 * 512))`` (448 is e4m3's largest value; the floor keeps an
  all-zero row finite), computed in float32;
- ``out[r] = clamp(x[r] / scales[r], -448, 448)``, rounded to the nearest ``float8_e4m3fn``.

Do not change ``x``; ``out`` and ``scales`` arrive filled with NaN. Checked on fresh random inputs (rows of
very different magnitudes, one of zeros): ``scales`` to float32's rounding (relative 1e-6), ``out`` to within
half an fp8 step of the exact quotient; timed against PyTorch eager (vLLM's ``QuantFP8.forward_native``).

This version is deliberately naive: a line-by-line port of the CUDA kernel's structure, one Python iteration
per token (its thread block) and per 1024 elements of the row (one pass of the block's 1024 threads): a pass
for the row's maximum, then a pass that quantises, in float64.
"""

import torch

FP8_MAX = 448.0
MIN_SCALE = 1.0 / (FP8_MAX * 512.0)
THREADS = 1024


def dynamic_per_token_scaled_fp8_quant(out, scales, x):
    hidden = x.shape[-1]
    for r in range(x.shape[0]):
        amax = 0.0
        for j in range(0, hidden, THREADS):
            amax = max(amax, float(x[r, j:j + THREADS].double().abs().max()))
        scale = float(torch.tensor(max(amax / FP8_MAX, MIN_SCALE), dtype=torch.float32))
        scales[r, 0] = scale
        for j in range(0, hidden, THREADS):
            quotient = (x[r, j:j + THREADS].double() / scale).clamp(-FP8_MAX, FP8_MAX)
            out[r, j:j + THREADS] = quotient.to(torch.float32).to(out.dtype)
