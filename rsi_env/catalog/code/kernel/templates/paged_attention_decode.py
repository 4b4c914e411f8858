"""Your kernel: one decode step of attention over a paged KV cache (vLLM's ``paged_attention``). Make it fast.

    paged_attention_decode(out, query, key_cache, value_cache, block_tables, seq_lens, scale) -> None

``query`` and ``out`` are ``[num_seqs, num_heads, head_dim]``: one new token per sequence. The KV cache is
paged: ``key_cache``/``value_cache`` are ``[num_blocks, block_size, num_kv_heads, head_dim]``; sequence
``i`` has ``seq_lens[i]`` tokens, token ``j`` of it sits in block ``block_tables[i, j // block_size]`` at
slot ``j % block_size`` (``block_tables`` int32 ``[num_seqs, max_blocks]``, entries past a sequence's
blocks are 0; ``seq_lens`` int32 ``[num_seqs]``). Slots past a sequence's length hold garbage. Query head
``h`` attends with kv head ``h // (num_heads // num_kv_heads)`` (grouped-query attention):
``out[i, h] = softmax(scale * K_i @ query[i, h]) @ V_i``. Floating tensors share one dtype (bfloat16,
float16 or float32). Do not change the inputs; ``out`` arrives filled with NaN. Checked against a float64
reference on fresh random inputs (tolerance: float32 1e-4, float16 1e-2, bfloat16 3e-2, absolute and
relative); timed against PyTorch eager.

This version is deliberately naive: a line-by-line port of the CUDA kernel's structure (vLLM's
``paged_attention_v2``), one Python iteration per sequence, head and 512-token partition (its thread blocks),
each gathering its own keys and values, in float32.
"""

import torch

PARTITION = 512   # tokens per thread block of paged_attention_v2 (a multiple of every block size)


def paged_attention_decode(out, query, key_cache, value_cache, block_tables, seq_lens, scale):
    num_heads, head_dim = query.shape[1], query.shape[2]
    block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
    group = num_heads // num_kv_heads
    for i in range(query.shape[0]):
        length = int(seq_lens[i])
        table = block_tables[i, :(length + block_size - 1) // block_size].long()
        for h in range(num_heads):
            q = query[i, h].float()
            logits, values = [], []
            for start in range(0, length, PARTITION):
                blocks = table[start // block_size:(start + PARTITION) // block_size]
                n = min(PARTITION, length - start)
                keys = key_cache[blocks, :, h // group].reshape(-1, head_dim)[:n].float()
                values.append(value_cache[blocks, :, h // group].reshape(-1, head_dim)[:n].float())
                logits.append(keys @ q * scale)
            weights = torch.softmax(torch.cat(logits), dim=0)
            out[i, h] = (weights @ torch.cat(values)).to(out.dtype)
