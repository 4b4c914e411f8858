"""Hidden references of RSI/Kernel: the float64 truth and the PyTorch-eager implementation timed against.

``reference64`` computes every op in float64 from the same inputs (the correctness check); ``eager``
is vLLM's ``forward_native`` of each op (PyTorch eager, the dtype handling vLLM uses; for the ops vLLM
has only as custom kernels, its test reference, vectorised), written into the destination tensors —
the baseline of the speedup and of KernelBench's ``fast_p``. Neither is ever shown to the agent's
sandbox, and the harness deletes this file before the candidate's process starts. Tolerances
(`tolerance`) are per dtype, wide enough for the eager reference itself on every shape; a cache write
and the integers of the MoE alignment must be exact, and fp8 quantisation is held to its own rounding.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

TOLERANCES = {"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (3e-2, 3e-2)}  # (atol, rtol)
EXACT = (0.0, 0.0)   # a copy: bit for bit
# fp8 e4m3: within half a unit in the last place of the exact quotient (3 mantissa bits: a relative half-spacing
# of at most 2**-4; 2**-10 below the normal range), so round-to-nearest passes and truncation or a wrong scale does
# not; the float32 scale to float32's own rounding of amax / 448.
FP8_TOLERANCES = {"out": (2.0 ** -10, 2.0 ** -4), "scales": (0.0, 1e-6)}
FP8_MAX = 448.0
FP8_MIN_SCALE = 1.0 / (FP8_MAX * 512.0)


def tolerance(op: str, name: str, dtype: str) -> tuple[float, float]:
    """(atol, rtol) of result ``name`` of ``op`` in ``dtype``."""
    if op in ("reshape_and_cache", "moe_align_block_size"):
        return EXACT
    if op == "dynamic_per_token_scaled_fp8_quant":
        return FP8_TOLERANCES[name]
    return TOLERANCES[dtype]


def _neox64(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def reference64(op: str, inp: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The exact results (float64) of ``op`` on ``inp``: every output and in-place result by name."""
    d = {k: (v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v) for k, v in inp.items()}
    if op == "rms_norm_residual":
        r = d["x"] + d["residual"]
        out = r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + d["epsilon"]) * d["weight"]
        return {"out": out, "residual": r}
    if op == "silu_and_mul":
        h = d["x"].shape[-1] // 2
        return {"out": F.silu(d["x"][..., :h]) * d["x"][..., h:]}
    if op == "rotary_embedding":
        cos, sin = d["cos_sin_cache"][d["positions"]].chunk(2, dim=-1)
        res = {}
        for name in ("query", "key"):
            x = d[name]
            t = x.shape[0]
            x = x.view(t, -1, cos.shape[-1] * 2)
            res[f"{name}_out"] = _neox64(x, cos[:, None, :], sin[:, None, :]).reshape(t, -1)
        return res
    if op == "paged_attention_decode":
        q, kc, vc = d["query"], d["key_cache"], d["value_cache"]
        bs, group = kc.shape[1], q.shape[1] // kc.shape[2]
        outs = []
        for i, n in enumerate(d["seq_lens"].tolist()):
            blocks = d["block_tables"][i, : (n + bs - 1) // bs].long()
            k = kc[blocks].reshape(-1, kc.shape[2], kc.shape[3])[:n].repeat_interleave(group, dim=1)
            v = vc[blocks].reshape(-1, vc.shape[2], vc.shape[3])[:n].repeat_interleave(group, dim=1)
            w = torch.softmax(torch.einsum("hd,nhd->hn", q[i], k) * d["scale"], dim=-1)
            outs.append(torch.einsum("hn,nhd->hd", w, v))
        return {"out": torch.stack(outs)}
    if op == "reshape_and_cache":
        res = {}
        keep = d["slot_mapping"] >= 0
        for src, name in (("key", "key_cache"), ("value", "value_cache")):
            cache = d[name].clone()
            cache.view(-1, *cache.shape[2:])[d["slot_mapping"][keep]] = d[src][keep]
            res[name] = cache
        return res
    if op == "dynamic_per_token_scaled_fp8_quant":
        scales = (d["x"].abs().amax(-1, keepdim=True) / FP8_MAX).clamp(min=FP8_MIN_SCALE)
        return {"out": (d["x"] / scales).clamp(-FP8_MAX, FP8_MAX), "scales": scales}
    if op == "moe_sum":
        return {"out": d["x"].sum(1)}
    if op == "moe_align_block_size":
        return _moe_align64(d["topk_ids"], int(d["num_experts"]), int(d["block_size"]))
    raise ValueError(f"unknown op {op!r}")


def _moe_align64(topk_ids: torch.Tensor, num_experts: int, block_size: int) -> dict[str, torch.Tensor]:
    """The alignment expert by expert: its pairs in ascending order, padded with ``numel``; unused blocks expert 0."""
    flat = topk_ids.flatten().long()
    numel = flat.numel()
    padded = numel + num_experts * (block_size - 1)
    sorted_ids = torch.full((padded,), float(numel), dtype=torch.float64, device=flat.device)
    expert_ids = torch.zeros(-(-padded // block_size), dtype=torch.float64, device=flat.device)
    start = 0
    for e in range(num_experts):
        pairs = (flat == e).nonzero().flatten()
        sorted_ids[start:start + pairs.numel()] = pairs.double()
        blocks = -(-pairs.numel() // block_size)
        expert_ids[start // block_size:start // block_size + blocks] = float(e)
        start += blocks * block_size
    total = torch.tensor([float(start)], dtype=torch.float64, device=flat.device)
    return {"sorted_token_ids": sorted_ids, "expert_ids": expert_ids, "num_tokens_post_pad": total}


def eager(op: str, args: dict[str, Any]) -> None:
    """vLLM's ``forward_native`` of ``op`` (PyTorch eager), its results copied into the destinations."""
    if op == "rms_norm_residual":
        x, residual, weight = args["x"], args["residual"], args["weight"]
        orig = x.dtype
        s = x.to(torch.float32) + residual.to(torch.float32)
        residual.copy_(s.to(orig))
        variance = s.pow(2).mean(dim=-1, keepdim=True)
        s = s * torch.rsqrt(variance + args["epsilon"])
        args["out"].copy_((s.to(weight.dtype) * weight).to(orig))
    elif op == "silu_and_mul":
        x = args["x"]
        h = x.shape[-1] // 2
        args["out"].copy_(F.silu(x[..., :h]) * x[..., h:])
    elif op == "rotary_embedding":
        positions, cache = args["positions"], args["cos_sin_cache"]
        cos, sin = cache.index_select(0, positions).chunk(2, dim=-1)
        head = cache.shape[-1]
        for name in ("query", "key"):
            x = args[name]
            t = x.shape[0]
            x = x.view(t, -1, head)
            x1, x2 = torch.chunk(x, 2, dim=-1)
            c, s_ = cos.unsqueeze(-2).to(x.dtype), sin.unsqueeze(-2).to(x.dtype)
            rot = torch.cat((x1 * c - x2 * s_, x2 * c + x1 * s_), dim=-1)
            args[f"{name}_out"].copy_(rot.reshape(t, -1))
    elif op == "paged_attention_decode":  # vLLM's test reference, its token loop vectorised per sequence
        q, kc, vc, out = args["query"], args["key_cache"], args["value_cache"], args["out"]
        bs, group = kc.shape[1], q.shape[1] // kc.shape[2]
        for i, n in enumerate(args["seq_lens"].tolist()):
            blocks = args["block_tables"][i, : (n + bs - 1) // bs].long()
            k = kc[blocks].flatten(0, 1)[:n].repeat_interleave(group, dim=1).float().transpose(0, 1)
            v = vc[blocks].flatten(0, 1)[:n].repeat_interleave(group, dim=1).float().transpose(0, 1)
            scores = torch.matmul(k, q[i].float().unsqueeze(-1)).squeeze(-1) * args["scale"]
            out[i] = torch.matmul(torch.softmax(scores, dim=-1).unsqueeze(1), v).squeeze(1).to(out.dtype)
    elif op == "reshape_and_cache":  # vLLM's test reference of reshape_and_cache_flash, its token loop vectorised
        slot_mapping = args["slot_mapping"]
        keep = slot_mapping >= 0
        slots = slot_mapping[keep]
        block_size = args["key_cache"].shape[1]
        blocks, offsets = torch.div(slots, block_size, rounding_mode="floor"), slots % block_size
        args["key_cache"][blocks, offsets] = args["key"][keep]
        args["value_cache"][blocks, offsets] = args["value"][keep]
    elif op == "dynamic_per_token_scaled_fp8_quant":  # QuantFP8.forward_native, per token, no scale_ub
        x = args["x"]
        x_max = x.abs().amax(dim=-1).unsqueeze(-1).to(torch.float32)
        scale = (x_max / FP8_MAX).clamp(min=FP8_MIN_SCALE)
        out = (x.to(torch.float32) * scale.reciprocal()).clamp(-FP8_MAX, FP8_MAX).to(args["out"].dtype)
        args["out"].copy_(out)
        args["scales"].copy_(scale)
    elif op == "moe_sum":  # vLLM's moe_sum for any topk: torch.sum over the experts
        args["out"].copy_(torch.sum(args["x"], dim=1))
    elif op == "moe_align_block_size":  # vLLM's test reference (a stable sort by expert), on whole tensors
        _moe_align_eager(args)
    else:
        raise ValueError(f"unknown op {op!r}")


def _moe_align_eager(args: dict[str, Any]) -> None:
    flat = args["topk_ids"].flatten()
    numel, block_size, num_experts = flat.numel(), args["block_size"], args["num_experts"]
    order = torch.sort(flat, stable=True).indices
    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block_size - 1) // block_size * block_size
    starts = torch.cumsum(padded, 0) - padded
    first_of = torch.cumsum(counts, 0) - counts
    experts = flat[order].long()
    slots = starts[experts] + torch.arange(numel, device=flat.device) - first_of[experts]
    sorted_ids = args["sorted_token_ids"]
    sorted_ids.fill_(numel)
    sorted_ids[slots] = order.to(sorted_ids.dtype)
    blocks = torch.repeat_interleave(torch.arange(num_experts, device=flat.device), padded // block_size)
    args["expert_ids"].zero_()
    args["expert_ids"][: blocks.numel()] = blocks.to(args["expert_ids"].dtype)
    args["num_tokens_post_pad"].fill_(int(padded.sum()))
