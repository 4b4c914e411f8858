"""Your kernel: rotary position embedding, neox style, as vLLM applies it to queries and keys. Make it fast.

    rotary_embedding(query_out, key_out, positions, query, key, cos_sin_cache) -> None

``query``/``query_out`` are ``[num_tokens, num_heads * head_dim]``, ``key``/``key_out`` ``[num_tokens,
num_kv_heads * head_dim]``, ``cos_sin_cache`` ``[max_position, head_dim]`` (row ``p``: the cosines of the
``head_dim / 2`` frequencies at position ``p``, then their sines), ``positions`` int64 ``[num_tokens]``.
Floating tensors share one dtype (bfloat16, float16 or float32). For each token ``t`` and head, with
``cos, sin = cos_sin_cache[positions[t]].chunk(2)`` and the head's vector split into halves ``x1, x2``:
``out = cat(x1 * cos - x2 * sin, x2 * cos + x1 * sin)``. The whole head rotates (``rotary_dim == head_dim``).
Do not change the inputs; the outputs arrive filled with NaN. Checked against a float64 reference on
fresh random inputs (tolerance: float32 1e-4, float16 1e-2, bfloat16 3e-2, absolute and relative);
timed against PyTorch eager (vLLM's ``forward_native``).

This version is deliberately naive: a line-by-line port of the CUDA kernel's structure, one Python iteration
per token (its thread block) and per KV head (the key head and the query heads that share it), in float32.
"""

import torch


def _rotate(dst, src, cos, sin):
    half = src.shape[-1] // 2
    x1, x2 = src[..., :half].float(), src[..., half:].float()
    dst.copy_(torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(dst.dtype))


def rotary_embedding(query_out, key_out, positions, query, key, cos_sin_cache):
    head_dim = cos_sin_cache.shape[-1]
    half = head_dim // 2
    kv_heads = key.shape[1] // head_dim
    group = query.shape[1] // key.shape[1] * head_dim   # the query elements that share one KV head
    for t in range(positions.shape[0]):
        row = cos_sin_cache[positions[t]].float()
        cos, sin = row[:half], row[half:]
        for h in range(kv_heads):
            q = slice(h * group, (h + 1) * group)
            k = slice(h * head_dim, (h + 1) * head_dim)
            _rotate(query_out[t, q].view(-1, head_dim), query[t, q].view(-1, head_dim), cos, sin)
            _rotate(key_out[t, k], key[t, k], cos, sin)
