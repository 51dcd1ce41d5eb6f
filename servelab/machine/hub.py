"""Hub models for the GPU profiles: the token, the gated models, and their files downloaded ahead of a run.

Meta's Llama repositories are gated: the Hugging Face hub serves their files only to a user who has
accepted the licence on the model page, known by a token (``HF_TOKEN``). Their metadata stays public,
so ``/api/models/ID`` answers 200 without one; only a file answers 401 (no token) or 403 (a token
without access). :func:`access_problem` therefore asks for a file, config.json.

:func:`predownload` fetches what the engines read (safetensors weights, config, tokenizer; no ``.bin``
or ``.pth`` duplicates, nothing under ``original/``; ``.bin`` weights only where a repository has no
safetensors) into the cache the engines read (:func:`servelab.machine.models.hub_cache`), in
huggingface_hub's layout: ``blobs/<etag>``, ``snapshots/<commit>/<file>`` linking to its blob,
``refs/main``. The kernel venv has no huggingface_hub, so this speaks the hub's HTTP API with urllib.
Like huggingface_hub, it writes each file to ``blobs/<etag>.incomplete`` and renames it to its blob only
once its size and hash (sha256 for LFS files, the git blob id for the rest) match what the hub lists;
the snapshot's links and ``refs/main`` are written only after every blob of the model is complete. So a
broken-off download never looks complete, and the next run (or huggingface_hub) resumes it.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from servelab.machine import model_shapes, models

DEFAULT_ENDPOINT = "https://huggingface.co"
CONFIG_AND_TOKENIZER = ("config.json", "generation_config.json", "tokenizer*", "special_tokens_map.json",
                        "added_tokens.json", "vocab.json", "merges.txt", "chat_template*")
WEIGHTS = ("*.safetensors", "*.safetensors.index.json")
BIN_WEIGHTS = ("pytorch_model*.bin", "pytorch_model*.bin.index.json")  # only where there are no safetensors
CHUNK = 1 << 20


class Broken(RuntimeError):
    """A file arrived but does not match what the hub lists; the message is the problem's line."""


def endpoint() -> str:
    """The hub's address: HF_ENDPOINT (as huggingface_hub reads it), else huggingface.co."""
    return os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")


def token() -> str | None:
    """The hub token, looked up as huggingface_hub does: HF_TOKEN, then HUGGING_FACE_HUB_TOKEN, then the file
    ``huggingface-cli login`` stores (HF_TOKEN_PATH, else HF_HOME/token, else ~/.cache/huggingface/token)."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        if value := os.environ.get(name, "").strip():
            return value
    home = Path(os.environ.get("HF_HOME", "~/.cache/huggingface")).expanduser()
    stored = Path(os.environ.get("HF_TOKEN_PATH") or home / "token").expanduser()
    with_value = stored.is_file() and stored.read_text().strip()
    return with_value or None


def needs_token(model_ids: Iterable[str]) -> list[str]:
    """The gated ones among ``model_ids`` (servelab/data/model_shapes.toml), in order."""
    return model_shapes.gated(model_ids)


def _page(model_id: str) -> str:
    return f"{endpoint()}/{model_id}"


def skip_reason(model_ids: Iterable[str]) -> str | None:
    """One line saying why runs that need these models cannot start (a gated model and no token), else None."""
    gated = needs_token(model_ids)
    if not gated or token() is not None:
        return None
    which = "its licence on the model page" if len(gated) == 1 else "each one's licence on its model page"
    return (f"needs {' and '.join(gated)}, gated on the Hugging Face hub: accept {which} "
            f"({', '.join(_page(m) for m in gated)}) and set HF_TOKEN")


class _KeepTokenOnHost(urllib.request.HTTPRedirectHandler):
    """Redirects as urllib follows them, without the token once they leave the hub's host (its CDN's signed
    URLs refuse a second credential, and the token is not theirs)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


_OPENER = urllib.request.build_opener(_KeepTokenOnHost)


def _open(url: str, *, method: str = "GET", headers: dict[str, str] | None = None,
          timeout: float = 30.0) -> http.client.HTTPResponse:
    """The one request this module makes: with the token when there is one; HTTPError for 4xx/5xx."""
    sent = {"User-Agent": "servelab", **(headers or {})}
    if (secret := token()) is not None:
        sent["Authorization"] = f"Bearer {secret}"
    return _OPENER.open(urllib.request.Request(url, headers=sent, method=method), timeout=timeout)


def _problem(model_id: str, err: BaseException, file: str = "") -> str:
    """One line for a failed request: the status and what to do, or the host that could not be reached."""
    host = urllib.parse.urlsplit(endpoint()).netloc
    if isinstance(err, urllib.error.HTTPError):
        code = (err.headers.get("X-Error-Code") if err.headers else None) or ""
        if code == "EntryNotFound" and file:
            return f"{model_id}: the repository has no {file} (the hub at {host} answered {err.code})"
        if err.code == 404 or code in ("RepoNotFound", "RevisionNotFound"):
            return (f"{model_id}: no such repository on the Hugging Face hub at {host} (it answered {err.code}); "
                    "check the id (a private one also needs HF_TOKEN)")
        if err.code in (401, 403):
            sent = "without a token" if token() is None else "with the token set, which has no access to it"
            return (f"{model_id}: the hub at {host} answered {err.code} {sent} (gated or private): accept its "
                    f"licence on {_page(model_id)} and set HF_TOKEN")
        return f"{model_id}: the hub at {host} answered {err.code} for {err.url}; try again later"
    if isinstance(err, urllib.error.URLError):
        return (f"{model_id!r} is not downloaded and the Hugging Face hub at {host} is unreachable ({err.reason}); "
                "connect this machine to it, or use profile 'cpu'")
    return f"{model_id}: the download from {host} broke off ({type(err).__name__}: {err}); run it again to resume"


_NETWORK = (urllib.error.URLError, OSError, http.client.HTTPException)


def access_problem(model_id: str, timeout: float = 10.0) -> str | None:
    """Why this machine cannot read ``model_id`` from the hub now (one line), or None when it can."""
    if (reason := skip_reason([model_id])) is not None:
        return reason
    try:
        _open(f"{endpoint()}/{model_id}/resolve/main/config.json", method="HEAD", timeout=timeout).close()
    except _NETWORK as err:
        return _problem(model_id, err, "config.json")
    return None


def _wanted(siblings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The files the engines read: top-level config, tokenizer and weights (safetensors, else .bin)."""
    top = [s for s in siblings if "/" not in s["rfilename"]]

    def matching(patterns: tuple[str, ...]) -> list[dict[str, Any]]:
        return [s for s in top if any(fnmatch(s["rfilename"], p) for p in patterns)]

    weights = matching(WEIGHTS) or matching(BIN_WEIGHTS)
    return matching(CONFIG_AND_TOKENIZER) + weights if weights else []


def _blob_of(file: dict[str, Any]) -> tuple[str, int]:
    """(etag, size) as the hub lists them: an LFS file's sha256, else its git blob id."""
    lfs = file.get("lfs") or {}
    return (lfs["sha256"], int(lfs["size"])) if lfs else (file["blobId"], int(file["size"]))


def _hasher(etag: str, size: int) -> Any:
    """What must end at ``etag``: sha256 (64 hex digits, an LFS file) or the git blob id (sha1 of a header and
    the content)."""
    if len(etag) == 64:
        return hashlib.sha256()
    hasher = hashlib.sha1(usedforsecurity=False)
    hasher.update(f"blob {size}\0".encode())
    return hasher


def _fetch(url: str, blob: Path, size: int, bar: tqdm, name: str) -> None:
    """``blob``, downloaded through ``blob.incomplete`` (resumed where one is there) and checked."""
    etag, part = blob.name, blob.with_name(blob.name + ".incomplete")
    have = part.stat().st_size if part.is_file() else 0
    if have > size:
        part.unlink()
        have = 0
    if have < size:
        with _open(url, headers={"Range": f"bytes={have}-"} if have else {}, timeout=60.0) as response:
            have = have if response.status == 206 else 0  # a whole file instead of the rest: start over
            bar.update(have)
            with part.open("ab" if have else "wb") as f:
                for chunk in iter(lambda: response.read(CHUNK), b""):
                    f.write(chunk)
                    bar.update(len(chunk))
    got = part.stat().st_size
    if got < size:  # the connection ended early: keep what came, the next run resumes there
        raise Broken(f"{name}: the download broke off after {got} of {size} bytes; run again to resume")
    hasher = _hasher(etag, size)
    with part.open("rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            hasher.update(chunk)
    if got != size or hasher.hexdigest() != etag:
        part.unlink()
        raise Broken(f"{name} arrived with {got} bytes and hash {hasher.hexdigest()[:12]}, not the {size} bytes "
                     f"and {etag[:12]} the hub lists; removed it, run again")
    part.replace(blob)


def _link(pointer: Path, blob: Path) -> None:
    pointer.parent.mkdir(parents=True, exist_ok=True)
    if pointer.is_symlink() or pointer.exists():
        pointer.unlink()
    try:
        pointer.symlink_to(os.path.relpath(blob, pointer.parent))
    except OSError:  # no symlinks on this file system: a copy, as huggingface_hub makes
        shutil.copy2(blob, pointer)


def _download(model_id: str, repo: Path, progress: bool) -> str | None:
    with _open(f"{endpoint()}/api/models/{model_id}/revision/main?blobs=true", timeout=30.0) as response:
        info = json.load(response)
    files = _wanted(info.get("siblings") or [])
    if not files:
        return f"{model_id}: the hub lists no safetensors (or .bin) weights at the top of the repository"
    blobs = {f["rfilename"]: (repo / "blobs" / _blob_of(f)[0], f) for f in files}
    todo = [(path, f) for path, f in blobs.values() if not path.is_file()]
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    total = sum(_blob_of(f)[1] for _, f in todo)
    with tqdm(total=total, unit="B", unit_scale=True, desc=model_id, disable=not progress) as bar:
        for path, f in todo:
            url = f"{endpoint()}/{model_id}/resolve/{info['sha']}/{urllib.parse.quote(f['rfilename'])}"
            _fetch(url, path, _blob_of(f)[1], bar, f"{model_id}/{f['rfilename']}")
    for name, (path, _) in blobs.items():  # every blob is complete: now the snapshot may point at them
        _link(repo / "snapshots" / info["sha"] / name, path)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(info["sha"])
    (repo / COMPLETE).write_text(info["sha"])  # every wanted file of this revision is here and checked
    return None


COMPLETE = ".servelab-complete"


def cached(repo: Path) -> bool:
    """Whether a model's cache folder holds a revision this module downloaded completely (its marker names the
    revision refs/main points at)."""
    ref, done = repo / "refs" / "main", repo / COMPLETE
    return ref.is_file() and done.is_file() and ref.read_text().strip() == done.read_text().strip() and (
        repo / "snapshots" / ref.read_text().strip()).is_dir()


def predownload(model_ids: Iterable[str], cache: str | Path | None = None, *, progress: bool = True) -> list[str]:
    """Download every model's config, tokenizer and weights into the hub cache (default: the engines',
    models.hub_cache()), with a progress bar per model; one line per problem (none: all there)."""
    cache = Path(cache) if cache is not None else models.hub_cache()
    problems = []
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    for model_id in dict.fromkeys(model_ids):
        repo = cache / f"models--{model_id.replace('/', '--')}"
        if cached(repo) or (offline and (repo / "snapshots").is_dir()):
            continue  # a rerun, or a cache filled elsewhere: no hub call
        if offline:
            problems.append(f"{model_id}: HF_HUB_OFFLINE is set and it is not in the Hugging Face cache at {cache}")
            continue
        if (reason := skip_reason([model_id])) is not None:
            problems.append(reason)
            continue
        try:
            problem = _download(model_id, repo, progress)
        except Broken as err:
            problem = str(err)
        except _NETWORK as err:
            problem = _problem(model_id, err)
        if problem:
            problems.append(problem)
    return problems
