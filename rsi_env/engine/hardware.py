"""`HardwareSpec`: an accelerator as the cost model sees it (memory, bandwidth, FLOP/s, links, price)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from rsi_env.errors import CatalogError, HardwareSpecError

__all__ = ["HardwareSpec", "list_hardware", "load_hardware"]


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator. Bandwidths in bytes/s, compute in dense FLOP/s; ``fp8_flops == 0`` means no fp8 units."""

    name: str
    vendor: str
    memory_bytes: float
    mem_bw: float
    bf16_flops: float
    fp8_flops: float
    interconnect_bw: float
    interconnect_latency_s: float
    price_per_hour: float

    @classmethod
    def from_dict(cls, name: str, raw: Any) -> HardwareSpec:
        if not isinstance(raw, dict):
            raise HardwareSpecError(f"hardware {name!r}: expected a mapping of fields")
        fields = ("vendor", "memory_bytes", "mem_bw", "bf16_flops", "fp8_flops", "interconnect_bw",
                  "interconnect_latency_s", "price_per_hour")
        missing = [f for f in fields if f not in raw]
        if missing:
            raise HardwareSpecError(f"hardware {name!r} is missing {missing}")
        try:
            spec = cls(name=name, vendor=str(raw["vendor"]),
                       **{f: float(raw[f]) for f in fields if f != "vendor"})
        except (TypeError, ValueError) as exc:
            raise HardwareSpecError(f"hardware {name!r}: every field but vendor is a number ({exc})") from None
        if spec.memory_bytes <= 0 or spec.mem_bw <= 0 or spec.bf16_flops <= 0:
            raise HardwareSpecError(f"hardware {name!r}: memory, bandwidth and bf16 FLOP/s must be positive")
        return spec

    @property
    def supports_fp8_compute(self) -> bool:
        return self.fp8_flops > 0

    @property
    def features(self) -> dict[str, float]:
        """Numeric features used to compare chips (warm starts, calibration transfer)."""
        return {"memory_gb": self.memory_bytes / 1e9, "mem_bw_tbs": self.mem_bw / 1e12,
                "bf16_tflops": self.bf16_flops / 1e12, "ridge_flop_per_byte": self.bf16_flops / self.mem_bw}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@cache
def _catalog() -> dict[str, Any]:
    text = (resources.files("rsi_env") / "catalog" / "hardware.yaml").read_text()
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def list_hardware() -> list[str]:
    """Ids of the accelerators shipped in the catalog."""
    return sorted(_catalog())


def load_hardware(id_or_path: str | Path | HardwareSpec) -> HardwareSpec:
    """A catalog id (``h200``) or a YAML file holding one hardware mapping (with a ``name``)."""
    if isinstance(id_or_path, HardwareSpec):
        return id_or_path
    s = str(id_or_path)
    cat = _catalog()
    if s in cat:
        return HardwareSpec.from_dict(s, cat[s])
    p = Path(s)
    if p.suffix in (".yaml", ".yml") and p.is_file():
        raw = yaml.safe_load(p.read_text())
        if not isinstance(raw, dict):
            raise HardwareSpecError(f"{p}: expected a mapping")
        return HardwareSpec.from_dict(str(raw.pop("name", p.stem)), raw)
    raise CatalogError(f"unknown hardware {s!r}: use a YAML file or one of {sorted(cat)}")
