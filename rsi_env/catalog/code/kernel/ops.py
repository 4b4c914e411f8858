"""The four operators of RSI/Kernel-v0: shapes drawn per seed, inputs, poisoned outputs, the call.

Copied beside the harness into each fresh sandbox; the candidate's process imports it too, so nothing
here is secret (the references live in ``hidden/``). Every kernel takes keyword arguments and writes
its results into destination tensors the harness allocates, the way vLLM's ``_C`` ops do
(``silu_and_mul(out, x)``): the harness fills them with NaN first, so a kernel that does not write
its output is seen.

- ``rms_norm_residual(out, x, residual, weight, epsilon)``: vLLM's ``fused_add_rms_norm``:
  ``residual += x`` in place, ``out = residual / sqrt(mean(residual**2) + epsilon) * weight``
  (the sum taken in float32, as vLLM does); ``x`` and ``weight`` stay unchanged.
- ``silu_and_mul(out, x)``: ``out = silu(x[..., :d]) * x[..., d:]``, ``d = x.shape[-1] // 2``.
- ``rotary_embedding(query_out, key_out, positions, query, key, cos_sin_cache)``: neox-style rotary
  embedding over the whole head (``rotary_dim == head_dim``); ``query`` is ``[tokens, heads * head_dim]``,
  ``key`` ``[tokens, kv_heads * head_dim]``, ``cos_sin_cache`` ``[max_position, head_dim]`` (cos in the
  first half, sin in the second), ``positions`` int64 ``[tokens]``.
- ``paged_attention_decode(out, query, key_cache, value_cache, block_tables, seq_lens, scale)``: one
  decode step; ``query``/``out`` ``[seqs, heads, head_dim]``, caches ``[blocks, block_size, kv_heads,
  head_dim]``, ``block_tables`` int32 ``[seqs, max_blocks]`` (entries past a sequence's blocks are 0),
  ``seq_lens`` int32 ``[seqs]``; query head ``h`` reads kv head ``h // (heads // kv_heads)`` (GQA);
  slots past ``seq_lens`` hold garbage and must be ignored.

Shapes come from a model's dimensions (hidden size, intermediate size, heads, KV heads, head size)
and a batch drawn per seed; ``scale="cpu"`` keeps a call in the milliseconds on one CPU core,
``scale="cuda"`` draws serving-sized batches.
"""

from __future__ import annotations

import hashlib
import math
import random
from typing import Any

import torch

OPS = ("rms_norm_residual", "silu_and_mul", "rotary_embedding", "paged_attention_decode")
DTYPES = ("bfloat16", "float16", "float32")
OUTPUTS = {"rms_norm_residual": ("out",), "silu_and_mul": ("out",), "rotary_embedding": ("query_out", "key_out"),
           "paged_attention_decode": ("out",)}
INOUT = {"rms_norm_residual": ("residual",)}
SCALES: dict[str, dict[str, tuple[int, int]]] = {
    "cpu": {"tokens": (8, 96), "seqs": (2, 8), "seq_len": (1, 384)},
    "cuda": {"tokens": (64, 4096), "seqs": (8, 64), "seq_len": (1, 2048)}}
BLOCK_SIZE = 16
MAX_POSITION = 4096


def draw_shape(op: str, seed: int, model: dict[str, Any], scale: str = "cpu") -> dict[str, Any]:
    """The shape, dtype and scalars of ``op``'s call for ``seed`` (standard library only: the env uses it too)."""
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; known: {', '.join(OPS)}")
    rng = random.Random(f"{op}:{seed}")
    lim = SCALES[scale]
    lo, hi = lim["tokens"]
    tokens = int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
    shape: dict[str, Any] = {"op": op, "seed": seed, "dtype": rng.choice(DTYPES)}
    if op == "rms_norm_residual":
        shape.update(num_tokens=tokens, hidden_size=model["hidden_size"], epsilon=rng.choice([1e-5, 1e-6]))
    elif op == "silu_and_mul":
        shape.update(num_tokens=tokens, intermediate_size=model["intermediate_size"])
    elif op == "rotary_embedding":
        shape.update(num_tokens=tokens, num_heads=model["num_heads"], num_kv_heads=model["num_kv_heads"],
                     head_dim=model["head_dim"], rope_theta=rng.choice([10000.0, 500000.0, 1000000.0]))
    else:
        s_lo, s_hi = lim["seqs"]
        seqs = rng.randint(s_lo, s_hi)
        shape.update(num_seqs=seqs, num_heads=model["num_heads"], num_kv_heads=model["num_kv_heads"],
                     head_dim=model["head_dim"], block_size=BLOCK_SIZE,
                     seq_lens=[rng.randint(*lim["seq_len"]) for _ in range(seqs)])
    return shape


def _generator(shape: dict[str, Any], index: int, device: str) -> torch.Generator:
    digest = hashlib.sha256(f"{shape['op']}:{shape['seed']}:{index}".encode()).hexdigest()
    return torch.Generator(device=device).manual_seed(int(digest[:15], 16))


def cos_sin_cache(head_dim: int, theta: float, dtype: torch.dtype) -> torch.Tensor:
    """vLLM's rotary cache: ``[MAX_POSITION, head_dim]``, cos of each frequency then sin."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    freqs = torch.outer(torch.arange(MAX_POSITION, dtype=torch.float64), inv_freq)
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(dtype)


def make_inputs(shape: dict[str, Any], index: int = 0, device: str = "cpu") -> dict[str, Any]:
    """Input set ``index`` of ``shape``, drawn on ``device``: the same numbers in every process on that device."""
    g = _generator(shape, index, device)
    dt = getattr(torch, shape["dtype"])
    op = shape["op"]

    def randn(*size: int, std: float = 1.0) -> torch.Tensor:
        return (torch.randn(*size, generator=g, dtype=torch.float32, device=device) * std).to(dt)

    inp: dict[str, Any]
    if op == "rms_norm_residual":
        t, h = shape["num_tokens"], shape["hidden_size"]
        inp = {"x": randn(t, h), "residual": randn(t, h), "weight": 1.0 + randn(h, std=0.1),
               "epsilon": shape["epsilon"]}
    elif op == "silu_and_mul":
        inp = {"x": randn(shape["num_tokens"], 2 * shape["intermediate_size"], std=2.0)}
    elif op == "rotary_embedding":
        t, d = shape["num_tokens"], shape["head_dim"]
        inp = {"positions": torch.randint(0, MAX_POSITION, (t,), generator=g, dtype=torch.int64, device=device),
               "query": randn(t, shape["num_heads"] * d), "key": randn(t, shape["num_kv_heads"] * d),
               "cos_sin_cache": cos_sin_cache(d, shape["rope_theta"], dt)}
    else:
        s, bs = shape["num_seqs"], shape["block_size"]
        lens = shape["seq_lens"]
        need = [math.ceil(n / bs) for n in lens]
        num_blocks = sum(need) + 4
        width = max(need)
        order = torch.randperm(num_blocks - 1, generator=g, device=device)[: sum(need)].cpu() + 1  # 0 unused
        table = torch.zeros(s, width, dtype=torch.int32)
        k = 0
        for i, n in enumerate(need):
            table[i, :n] = order[k:k + n].to(torch.int32)
            k += n
        kvh, d = shape["num_kv_heads"], shape["head_dim"]
        inp = {"query": randn(s, shape["num_heads"], d), "key_cache": randn(num_blocks, bs, kvh, d),
               "value_cache": randn(num_blocks, bs, kvh, d), "block_tables": table,
               "seq_lens": torch.tensor(lens, dtype=torch.int32), "scale": 1.0 / math.sqrt(d)}
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in inp.items()}


def make_outputs(shape: dict[str, Any], device: str = "cpu") -> dict[str, torch.Tensor]:
    """The destination tensors of ``shape``'s call, filled with NaN (the poison a kernel must overwrite)."""
    dt = getattr(torch, shape["dtype"])
    op = shape["op"]
    sizes: dict[str, tuple[int, ...]]
    if op == "rms_norm_residual":
        sizes = {"out": (shape["num_tokens"], shape["hidden_size"])}
    elif op == "silu_and_mul":
        sizes = {"out": (shape["num_tokens"], shape["intermediate_size"])}
    elif op == "rotary_embedding":
        t, d = shape["num_tokens"], shape["head_dim"]
        sizes = {"query_out": (t, shape["num_heads"] * d), "key_out": (t, shape["num_kv_heads"] * d)}
    else:
        sizes = {"out": (shape["num_seqs"], shape["num_heads"], shape["head_dim"])}
    return {k: torch.full(v, math.nan, dtype=dt, device=device) for k, v in sizes.items()}


def set_bytes(shape: dict[str, Any], device: str = "cpu") -> int:
    """Bytes of one input set and its outputs (caps how many sets a timed block holds)."""
    tensors = [v for v in make_inputs(shape, 0, device).values() if isinstance(v, torch.Tensor)]
    tensors += list(make_outputs(shape, "meta").values())
    return sum(t.numel() * t.element_size() for t in tensors)


def describe(shape: dict[str, Any]) -> str:
    """One line for people: the op, dtype and sizes."""
    skip = {"op", "seed", "seq_lens"}
    parts = [f"{k}={v}" for k, v in shape.items() if k not in skip]
    if "seq_lens" in shape:
        lens = shape["seq_lens"]
        parts.append(f"seq_lens={min(lens)}..{max(lens)}")
    return f"{shape['op']}(" + ", ".join(parts) + ")"
