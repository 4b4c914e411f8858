"""Your kernel: the routing bookkeeping before a fused MoE GEMM (vLLM's ``moe_align_block_size``). Make it fast.

    moe_align_block_size(sorted_token_ids, expert_ids, num_tokens_post_pad, topk_ids, num_experts, block_size) -> None

``topk_ids`` is int32 ``[num_tokens, topk]``: the experts (in ``[0, num_experts)``, distinct per token) each token
was routed to. Number its (token, expert) pairs in row-major order, ``i = token * topk + k`` (``numel`` pairs in
all). The GEMM runs in blocks of ``block_size`` rows, one expert per block, so:

- each expert ``e``'s pairs form one group, in ascending ``i``, padded to a multiple of ``block_size`` (an
  expert with no pairs has an empty group); the groups lie one after another in expert order;
- ``sorted_token_ids`` (int32, ``numel + num_experts * (block_size - 1)`` long) holds the groups' pair indices;
  every padding entry, and every entry past the last group, is ``numel``;
- ``expert_ids`` (int32, ``ceil(len(sorted_token_ids) / block_size)`` long) holds each block's expert, and 0
  for every block past the last group;
- ``num_tokens_post_pad`` (int32 ``[1]``) holds the groups' total length.

Do not change ``topk_ids``; the outputs arrive filled with -2**31. Checked exactly against a reference on fresh
random routings (some experts far more popular than others); timed against PyTorch eager (vLLM's test
reference: a stable sort by expert, on whole tensors).

This version is deliberately naive (one Python iteration per pair, one tensor store per index).
"""


def moe_align_block_size(sorted_token_ids, expert_ids, num_tokens_post_pad, topk_ids, num_experts, block_size):
    flat = topk_ids.flatten().tolist()
    groups = [[] for _ in range(num_experts)]
    for i, e in enumerate(flat):
        groups[e].append(i)
    sorted_token_ids.fill_(len(flat))
    expert_ids.fill_(0)
    start = 0
    for e in range(num_experts):
        for j, i in enumerate(groups[e]):
            sorted_token_ids[start + j] = i
        blocks = (len(groups[e]) + block_size - 1) // block_size
        for b in range(blocks):
            expert_ids[start // block_size + b] = e
        start += blocks * block_size
    num_tokens_post_pad[0] = start
