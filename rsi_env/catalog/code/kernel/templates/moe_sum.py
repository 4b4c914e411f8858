"""Your kernel: the sum of each token's expert outputs in a mixture-of-experts layer (vLLM's ``moe_sum``). Make it fast.

    moe_sum(out, x) -> None

``x`` is ``[num_tokens, topk, hidden_size]`` (the outputs of the ``topk`` experts a token was routed to,
already weighted) and ``out`` ``[num_tokens, hidden_size]``, one dtype (bfloat16, float16 or float32).
Write ``x.sum(dim=1)`` into ``out`` (accumulate in float32 at least: sums of many half-precision values
drift); do not change ``x``. ``out`` arrives filled with NaN: every element must be written. Checked
against a float64 reference on fresh random inputs (tolerance: float32 1e-4, float16 1e-2, bfloat16 3e-2,
absolute and relative); timed against PyTorch eager (``torch.sum`` over the experts, as vLLM does for any
``topk``).

This version is deliberately naive: a line-by-line port of the CUDA kernel's structure, one Python iteration
per token (its thread block), per 1024 elements of the row (one pass of the block's 1024 threads) and per
expert, in float64.
"""

THREADS = 1024


def moe_sum(out, x):
    hidden = x.shape[-1]
    for t in range(x.shape[0]):
        for j in range(0, hidden, THREADS):
            acc = x[t, 0, j:j + THREADS].double()
            for k in range(1, x.shape[1]):
                acc = acc + x[t, k, j:j + THREADS].double()
            out[t, j:j + THREADS] = acc.to(out.dtype)
