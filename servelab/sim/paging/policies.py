"""KV reservation policies: max_len, exact, paged:<block_size>."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Policy:
    """A KV reservation policy: ``kind`` is ``"max_len"``, ``"exact"`` or ``"paged"``."""

    kind: str
    block_size: int | None = None

    @property
    def label(self) -> str:
        return f"paged:{self.block_size}" if self.kind == "paged" else self.kind

    @property
    def paper_analogue(self) -> str:
        return {"max_len": "Orca (Max)", "exact": "Orca (Oracle)"}.get(self.kind, "vLLM")


_POLICY_HELP = "'max_len', 'exact', or 'paged:<block_size>' with a positive integer block size, e.g. paged:16"


def parse_policy(spec: str | Policy) -> Policy:
    """``"max_len"``, ``"exact"`` or ``"paged:16"`` (or a :class:`Policy`) as a :class:`Policy`."""
    if isinstance(spec, Policy):
        if spec.kind in ("max_len", "exact") and spec.block_size is None:
            return spec
        if spec.kind == "paged":
            return Policy("paged", _block_size(spec.block_size))
        raise ValueError(f"unknown policy {spec!r}; accepted: {_POLICY_HELP}")
    if spec in ("max_len", "exact"):
        return Policy(spec)
    if isinstance(spec, str) and spec.startswith("paged:"):
        raw = spec.removeprefix("paged:")
        try:
            size = int(raw)
        except ValueError:
            raise ValueError(f"bad block size {raw!r} in policy {spec!r}; accepted: {_POLICY_HELP}") from None
        return Policy("paged", _block_size(size))
    raise ValueError(f"unknown policy {spec!r}; accepted: {_POLICY_HELP}")


def _block_size(size: object) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"block_size must be a positive integer (tokens per KV block), got {size!r}")
    return size

