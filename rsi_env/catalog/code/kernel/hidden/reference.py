"""Hidden references of RSI/Kernel-v0: the float64 truth and the PyTorch-eager implementation timed against.

``reference64`` computes every op in float64 from the same inputs (the correctness check); ``eager``
is vLLM's ``forward_native`` of each op (PyTorch eager, the dtype handling vLLM uses), written into
the destination tensors — the baseline of the speedup and of KernelBench's ``fast_p``. Neither is
ever shown to the agent's sandbox, and the harness deletes this file before the candidate's process
starts. Tolerances are per dtype, wide enough for the eager reference itself on every shape.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

TOLERANCES = {"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (3e-2, 3e-2)}  # (atol, rtol)


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
    raise ValueError(f"unknown op {op!r}")


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
    else:
        raise ValueError(f"unknown op {op!r}")
