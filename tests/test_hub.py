"""servelab.machine.hub against a stand-in hub: a local HTTP server on 127.0.0.1 that HF_ENDPOINT points at.

Everything above the socket is the module's own: its requests, redirects, error lines, the cache layout
and the .incomplete files. The stand-in answers as the hub does: /api/models/ID/revision/main lists the
files with their blob ids and LFS hashes, /ID/resolve/REV/FILE serves a file (an LFS one by a redirect
to another host, which refuses a request that still carries the token, as the CDN's signed URLs do), a
gated repository answers 401 without a token and 403 with one that has no access, and a missing one 404.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from servelab.machine import hub, models

COMMIT = "0123456789abcdef0123456789abcdef01234567"
GOOD_TOKEN = "hf_good"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def _git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


class Repo:
    def __init__(self, files: dict[str, bytes], lfs: tuple[str, ...] = (), gated: bool = False) -> None:
        self.files, self.lfs, self.gated = files, lfs, gated
        self.cut_next = 0  # serve this many truncated transfers of LFS files before whole ones
        self.corrupt = False

    def siblings(self) -> list[dict]:
        out = []
        for name, data in self.files.items():
            entry = {"rfilename": name, "blobId": _git_blob_id(data), "size": len(data)}
            if name in self.lfs:
                entry["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            out.append(entry)
        return out


WEIGHTS = bytes(range(256)) * 40  # 10240 bytes
PUBLIC = {"config.json": b'{"vocab_size": 7}', "tokenizer.json": b'{"model": {}}', "model.safetensors": WEIGHTS,
          "pytorch_model.bin": b"duplicate", "original/consolidated.00.pth": b"duplicate", "README.md": b"# card"}


class StandInHub(BaseHTTPRequestHandler):
    repos: dict[str, Repo] = {}
    seen_auth_on_cdn: list[str] = []
    ranges: list[str] = []

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        for k, v in {"Content-Length": str(len(body)), **(headers or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _allowed(self, repo: Repo) -> bool:
        if not repo.gated:
            return True
        auth = self.headers.get("Authorization")
        if auth is None:
            self._send(401, b"gated", {"X-Error-Code": "GatedRepo"})
        elif auth != f"Bearer {GOOD_TOKEN}":
            self._send(403, b"gated", {"X-Error-Code": "GatedRepo"})
        return auth == f"Bearer {GOOD_TOKEN}"

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path.startswith("/cdn/"):
            return self._cdn(path.removeprefix("/cdn/"))
        parts = path.strip("/").split("/")
        api = parts[:2] == ["api", "models"]
        repo_id = "/".join(parts[2:4] if api else parts[:2])
        repo = self.repos.get(repo_id)
        if repo is None:
            return self._send(404, b"Repository not found", {"X-Error-Code": "RepoNotFound"})
        if api:
            return self._send(200, json.dumps({"id": repo_id, "sha": COMMIT, "siblings": repo.siblings()}).encode())
        if not self._allowed(repo):
            return None
        name = "/".join(parts[4:])
        if name not in repo.files:
            return self._send(404, b"Entry not found", {"X-Error-Code": "EntryNotFound"})
        if name in repo.lfs:
            host = f"localhost:{self.server.server_address[1]}"  # another host, as the hub's CDN is
            return self._send(302, b"", {"Location": f"http://{host}/cdn/{repo_id}/{name}"})
        return self._send(200, repo.files[name])

    def _cdn(self, rest: str) -> None:
        if self.headers.get("Authorization"):
            self.seen_auth_on_cdn.append(rest)
            return self._send(400, b"Only one auth mechanism allowed")
        repo_id, name = "/".join(rest.split("/")[:2]), "/".join(rest.split("/")[2:])
        repo = self.repos[repo_id]
        data = repo.files[name]
        if repo.corrupt:
            data = bytes(b ^ 1 for b in data)
        self.ranges.append(self.headers.get("Range", ""))
        start = int(self.headers["Range"].removeprefix("bytes=").rstrip("-")) if self.headers.get("Range") else 0
        body = data[start:]
        code = 206 if start else 200
        if repo.cut_next:  # say the whole length, send half, hang up
            repo.cut_next -= 1
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return None
        return self._send(code, body)


@pytest.fixture
def stand_in(monkeypatch, tmp_path):
    """A stand-in hub with a public and a gated repository; HF_* pointed at it and at empty folders."""
    StandInHub.repos = {"org/public": Repo(dict(PUBLIC), lfs=("model.safetensors", "pytorch_model.bin")),
                        LLAMA: Repo({"config.json": b"{}", "model.safetensors": WEIGHTS}, lfs=("model.safetensors",),
                                    gated=True),
                        "org/private": Repo({"config.json": b"{}", "model.safetensors": WEIGHTS}, gated=True)}
    StandInHub.seen_auth_on_cdn, StandInHub.ranges = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandInHub)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    yield tmp_path / "hub"
    server.shutdown()
    server.server_close()


def _repo_dir(cache: Path, model_id: str) -> Path:
    return cache / f"models--{model_id.replace('/', '--')}"


# ----------------------------------------------------------------------------- token and gated models

def test_token_lookup_order(stand_in, monkeypatch, tmp_path):
    assert hub.token() is None
    stored = tmp_path / "hf-home" / "token"
    stored.parent.mkdir(parents=True)
    stored.write_text("hf_from_file\n")
    assert hub.token() == "hf_from_file"
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "elsewhere"))
    assert hub.token() is None, "HF_TOKEN_PATH names the stored token's file"
    (tmp_path / "elsewhere").write_text("hf_path")
    assert hub.token() == "hf_path"
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hf_old_name")
    assert hub.token() == "hf_old_name"
    monkeypatch.setenv("HF_TOKEN", "  ")
    assert hub.token() == "hf_old_name", "an empty HF_TOKEN counts as none"
    monkeypatch.setenv("HF_TOKEN", "hf_new")
    assert hub.token() == "hf_new"


def test_needs_token_names_the_gated_models():
    ids = [LLAMA, "Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.2-1B-Instruct", LLAMA, "nobody/unknown"]
    assert hub.needs_token(ids) == [LLAMA, "meta-llama/Llama-3.2-1B-Instruct"]


def test_skip_reason_without_and_with_token(stand_in, monkeypatch):
    reason = hub.skip_reason([LLAMA, "Qwen/Qwen2.5-7B-Instruct"])
    assert reason is not None and "\n" not in reason
    assert reason.startswith(f"needs {LLAMA}, gated on the Hugging Face hub: accept its licence on the model page")
    assert reason.endswith("and set HF_TOKEN")
    assert hub.skip_reason(["Qwen/Qwen2.5-7B-Instruct"]) is None
    monkeypatch.setenv("HF_TOKEN", GOOD_TOKEN)
    assert hub.skip_reason([LLAMA]) is None


# ----------------------------------------------------------------------------- downloads

def test_predownload_fills_the_cache_the_engines_read(stand_in):
    assert hub.predownload(["org/public"], progress=False) == []
    repo = _repo_dir(models.hub_cache(), "org/public")
    snapshot = repo / "snapshots" / COMMIT
    assert sorted(p.name for p in snapshot.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    assert (snapshot / "model.safetensors").is_symlink() and (snapshot / "model.safetensors").read_bytes() == WEIGHTS
    assert (repo / "blobs" / hashlib.sha256(WEIGHTS).hexdigest()).is_file()
    assert (repo / "refs" / "main").read_text() == COMMIT
    assert StandInHub.seen_auth_on_cdn == []
    assert hub.predownload(["org/public"], progress=False) == [], "a second run finds everything there"


def test_the_token_stays_on_the_hubs_host(stand_in, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", GOOD_TOKEN)
    assert hub.predownload([LLAMA], progress=False) == []
    assert StandInHub.seen_auth_on_cdn == [], "the redirect to the CDN's host carried the token"
    assert (_repo_dir(stand_in, LLAMA) / "snapshots" / COMMIT / "model.safetensors").read_bytes() == WEIGHTS


def test_gated_model_without_token_is_the_skip_reason_and_no_request(stand_in):
    assert hub.predownload([LLAMA], progress=False) == [hub.skip_reason([LLAMA])]
    assert not _repo_dir(stand_in, LLAMA).exists()


def test_401_and_403_say_accept_the_licence_and_set_the_token(stand_in, monkeypatch):
    [line] = hub.predownload(["org/private"], progress=False)  # gated, but not one model_shapes.toml knows
    assert "org/private" in line and "401" in line and "without a token" in line
    assert "accept its licence" in line and "HF_TOKEN" in line
    monkeypatch.setenv("HF_TOKEN", "hf_no_access")
    [line] = hub.predownload(["org/private"], progress=False)
    assert "403" in line and "has no access" in line and "HF_TOKEN" in line


def test_404_names_the_id(stand_in):
    [line] = hub.predownload(["org/no-such-model"], progress=False)
    assert line.startswith("org/no-such-model: no such repository") and "404" in line


def test_no_network_names_the_host(stand_in, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    [line] = hub.predownload(["org/public"], progress=False)
    assert "'org/public'" in line and "127.0.0.1:9" in line and "unreachable" in line


def test_a_broken_off_download_leaves_nothing_complete_and_resumes(stand_in):
    StandInHub.repos["org/public"].cut_next = 1
    [line] = hub.predownload(["org/public"], progress=False)
    assert "org/public" in line and "broke off" in line
    repo = _repo_dir(stand_in, "org/public")
    blobs = {p.name for p in (repo / "blobs").iterdir()}
    etag = hashlib.sha256(WEIGHTS).hexdigest()
    assert f"{etag}.incomplete" in blobs and etag not in blobs
    assert not (repo / "snapshots").exists() and not (repo / "refs").exists(), "no snapshot before every blob is done"
    assert 0 < (repo / "blobs" / f"{etag}.incomplete").stat().st_size < len(WEIGHTS)
    assert hub.predownload(["org/public"], progress=False) == []
    assert StandInHub.ranges == ["", f"bytes={len(WEIGHTS) // 2}-"], "the second run resumes where the first stopped"
    assert (repo / "snapshots" / COMMIT / "model.safetensors").read_bytes() == WEIGHTS
    assert not any(p.name.endswith(".incomplete") for p in (repo / "blobs").iterdir())


def test_a_file_that_does_not_match_its_hash_is_removed(stand_in):
    StandInHub.repos["org/public"].corrupt = True
    [line] = hub.predownload(["org/public"], progress=False)
    assert "org/public/model.safetensors" in line and "removed" in line
    repo = _repo_dir(stand_in, "org/public")
    assert [p.name for p in (repo / "blobs").iterdir() if len(p.name.split(".")[0]) == 64] == []
    assert not (repo / "snapshots").exists()


# ----------------------------------------------------------------------------- check_hub (models.resolve)

def test_check_hub_reports_a_gated_model_as_needing_a_token(stand_in):
    with pytest.raises(models.ModelMissing, match="gated on the Hugging Face hub.*set HF_TOKEN"):
        models.check_hub(LLAMA)
    with pytest.raises(models.ModelMissing, match="401 without a token"):
        models.check_hub("org/private")  # the hub's own 401 for a gated model servelab does not know


def test_check_hub_passes_with_access_and_names_a_missing_id(stand_in, monkeypatch):
    models.check_hub("org/public")
    monkeypatch.setenv("HF_TOKEN", GOOD_TOKEN)
    models.check_hub(LLAMA)
    with pytest.raises(models.ModelMissing, match="org/nothing: no such repository"):
        models.check_hub("org/nothing")


def test_a_rerun_or_an_offline_cache_asks_the_hub_nothing(stand_in, monkeypatch):
    """Setup runs again after a break, or on a machine whose cache was filled elsewhere with HF_HUB_OFFLINE=1:
    a complete model is not looked up again; offline, a missing one is named."""
    assert hub.predownload(["org/public"], progress=False) == []
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there: any request would fail
    assert hub.predownload(["org/public"], progress=False) == []
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (line,) = hub.predownload(["org/public", "org/absent"], progress=False)
    assert line.startswith("org/absent: HF_HUB_OFFLINE is set and it is not in the Hugging Face cache")
