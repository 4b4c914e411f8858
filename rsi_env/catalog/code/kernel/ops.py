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


def _generator(shape: dict[str, Any], index: int, device: str, key: str) -> torch.Generator:
    salt = f":{key}" if key else ""
    digest = hashlib.sha256(f"{shape['op']}:{shape['seed']}:{index}{salt}".encode()).hexdigest()
    return torch.Generator(device=device).manual_seed(int(digest[:15], 16))


def cos_sin_cache(head_dim: int, theta: float, dtype: torch.dtype) -> torch.Tensor:
    """vLLM's rotary cache: ``[MAX_POSITION, head_dim]``, cos of each frequency then sin."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    freqs = torch.outer(torch.arange(MAX_POSITION, dtype=torch.float64), inv_freq)
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(dtype)


def _blocks_needed(shape: dict[str, Any]) -> list[int]:
    return [math.ceil(n / shape["block_size"]) for n in shape["seq_lens"]]


def input_specs(shape: dict[str, Any]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The dtype name and size of every tensor argument of ``shape``'s call (outputs excluded)."""
    dt, op = shape["dtype"], shape["op"]
    if op == "rms_norm_residual":
        t, h = shape["num_tokens"], shape["hidden_size"]
        return {"x": (dt, (t, h)), "residual": (dt, (t, h)), "weight": (dt, (h,))}
    if op == "silu_and_mul":
        return {"x": (dt, (shape["num_tokens"], 2 * shape["intermediate_size"]))}
    if op == "rotary_embedding":
        t, d = shape["num_tokens"], shape["head_dim"]
        return {"positions": ("int64", (t,)), "query": (dt, (t, shape["num_heads"] * d)),
                "key": (dt, (t, shape["num_kv_heads"] * d)), "cos_sin_cache": (dt, (MAX_POSITION, d))}
    need = _blocks_needed(shape)
    cache = (sum(need) + 4, shape["block_size"], shape["num_kv_heads"], shape["head_dim"])
    return {"query": (dt, (shape["num_seqs"], shape["num_heads"], shape["head_dim"])), "key_cache": (dt, cache),
            "value_cache": (dt, cache), "block_tables": ("int32", (shape["num_seqs"], max(need))),
            "seq_lens": ("int32", (shape["num_seqs"],))}


def output_specs(shape: dict[str, Any]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The dtype name and size of every destination tensor of ``shape``'s call."""
    dt, op = shape["dtype"], shape["op"]
    if op == "rms_norm_residual":
        return {"out": (dt, (shape["num_tokens"], shape["hidden_size"]))}
    if op == "silu_and_mul":
        return {"out": (dt, (shape["num_tokens"], shape["intermediate_size"]))}
    if op == "rotary_embedding":
        t, d = shape["num_tokens"], shape["head_dim"]
        return {"query_out": (dt, (t, shape["num_heads"] * d)), "key_out": (dt, (t, shape["num_kv_heads"] * d))}
    return {"out": (dt, (shape["num_seqs"], shape["num_heads"], shape["head_dim"]))}


def scalars(shape: dict[str, Any]) -> dict[str, float]:
    """The call's non-tensor arguments."""
    if shape["op"] == "rms_norm_residual":
        return {"epsilon": shape["epsilon"]}
    if shape["op"] == "paged_attention_decode":
        return {"scale": 1.0 / math.sqrt(shape["head_dim"])}
    return {}


def make_inputs(shape: dict[str, Any], index: int = 0, device: str = "cpu", key: str = "") -> dict[str, Any]:
    """Input set ``index`` of ``shape``, drawn on ``device``: the same numbers in every process on that device.

    ``key`` salts the draw: the harness's timed sets use a secret one, so no kernel can compute them ahead.
    """
    g = _generator(shape, index, device, key)
    dt = getattr(torch, shape["dtype"])
    spec = input_specs(shape)

    def randn(name: str, std: float = 1.0) -> torch.Tensor:
        return (torch.randn(*spec[name][1], generator=g, dtype=torch.float32, device=device) * std).to(dt)

    inp: dict[str, Any]
    op = shape["op"]
    if op == "rms_norm_residual":
        inp = {"x": randn("x"), "residual": randn("residual"), "weight": 1.0 + randn("weight", std=0.1)}
    elif op == "silu_and_mul":
        inp = {"x": randn("x", std=2.0)}
    elif op == "rotary_embedding":
        t = shape["num_tokens"]
        inp = {"positions": torch.randint(0, MAX_POSITION, (t,), generator=g, dtype=torch.int64, device=device),
               "query": randn("query"), "key": randn("key"),
               "cos_sin_cache": cos_sin_cache(shape["head_dim"], shape["rope_theta"], dt)}
    else:
        need = _blocks_needed(shape)
        num_blocks = spec["key_cache"][1][0]
        order = torch.randperm(num_blocks - 1, generator=g, device=device)[: sum(need)].cpu() + 1  # 0 unused
        table = torch.zeros(*spec["block_tables"][1], dtype=torch.int32)
        k = 0
        for i, n in enumerate(need):
            table[i, :n] = order[k:k + n].to(torch.int32)
            k += n
        inp = {"query": randn("query"), "key_cache": randn("key_cache"), "value_cache": randn("value_cache"),
               "block_tables": table, "seq_lens": torch.tensor(shape["seq_lens"], dtype=torch.int32)}
    inp = {k: v.to(device) for k, v in inp.items()}
    return {**inp, **scalars(shape)}


def make_outputs(shape: dict[str, Any], device: str = "cpu") -> dict[str, torch.Tensor]:
    """The destination tensors of ``shape``'s call, filled with NaN (the poison a kernel must overwrite)."""
    return {k: torch.full(size, math.nan, dtype=getattr(torch, dt), device=device)
            for k, (dt, size) in output_specs(shape).items()}


def _nbytes(dtype: str, size: tuple[int, ...]) -> int:
    return math.prod(size) * torch.empty((), dtype=getattr(torch, dtype)).element_size()


def set_bytes(shape: dict[str, Any], device: str = "cpu") -> int:
    """Bytes of one input set and its outputs (caps how many sets a timed block holds)."""
    return sum(_nbytes(*spec) for spec in {**input_specs(shape), **output_specs(shape)}.values())


def min_bytes(shape: dict[str, Any]) -> int:
    """The fewest bytes one correct call must move between memory and the device: its roofline's traffic.

    Every element it must read once and every element it must write once: for paged attention only the
    cached tokens of each sequence (not the slots past ``seq_lens``), for rotary only the positions, the
    query and key (the cos/sin rows a call needs depend on its positions and are not counted). A lower
    bound: a kernel that moves fewer bytes than this cannot have computed its outputs.
    """
    ins, outs = input_specs(shape), output_specs(shape)
    moved = sum(_nbytes(*spec) for spec in outs.values())
    if shape["op"] == "rms_norm_residual":
        return moved + sum(_nbytes(*spec) for spec in ins.values()) + _nbytes(*ins["residual"])  # residual written
    if shape["op"] == "paged_attention_decode":
        dt = shape["dtype"]
        tokens = sum(shape["seq_lens"])
        kv = 2 * _nbytes(dt, (tokens, shape["num_kv_heads"], shape["head_dim"]))
        return moved + kv + _nbytes(*ins["query"]) + _nbytes(*ins["seq_lens"]) + 4 * sum(_blocks_needed(shape))
    if shape["op"] == "rotary_embedding":
        return moved + sum(_nbytes(*ins[k]) for k in ("positions", "query", "key"))
    return moved + sum(_nbytes(*spec) for spec in ins.values())


ALIGN = 256  # bytes between the tensors of a shared block (any dtype's alignment, and a cache line apart)


def block_layout(shape: dict[str, Any], count: int) -> tuple[int, list[dict[str, tuple[int, str, tuple[int, ...]]]]]:
    """Where ``count`` sets of ``shape`` (inputs and outputs) lie in one shared buffer: its size and each tensor's
    (offset, dtype, size), set by set. The harness and the worker compute the same layout."""
    specs = {**input_specs(shape), **output_specs(shape)}
    offset, sets = 0, []
    for _ in range(count):
        slots = {}
        for name, (dt, size) in specs.items():
            slots[name] = (offset, dt, size)
            offset += -(-_nbytes(dt, size) // ALIGN) * ALIGN
        sets.append(slots)
    return offset, sets


def block_views(buf: torch.Tensor, shape: dict[str, Any], count: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``count`` call sets of ``shape`` as views of ``buf`` (a flat uint8 tensor): (inputs with scalars, outputs)."""
    _, layout = block_layout(shape, count)
    outs = output_specs(shape)
    views = []
    for slots in layout:
        tensors = {name: buf[off:off + _nbytes(dt, size)].view(getattr(torch, dt)).view(size)
                   for name, (off, dt, size) in slots.items()}
        views.append(({k: v for k, v in tensors.items() if k not in outs} | scalars(shape),
                      {k: v for k, v in tensors.items() if k in outs}))
    return views


def describe(shape: dict[str, Any]) -> str:
    """One line for people: the op, dtype and sizes."""
    skip = {"op", "seed", "seq_lens"}
    parts = [f"{k}={v}" for k, v in shape.items() if k not in skip]
    if "seq_lens" in shape:
        lens = shape["seq_lens"]
        parts.append(f"seq_lens={min(lens)}..{max(lens)}")
    return f"{shape['op']}(" + ", ".join(parts) + ")"
