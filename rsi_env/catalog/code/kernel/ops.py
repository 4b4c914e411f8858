"""The operators of RSI/Kernel: shapes drawn per seed, inputs, poisoned outputs, the call.

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
- ``reshape_and_cache(key, value, key_cache, value_cache, slot_mapping)``: the paged KV-cache write (vLLM's
  ``reshape_and_cache_flash``, the cache layout ``paged_attention_decode`` reads): token ``t``'s ``key[t]`` and
  ``value[t]`` (``[tokens, kv_heads, head_dim]``) go to slot ``slot_mapping[t]`` (int64; block
  ``slot // block_size``, offset ``slot % block_size``) of ``key_cache``/``value_cache`` ``[blocks, block_size,
  kv_heads, head_dim]``, in place; a slot of -1 is a padding token, written nowhere. The destination slots
  arrive as NaN (the poison of an in-place result); every other slot must stay as it is, bit for bit.
- ``dynamic_per_token_scaled_fp8_quant(out, scales, x)``: per row, ``scales = max(amax(|x|) / 448, 1 /
  (448 * 512))`` (float32 ``[tokens, 1]``) and ``out = clamp(x / scales, -448, 448)`` as ``float8_e4m3fn``.
- ``moe_sum(out, x)``: ``out = x.sum(1)``, the reduction over a token's ``topk`` expert outputs
  (``x`` ``[tokens, topk, hidden]``).
- ``moe_align_block_size(sorted_token_ids, expert_ids, num_tokens_post_pad, topk_ids, num_experts,
  block_size)``: the routed (token, expert) pairs of ``topk_ids`` (int32 ``[tokens, topk]``) grouped by expert
  and each group padded to a multiple of ``block_size``, for the fused MoE GEMM: integer outputs, exact (the
  template's docstring states the layout). It has no floating tensors: its dtype is ``int32``.

Shapes come from a model's dimensions (hidden size, intermediate size, heads, KV heads, head size,
experts) and a batch drawn per seed (the cache write and the MoE alignment draw a whole step's tokens:
their cost is per token); ``scale="cpu"`` keeps a call in the milliseconds on one CPU core,
``scale="cuda"`` draws serving-sized batches.
"""

from __future__ import annotations

import hashlib
import math
import random
from typing import Any

import torch

OPS = ("rms_norm_residual", "silu_and_mul", "rotary_embedding", "paged_attention_decode", "reshape_and_cache",
       "dynamic_per_token_scaled_fp8_quant", "moe_sum", "moe_align_block_size")
DTYPES = ("bfloat16", "float16", "float32")
INTEGER_OPS = ("moe_align_block_size",)   # no floating tensors: no dtype to draw or pin
OUTPUTS = {"rms_norm_residual": ("out",), "silu_and_mul": ("out",), "rotary_embedding": ("query_out", "key_out"),
           "paged_attention_decode": ("out",), "reshape_and_cache": (),
           "dynamic_per_token_scaled_fp8_quant": ("out", "scales"), "moe_sum": ("out",),
           "moe_align_block_size": ("sorted_token_ids", "expert_ids", "num_tokens_post_pad")}
INOUT = {"rms_norm_residual": ("residual",), "reshape_and_cache": ("key_cache", "value_cache")}
# In-place results whose elements a call must write arrive as NaN, as the outputs do: the harness checks every set
# of a block for them (an op with no output tensor still shows a skipped call).
POISONED = {"reshape_and_cache": ("key_cache", "value_cache")}
FP8 = "float8_e4m3fn"
FP8_MAX = 448.0
FP8_MIN_SCALE = 1.0 / (FP8_MAX * 512.0)   # vLLM's floor of a dynamic scale (an all-zero row)
TOPK = (2, 4, 8)   # experts per token of the MoE ops where the model is dense
EXPERTS = (16, 32, 64, 128)   # and its experts
MOE_BLOCK_SIZES = (16, 32, 64)   # the fused MoE GEMM's BLOCK_SIZE_M
POISON_INT = -(2 ** 31)   # an integer output's poison (no valid index or count is negative)
SCALES: dict[str, dict[str, tuple[int, int]]] = {
    "cpu": {"tokens": (8, 96), "seqs": (2, 8), "seq_len": (1, 384), "step_tokens": (32, 512)},
    "cuda": {"tokens": (64, 4096), "seqs": (8, 64), "seq_len": (1, 2048), "step_tokens": (256, 4096)}}
# Ops that see a whole step's tokens at once (prefill chunks and decodes together: every token's KV write, every
# routed pair of an MoE layer), whose cost is per token or pair rather than per element of a wide row.
STEP_OPS = ("reshape_and_cache", "moe_align_block_size")
BLOCK_SIZE = 16
MAX_POSITION = 4096


def draw_shape(op: str, seed: int, model: dict[str, Any], scale: str = "cpu", dtype: str | None = None) -> dict[str, Any]:
    """The shape, dtype and scalars of ``op``'s call for ``seed`` (standard library only: the env uses it too).

    ``dtype`` pins the dtype; the seed's own draw of it is still made, so every other size is the same either way.
    """
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; known: {', '.join(OPS)}")
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")
    if dtype is not None and op in INTEGER_OPS:
        raise ValueError(f"{op} has no floating tensors: it has no dtype to pin")
    rng = random.Random(f"{op}:{seed}")
    lim = SCALES[scale]
    lo, hi = lim["step_tokens" if op in STEP_OPS else "tokens"]
    tokens = int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
    drawn = rng.choice(DTYPES)
    shape: dict[str, Any] = {"op": op, "seed": seed, "dtype": "int32" if op in INTEGER_OPS else dtype or drawn}
    if op == "rms_norm_residual":
        shape.update(num_tokens=tokens, hidden_size=model["hidden_size"], epsilon=rng.choice([1e-5, 1e-6]))
    elif op == "silu_and_mul":
        shape.update(num_tokens=tokens, intermediate_size=model["intermediate_size"])
    elif op == "rotary_embedding":
        shape.update(num_tokens=tokens, num_heads=model["num_heads"], num_kv_heads=model["num_kv_heads"],
                     head_dim=model["head_dim"], rope_theta=rng.choice([10000.0, 500000.0, 1000000.0]))
    elif op == "reshape_and_cache":   # a cache with room for half as many tokens again and more: slots scattered
        shape.update(num_tokens=tokens, num_kv_heads=model["num_kv_heads"], head_dim=model["head_dim"],
                     block_size=BLOCK_SIZE, num_blocks=math.ceil(1.5 * tokens / BLOCK_SIZE) + rng.randint(2, 8),
                     num_padding=rng.randint(0, tokens // 8))
    elif op == "dynamic_per_token_scaled_fp8_quant":
        shape.update(num_tokens=tokens, hidden_size=model["hidden_size"])
    elif op == "moe_sum":
        shape.update(num_tokens=tokens, topk=model.get("num_experts_per_tok") or rng.choice(TOPK),
                     hidden_size=model["hidden_size"])
    elif op == "moe_align_block_size":
        shape.update(num_tokens=tokens, topk=model.get("num_experts_per_tok") or rng.choice(TOPK),
                     num_experts=model.get("num_experts") or rng.choice(EXPERTS),
                     block_size=rng.choice(MOE_BLOCK_SIZES))
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
    if op == "reshape_and_cache":
        t, kv = shape["num_tokens"], (shape["num_kv_heads"], shape["head_dim"])
        cache = (shape["num_blocks"], shape["block_size"], *kv)
        return {"key": (dt, (t, *kv)), "value": (dt, (t, *kv)), "key_cache": (dt, cache), "value_cache": (dt, cache),
                "slot_mapping": ("int64", (t,))}
    if op == "dynamic_per_token_scaled_fp8_quant":
        return {"x": (dt, (shape["num_tokens"], shape["hidden_size"]))}
    if op == "moe_sum":
        return {"x": (dt, (shape["num_tokens"], shape["topk"], shape["hidden_size"]))}
    if op == "moe_align_block_size":
        return {"topk_ids": ("int32", (shape["num_tokens"], shape["topk"]))}
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
    if op == "reshape_and_cache":
        return {}   # its results are the caches, written in place
    if op == "dynamic_per_token_scaled_fp8_quant":
        t = shape["num_tokens"]
        return {"scales": ("float32", (t, 1)), "out": (FP8, (t, shape["hidden_size"]))}   # the scales checked first
    if op == "moe_sum":
        return {"out": (dt, (shape["num_tokens"], shape["hidden_size"]))}
    if op == "moe_align_block_size":
        padded = moe_padded_size(shape)
        return {"sorted_token_ids": ("int32", (padded,)), "expert_ids": ("int32", (-(-padded // shape["block_size"]),)),
                "num_tokens_post_pad": ("int32", (1,))}
    return {"out": (dt, (shape["num_seqs"], shape["num_heads"], shape["head_dim"]))}


def scalars(shape: dict[str, Any]) -> dict[str, float]:
    """The call's non-tensor arguments."""
    if shape["op"] == "rms_norm_residual":
        return {"epsilon": shape["epsilon"]}
    if shape["op"] == "paged_attention_decode":
        return {"scale": 1.0 / math.sqrt(shape["head_dim"])}
    if shape["op"] == "moe_align_block_size":
        return {"num_experts": shape["num_experts"], "block_size": shape["block_size"]}
    return {}


def moe_padded_size(shape: dict[str, Any]) -> int:
    """The room ``moe_align_block_size`` has for its sorted ids: every pair, and each expert's group padded."""
    return shape["num_tokens"] * shape["topk"] + shape["num_experts"] * (shape["block_size"] - 1)


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
    elif op == "reshape_and_cache":
        inp = _cache_write_inputs(shape, g, device, randn)
    elif op == "dynamic_per_token_scaled_fp8_quant":
        inp = {"x": _rows_of_many_scales(shape, g, device)}
    elif op == "moe_sum":
        inp = {"x": randn("x")}
    elif op == "moe_align_block_size":
        inp = {"topk_ids": _routing(shape, g, device)}
    elif op == "rotary_embedding":
        t = shape["num_tokens"]
        inp = {"positions": torch.randint(0, MAX_POSITION, (t,), generator=g, dtype=torch.int64, device=device),
               "query": randn("query"), "key": randn("key"),
               "cos_sin_cache": cos_sin_cache(shape["head_dim"], shape["rope_theta"], dt)}
    else:   # paged_attention_decode
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


def _cache_write_inputs(shape: dict[str, Any], g: torch.Generator, device: str, randn: Any) -> dict[str, Any]:
    """``reshape_and_cache``'s inputs: distinct scattered slots, some tokens padding (-1), destinations NaN."""
    t = shape["num_tokens"]
    slots = shape["num_blocks"] * shape["block_size"]
    slot_mapping = torch.randperm(slots, generator=g, device=device)[:t]
    slot_mapping[torch.randperm(t, generator=g, device=device)[: shape["num_padding"]]] = -1
    inp = {"key": randn("key"), "value": randn("value"), "key_cache": randn("key_cache"),
           "value_cache": randn("value_cache"), "slot_mapping": slot_mapping}
    dst = slot_mapping[slot_mapping >= 0]
    for name in POISONED["reshape_and_cache"]:
        inp[name].view(slots, *inp[name].shape[2:])[dst] = math.nan
    return inp


def _rows_of_many_scales(shape: dict[str, Any], g: torch.Generator, device: str) -> torch.Tensor:
    """fp8 quantisation's input: rows whose magnitudes span 20x either way, and one row of zeros (the scale's floor)."""
    t, h = shape["num_tokens"], shape["hidden_size"]
    x = torch.randn(t, h, generator=g, dtype=torch.float32, device=device)
    x *= torch.exp(torch.rand(t, 1, generator=g, dtype=torch.float32, device=device) * 6.0 - 3.0)
    x[int(torch.randint(0, t, (1,), generator=g, device=device))] = 0.0
    return x.to(getattr(torch, shape["dtype"]))


def _routing(shape: dict[str, Any], g: torch.Generator, device: str) -> torch.Tensor:
    """``topk`` distinct experts per token, some experts far more popular than others (as a router picks them)."""
    popularity = torch.exp(2.0 * torch.randn(shape["num_experts"], generator=g, device=device))
    weights = popularity.expand(shape["num_tokens"], -1)
    return torch.multinomial(weights, shape["topk"], replacement=False, generator=g).to(torch.int32)


def poison(t: torch.Tensor) -> torch.Tensor:
    """Fill ``t`` with the value a kernel must overwrite: NaN, or `POISON_INT` for an integer tensor."""
    return t.fill_(math.nan if t.is_floating_point() else POISON_INT)


def poisoned(t: torch.Tensor) -> torch.Tensor:
    """Where ``t`` still holds the poison."""
    return torch.isnan(t) if t.is_floating_point() else t == POISON_INT


def poison_name(t: torch.Tensor) -> str:
    return "NaN poison" if t.is_floating_point() else f"poison value {POISON_INT}"


def make_outputs(shape: dict[str, Any], device: str = "cpu") -> dict[str, torch.Tensor]:
    """The destination tensors of ``shape``'s call, poisoned (NaN, or `POISON_INT`: what a kernel must overwrite)."""
    return {k: poison(torch.empty(size, dtype=getattr(torch, dt), device=device))
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
    query and key (the cos/sin rows a call needs depend on its positions and are not counted), for the
    cache write only the rows it copies and the slot mapping (not the rest of the caches). A lower
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
    if shape["op"] == "reshape_and_cache":   # each kept token's key and value read once and written once
        kept = shape["num_tokens"] - shape["num_padding"]
        row = _nbytes(shape["dtype"], (shape["num_kv_heads"], shape["head_dim"]))
        return 4 * kept * row + _nbytes(*ins["slot_mapping"])
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
