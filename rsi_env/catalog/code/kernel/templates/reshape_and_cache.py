"""Your kernel: the paged KV-cache write (vLLM's ``reshape_and_cache_flash``). Make it fast.

    reshape_and_cache(key, value, key_cache, value_cache, slot_mapping) -> None

``key`` and ``value`` are ``[num_tokens, num_kv_heads, head_dim]``: this step's new keys and values.
``key_cache``/``value_cache`` are ``[num_blocks, block_size, num_kv_heads, head_dim]`` (the layout
``paged_attention_decode`` reads). ``slot_mapping`` is int64 ``[num_tokens]``: token ``t`` goes to slot
``s = slot_mapping[t]``, that is block ``s // block_size``, offset ``s % block_size``, of both caches; a slot
of -1 marks a padding token, which is written nowhere. Write the caches in place; every other slot must
stay exactly as it is, and ``key``, ``value`` and ``slot_mapping`` must not change. One dtype throughout
(bfloat16, float16 or float32). The destination slots arrive filled with NaN. Checked bit for bit against
a reference on fresh random inputs; timed against PyTorch eager (vLLM's test reference, vectorised).

This version is deliberately naive (one Python iteration per token and KV head, as the CUDA kernel has one
thread block per token and a thread per element).
"""


def reshape_and_cache(key, value, key_cache, value_cache, slot_mapping):
    block_size = key_cache.shape[1]
    for t in range(key.shape[0]):
        slot = int(slot_mapping[t])
        if slot < 0:
            continue
        block, offset = slot // block_size, slot % block_size
        for h in range(key.shape[1]):
            key_cache[block, offset, h] = key[t, h]
            value_cache[block, offset, h] = value[t, h]
