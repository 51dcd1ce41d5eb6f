"""Chapter 06's measurements: why verifying k tokens costs about one step, and what vLLM's counters say.

Decoding one token at batch size 1 reads every weight of the model once and does two floating-point
operations per weight. A CPU or GPU moves far fewer bytes per second than it does operations, so the
step is bound by memory bandwidth: ``tokens/s <= bandwidth / bytes read per token`` (the roofline).
A forward over n tokens reads the same weights once and does n times the arithmetic, so it costs
about one step until ``n x 2 x params / peak FLOP/s`` catches up with ``bytes / bandwidth``; that is
what makes verifying k + 1 tokens in one pass about as cheap as decoding one.

Measured here, with NumPy in the notebook's kernel (one thread):

* :func:`memory_bandwidth`: best of several passes that read (sum) and copy a large array. A lower
  bound of what the hardware can do (a tuned multi-threaded kernel reaches more), and it measures
  the host's memory: on a GPU profile the model's weights live in GPU memory instead, whose
  bandwidth this does not see.
* :func:`matmul_flops`: best of several float32 matrix products (NumPy's BLAS, all its threads).

vLLM's speculative-decoding counters (``vllm/v1/spec_decode/metrics.py``), scraped before and after
a run, become :class:`SpecDecodeCounts`: the engine's own acceptance rate and mean acceptance length,
per-position acceptance, and the theory's alpha fitted to them (:mod:`servelab.sim.speculative`).
"""

from __future__ import annotations

import json
import struct
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servelab.engines.metrics import Metrics, delta
from servelab.integers import int_at_least
from servelab.machine.model_shapes import dtype_bytes, kv_bytes_per_token, served_model_shape
from servelab.sim.speculative.acceptance import IidFit, conditional_rates, iid_fit, survival

MIB = 2**20

# ----------------------------------------------------------------------------- bandwidth and compute


@dataclass(frozen=True)
class Bandwidth:
    read_gb_s: float  # bytes summed per second / 1e9
    copy_gb_s: float  # (bytes read + bytes written) per second / 1e9, STREAM's "copy" convention
    n_bytes: int
    repeats: int


def _best_seconds(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def memory_bandwidth(n_bytes: int = 512 * MIB, repeats: int = 5) -> Bandwidth:
    """Host memory bandwidth from summing and copying ``n_bytes`` of float64 (use far more than the
    last-level cache, or this measures the cache). A lower bound: one thread, NumPy's loops."""
    n_bytes = int_at_least("n_bytes", n_bytes, 8)
    repeats = int_at_least("repeats", repeats, 1)
    a = np.ones(n_bytes // 8)
    b = np.empty_like(a)
    read = _best_seconds(a.sum, repeats)
    copy = _best_seconds(lambda: np.copyto(b, a), repeats)
    return Bandwidth(a.nbytes / read / 1e9, 2 * a.nbytes / copy / 1e9, a.nbytes, repeats)


def matmul_flops(n: int = 1024, repeats: int = 3) -> float:
    """FLOP/s of an n x n float32 matrix product (2 n**3 operations): a practical compute roof."""
    n = int_at_least("n", n, 1)
    rng = np.random.default_rng(0)
    x, y = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    return 2 * n**3 / _best_seconds(lambda: x @ y, int_at_least("repeats", repeats, 1))


# ----------------------------------------------------------------------------- the decode roofline


def safetensors_parameters(folder: str | Path) -> int:
    """Number of weights in a model folder, read from its .safetensors headers (no tensor is loaded).

    A safetensors file starts with an 8-byte little-endian header length and a JSON header giving
    every tensor's dtype and shape.
    """
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no .safetensors file in {folder}")
    total = 0
    for path in files:
        with path.open("rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        total += sum(int(np.prod(t["shape"], dtype=np.int64)) for name, t in header.items() if name != "__metadata__")
    return total


def llama_parameters(config: dict) -> int:
    """Weights of a Llama-style decoder from its config.json: embeddings, per layer attention (q, k,
    v, o), gated MLP (gate, up, down) and two RMS norms, the final norm, and an untied LM head."""
    h, layers, vocab = config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]
    heads = config["num_attention_heads"]
    kv, head_dim = config.get("num_key_value_heads", heads), config.get("head_dim") or h // heads
    attention = h * heads * head_dim * 2 + h * kv * head_dim * 2
    per_layer = attention + 3 * h * config["intermediate_size"] + 2 * h
    head = 0 if config.get("tie_word_embeddings", False) else vocab * h
    return vocab * h + layers * per_layer + h + head


def model_parameters(source: str) -> int:
    """Weights of the model an engine serves: exact from a local folder's safetensors headers, else
    ``params_b`` from servelab/data/model_shapes.toml."""
    folder = Path(source)
    if folder.is_dir() and any(folder.glob("*.safetensors")):
        return safetensors_parameters(folder)
    shape = served_model_shape(source)
    if not shape.params_b:
        raise ValueError(f"no parameter count known for {source!r}; add params_b to servelab/data/model_shapes.toml")
    return int(shape.params_b * 1e9)


@dataclass(frozen=True)
class Roofline:
    """Batch-1 decoding bound by memory traffic: every weight once per token, plus the KV read so far."""

    weight_bytes: int  # parameters x bytes per parameter in the served dtype
    kv_bytes_per_context_token: int  # K and V of one earlier token, all layers
    bandwidth_gb_s: float

    def bytes_per_token(self, context_len: int = 0) -> int:
        return self.weight_bytes + context_len * self.kv_bytes_per_context_token

    def tokens_per_s(self, context_len: int = 0) -> float:
        """The bound: bandwidth / bytes per token."""
        return self.bandwidth_gb_s * 1e9 / self.bytes_per_token(context_len)


def decode_roofline(source: str, dtype: str, bandwidth_gb_s: float) -> Roofline:
    """The batch-1 roofline of the model at ``source`` (folder or hub id) served in ``dtype``.

    Counts every weight as read once per token. Exact for tied embeddings (SmolLM2: the LM head
    reads the whole table); with untied ones only one row of the input table is read, so this
    over-counts by about that table.
    """
    if not bandwidth_gb_s > 0:
        raise ValueError(f"bandwidth_gb_s must be > 0, got {bandwidth_gb_s!r}")
    size = dtype_bytes(dtype)
    return Roofline(model_parameters(source) * size, kv_bytes_per_token(served_model_shape(source), dtype),
                    bandwidth_gb_s)


def forward_seconds_bound(n_tokens: int, parameters: int, dtype: str, bandwidth_gb_s: float,
                          flops_per_s: float) -> float:
    """Roofline time of one forward over ``n_tokens`` positions: the larger of reading the weights
    once and doing ``2 x parameters`` operations per token (attention over the context ignored)."""
    n = int_at_least("n_tokens", n_tokens, 1)
    return max(parameters * dtype_bytes(dtype) / (bandwidth_gb_s * 1e9), 2 * parameters * n / flops_per_s)


# ----------------------------------------------------------------------------- vLLM's counters

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


@dataclass(frozen=True)
class SpecDecodeCounts:
    """What vLLM counted between two scrapes. A draft is one verification of one request's draft."""

    drafts: float
    draft_tokens: float
    accepted: float
    accepted_per_pos: list[float]  # drafts whose token at position i (and so all before it) was accepted

    @property
    def k(self) -> int:
        return len(self.accepted_per_pos)

    @property
    def acceptance_rate(self) -> float:
        """vLLM's "draft acceptance rate": accepted / drafted tokens (not the papers' alpha)."""
        return self.accepted / self.draft_tokens if self.draft_tokens else float("nan")

    @property
    def mean_acceptance_length(self) -> float:
        """Tokens per verification, bonus included: ``1 + accepted / drafts`` (vLLM's convention)."""
        return 1 + self.accepted / self.drafts if self.drafts else float("nan")

    @property
    def full_drafts(self) -> bool:
        """Every draft had k tokens (the n-gram proposer can propose fewer); the i.i.d. fit assumes it."""
        return self.draft_tokens == self.k * self.drafts

    def survival(self):
        return survival(self.accepted_per_pos, self.drafts)

    def conditional_rates(self):
        return conditional_rates(self.accepted_per_pos, self.drafts)

    def iid_fit(self) -> IidFit:
        return iid_fit(self.accepted_per_pos, self.drafts)


def _positions(metrics: Metrics) -> list[int]:
    samples = metrics.samples.get(f"{ACCEPTED_PER_POS}_total") or metrics.samples.get(ACCEPTED_PER_POS) or []
    return sorted({int(s.labels["position"]) for s in samples})


def spec_decode_counts(before: Metrics, after: Metrics) -> SpecDecodeCounts:
    """The spec-decode counters' growth between two scrapes of one vLLM server."""
    positions = _positions(after)
    if not positions:
        raise ValueError(f"no {ACCEPTED_PER_POS} counter on this server; was it started with --speculative-config? "
                         f"it exposes {', '.join(after.names('vllm:spec')) or 'no vllm:spec* series'}")
    if positions != list(range(len(positions))):
        raise ValueError(f"positions of {ACCEPTED_PER_POS} should be 0..k-1, got {positions}")
    per_pos = [delta(before, after, ACCEPTED_PER_POS, position=str(i)) for i in positions]
    drafts = delta(before, after, DRAFTS)
    if drafts <= 0:
        raise ValueError("no draft was verified between the two scrapes; did the run generate anything?")
    return SpecDecodeCounts(drafts, delta(before, after, DRAFT_TOKENS), delta(before, after, ACCEPTED), per_pos)
