"""`Workload`: a frozen, seeded request trace, read from the workload YAML of docs/architecture.md.

A workload is data (counts, length distributions, an arrival process, shared prefixes) plus a
seed; :meth:`Workload.trace` turns it into concrete per-request arrays that both tiers consume,
so the simulator and the real engine see exactly the same requests. The content hash covers
every field, so a workload that was changed is detected (the reward guards rely on it).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from rsi_env.engine.safe_io import load_yaml_file, shorten
from rsi_env.errors import UnsafeFileError, WorkloadError, YamlError

__all__ = ["SLO", "Trace", "Workload", "LengthDist", "Arrival", "list_workloads", "load_workload"]

_DISTS = ("constant", "uniform", "lognormal", "normal")
_PROCESSES = ("burst", "poisson", "gamma", "closed")


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution: an int, or ``{dist: uniform|lognormal|normal, ...}``."""

    dist: str = "constant"
    value: int = 1
    min: int = 1
    max: int = 1 << 30
    mean: float = 0.0
    sigma: float = 0.0

    @classmethod
    def parse(cls, raw: Any, where: str) -> LengthDist:
        if isinstance(raw, bool):
            raise WorkloadError(f"{where}: expected an int or a {{dist: ...}} mapping, got {raw!r}")
        if isinstance(raw, int):
            if raw < 1:
                raise WorkloadError(f"{where}={raw}: token counts must be >= 1")
            return cls("constant", value=raw, min=raw, max=raw, mean=float(raw))
        if not isinstance(raw, dict) or "dist" not in raw:
            raise WorkloadError(f"{where}: expected an int or a mapping with 'dist' (one of {_DISTS}), got {raw!r}")
        dist = raw["dist"]
        try:
            if dist == "uniform":
                lo, hi = int(raw["min"]), int(raw["max"])
                if not 1 <= lo <= hi:
                    raise WorkloadError(f"{where}: uniform needs 1 <= min <= max, got min={lo} max={hi}")
                return cls("uniform", min=lo, max=hi, mean=(lo + hi) / 2)
            if dist in ("lognormal", "normal"):
                mean = float(raw["mean"])
                sigma = float(raw.get("sigma", raw.get("std", 0.5 if dist == "lognormal" else mean / 4)) or 0.0)
                lo, hi = int(raw.get("min", 1)), int(raw.get("max", 1 << 30))
                if mean < 1 or sigma < 0 or not 1 <= lo <= hi:
                    raise WorkloadError(f"{where}: {dist} needs mean >= 1, sigma >= 0, 1 <= min <= max")
                return cls(dist, min=lo, max=hi, mean=mean, sigma=sigma)
        except KeyError as exc:
            raise WorkloadError(f"{where}: {dist} distribution is missing field {exc.args[0]!r}") from None
        raise WorkloadError(f"{where}: unknown dist {dist!r}; allowed: uniform, lognormal, normal (or an int)")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.dist == "constant":
            return np.full(n, self.value, dtype=np.int64)
        if self.dist == "uniform":
            return rng.integers(self.min, self.max + 1, size=n, dtype=np.int64)
        if self.dist == "lognormal":
            mu = math.log(self.mean) - self.sigma**2 / 2
            x = rng.lognormal(mu, self.sigma, size=n)
        else:
            x = rng.normal(self.mean, self.sigma, size=n)
        return np.clip(np.rint(x), self.min, self.max).astype(np.int64)

    def to_raw(self) -> Any:
        if self.dist == "constant":
            return self.value
        if self.dist == "uniform":
            return {"dist": "uniform", "min": self.min, "max": self.max}
        return {"dist": self.dist, "mean": self.mean, "sigma": self.sigma, "min": self.min, "max": self.max}


@dataclass(frozen=True)
class Arrival:
    """When requests arrive: ``burst``, ``poisson`` (rate), ``gamma`` (rate, cv) or ``closed`` (concurrency)."""

    process: str = "burst"
    rate: float = 0.0
    cv: float = 1.0
    concurrency: int = 0

    @classmethod
    def parse(cls, raw: Any) -> Arrival:
        if raw is None:
            return cls()
        if isinstance(raw, str):
            raw = {"process": raw}
        if not isinstance(raw, dict) or raw.get("process") not in _PROCESSES:
            raise WorkloadError(f"arrival: expected {{process: one of {_PROCESSES}, ...}}, got {raw!r}")
        p = raw["process"]
        if p in ("poisson", "gamma"):
            rate = float(raw.get("rate", 0))
            cv = float(raw.get("cv", 1.0))
            if rate <= 0 or cv <= 0:
                raise WorkloadError(f"arrival: {p} needs rate > 0 (requests/s) and cv > 0, got {raw!r}")
            return cls(p, rate=rate, cv=cv if p == "gamma" else 1.0)
        if p == "closed":
            c = int(raw.get("concurrency", 0))
            if c < 1:
                raise WorkloadError(f"arrival: closed needs concurrency >= 1, got {raw!r}")
            return cls(p, concurrency=c)
        return cls("burst")

    def to_raw(self) -> dict[str, Any]:
        if self.process == "poisson":
            return {"process": "poisson", "rate": self.rate}
        if self.process == "gamma":
            return {"process": "gamma", "rate": self.rate, "cv": self.cv}
        if self.process == "closed":
            return {"process": "closed", "concurrency": self.concurrency}
        return {"process": "burst"}


@dataclass(frozen=True)
class SLO:
    """Per-request latency objectives; a request meets the SLO when every bound set holds."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    @classmethod
    def parse(cls, raw: Any) -> SLO:
        if raw is None:
            return cls()
        if not isinstance(raw, dict):
            raise WorkloadError(f"slo: expected a mapping like {{ttft_ms: 500, tpot_ms: 50}}, got {raw!r}")
        unknown = set(raw) - {"ttft_ms", "tpot_ms", "e2e_ms"}
        if unknown:
            raise WorkloadError(f"slo: unknown fields {sorted(unknown)}; allowed: ttft_ms, tpot_ms, e2e_ms")
        def ms(k: str) -> float | None:
            return float(raw[k]) / 1000.0 if raw.get(k) is not None else None
        return cls(ms("ttft_ms"), ms("tpot_ms"), ms("e2e_ms"))

    def to_raw(self) -> dict[str, float] | None:
        out = {k: v * 1000.0 for k, v in (("ttft_ms", self.ttft_s), ("tpot_ms", self.tpot_s),
                                          ("e2e_ms", self.e2e_s)) if v is not None}
        return out or None


@dataclass(frozen=True)
class Trace:
    """The concrete requests of a workload: one entry per request, in arrival order.

    ``arrival_s`` is NaN for a closed-loop workload (a request is sent when a slot frees);
    ``prompt_len`` counts the shared prefix too; ``prefix_group`` is -1 without a shared prefix.
    """

    arrival_s: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray
    prefix_group: np.ndarray
    prefix_len: np.ndarray
    closed_concurrency: int
    seed: int

    def __len__(self) -> int:
        return int(self.prompt_len.shape[0])

    def prompt_token_ids(self, i: int, vocab_size: int) -> list[int]:
        """The exact prompt of request ``i`` as token ids below ``vocab_size`` (deterministic)."""
        lo = 10 if vocab_size > 100 else 0  # keep clear of special tokens in real vocabularies
        span = vocab_size - lo
        g, plen = int(self.prefix_group[i]), int(self.prefix_len[i])
        own = int(self.prompt_len[i]) - plen
        parts = []
        if g >= 0 and plen:
            parts.append(np.random.default_rng([self.seed, 1, g]).integers(0, span, plen))
        parts.append(np.random.default_rng([self.seed, 2, i]).integers(0, span, own))
        return (np.concatenate(parts) + lo).astype(np.int64).tolist()


@dataclass(frozen=True)
class Workload:
    """A frozen request trace described as data (docs/architecture.md, "Workload file")."""

    name: str
    seed: int
    requests: int
    prompt_tokens: LengthDist
    output_tokens: LengthDist
    arrival: Arrival = field(default_factory=Arrival)
    shared_prefix_groups: int = 0
    shared_prefix_tokens: int = 0
    slo: SLO = field(default_factory=SLO)

    @classmethod
    def from_dict(cls, raw: Any) -> Workload:
        if not isinstance(raw, dict):
            raise WorkloadError(f"a workload is a mapping (see docs/architecture.md), got {type(raw).__name__}")
        allowed = {"name", "seed", "requests", "prompt_tokens", "output_tokens", "arrival", "shared_prefix", "slo"}
        unknown = set(raw) - allowed
        if unknown:
            raise WorkloadError(f"unknown workload fields {sorted(unknown)}; allowed: {sorted(allowed)}")
        for k in ("name", "requests", "prompt_tokens", "output_tokens"):
            if k not in raw:
                raise WorkloadError(f"workload is missing required field {k!r}")
        n = raw["requests"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise WorkloadError(f"requests={n!r}: expected an int >= 1")
        seed = raw.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise WorkloadError(f"seed={seed!r}: expected an int >= 0")
        groups, ptoks = 0, 0
        sp = raw.get("shared_prefix")
        if sp is not None:
            if not isinstance(sp, dict) or not {"groups", "tokens"} <= set(sp):
                raise WorkloadError(f"shared_prefix: expected {{groups: N, tokens: T}}, got {sp!r}")
            groups, ptoks = int(sp["groups"]), int(sp["tokens"])
            if groups < 1 or ptoks < 1:
                raise WorkloadError(f"shared_prefix: groups and tokens must be >= 1, got {sp!r}")
        return cls(
            name=str(raw["name"]),
            seed=seed,
            requests=n,
            prompt_tokens=LengthDist.parse(raw["prompt_tokens"], "prompt_tokens"),
            output_tokens=LengthDist.parse(raw["output_tokens"], "output_tokens"),
            arrival=Arrival.parse(raw.get("arrival")),
            shared_prefix_groups=groups,
            shared_prefix_tokens=ptoks,
            slo=SLO.parse(raw.get("slo")),
        )

    @classmethod
    def from_yaml(cls, path: str | Path, *, root: Path | None = None) -> Workload:
        """A workload file: the caller's own (``root=None``) or the agent's ``path`` under ``root``, no link followed.

        Either way only a regular file within `MAX_YAML_BYTES` is read, without blocking, and YAML
        anchors and aliases are refused (`rsi_env.engine.safe_io`).
        """
        try:
            raw = load_yaml_file(path, root=root)
        except UnsafeFileError as exc:
            raise WorkloadError(f"workload file {shorten(str(path))} cannot be read: {exc}") from None
        except YamlError as exc:
            raise WorkloadError(f"workload file {shorten(str(path))} is not valid YAML: {exc}") from None
        return cls.from_dict(raw)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "seed": self.seed,
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens.to_raw(),
            "output_tokens": self.output_tokens.to_raw(),
            "arrival": self.arrival.to_raw(),
        }
        if self.shared_prefix_groups:
            out["shared_prefix"] = {"groups": self.shared_prefix_groups, "tokens": self.shared_prefix_tokens}
        slo = self.slo.to_raw()
        if slo:
            out["slo"] = slo
        return out

    @property
    def content_hash(self) -> str:
        """sha256 of the canonical form: equal for equal workloads, different for any change."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def trace(self) -> Trace:
        """The concrete requests, drawn from the seed (identical on every call and machine)."""
        rng = np.random.default_rng([self.seed, 0])
        n = self.requests
        own = self.prompt_tokens.sample(rng, n)
        out = self.output_tokens.sample(rng, n)
        a = self.arrival
        if a.process == "burst":
            arrival = np.zeros(n)
        elif a.process == "closed":
            arrival = np.full(n, np.nan)
        else:
            if a.process == "poisson":
                gaps = rng.exponential(1.0 / a.rate, size=n)
            else:
                k = 1.0 / (a.cv**2)
                gaps = rng.gamma(k, 1.0 / (a.rate * k), size=n)
            gaps[0] = 0.0
            arrival = np.cumsum(gaps)
        if self.shared_prefix_groups:
            group = np.arange(n, dtype=np.int64) % self.shared_prefix_groups
            plen = np.full(n, self.shared_prefix_tokens, dtype=np.int64)
        else:
            group = np.full(n, -1, dtype=np.int64)
            plen = np.zeros(n, dtype=np.int64)
        return Trace(arrival, own + plen, out, group, plen, a.concurrency, self.seed)


def list_workloads() -> list[str]:
    """Names of the frozen workloads shipped in the catalog."""
    from importlib import resources

    folder = resources.files("rsi_env") / "catalog" / "workloads"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


_FROZEN: dict[str, Workload] = {}


def load_workload(name_or_path: str | Path | Workload) -> Workload:
    """A frozen workload by name (``short_long``) or any workload YAML file."""
    from importlib import resources

    if isinstance(name_or_path, Workload):
        return name_or_path
    if isinstance(name_or_path, str) and name_or_path in _FROZEN:
        return _FROZEN[name_or_path]
    entry = resources.files("rsi_env") / "catalog" / "workloads" / f"{name_or_path}.yaml"
    if entry.is_file():
        # A frozen workload is read once per process (a `Workload` is immutable): a simulation asks for it by name.
        wl = _FROZEN[str(name_or_path)] = Workload.from_dict(yaml.safe_load(entry.read_text()))
        return wl
    p = Path(name_or_path)
    if p.is_file():
        return Workload.from_yaml(p)
    raise WorkloadError(f"no workload file {str(p)!r} and no frozen workload of that name; frozen: {list_workloads()}")
