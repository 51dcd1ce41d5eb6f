"""Which TCP ports a server's processes listen on, read from /proc (Linux), and which may listen beyond loopback.

servelab starts every HTTP server on 127.0.0.1, but an engine opens more sockets than its HTTP port. On a rented
GPU with a public address, any socket bound to all interfaces is reachable from outside unless a firewall closes
it. `BEYOND_LOOPBACK` names each one the engines open, with the reason; a test fails on any other.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

# (engine, process name as /proc/PID/comm shows it, 15 characters at most) -> why it listens on every interface.
BEYOND_LOOPBACK = {
    ("sglang", "sglang::schedul"): (
        "SGLang's scheduler initialises torch.distributed with tcp://127.0.0.1:<nccl_port> "
        "(sglang/srt/distributed/bootstrap.py, _resolve_dist_init_method); PyTorch's TCPStore server behind it "
        "binds every interface whatever host the URL names. Unauthenticated: keep --nccl-port's range closed "
        "to the outside (servelab lets SGLang pick it)."),
}

_LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp*


@dataclass(frozen=True)
class Listening:
    pid: int
    process: str
    address: str
    port: int

    @property
    def loopback(self) -> bool:
        return ipaddress.ip_address(self.address).is_loopback


def _address(hex_address: str) -> str:
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))  # four little-endian 32-bit words
    v6 = ipaddress.IPv6Address(words)
    return str(v6.ipv4_mapped or v6)


def _listening_inodes(proc: Path) -> dict[str, tuple[str, int]]:
    found = {}
    for table in ("tcp", "tcp6"):
        path = proc / "net" / table
        if not path.is_file():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _LISTEN:
                host, port = fields[1].split(":")
                found[fields[9]] = (_address(host), int(port, 16))
    return found


def _link(fd: Path) -> str | None:
    try:
        return os.readlink(fd)
    except OSError:  # closed meanwhile (the listing's own descriptor is one)
        return None


def listening(pids: list[int], proc: Path = Path("/proc")) -> list[Listening]:
    """Every TCP socket in LISTEN state that one of `pids` holds open, with the holder's process name."""
    inodes = _listening_inodes(proc)
    found = []
    for pid in pids:
        try:
            fds = list((proc / str(pid) / "fd").iterdir())
            name = (proc / str(pid) / "comm").read_text().strip()
        except OSError:  # gone, or not ours to read
            continue
        for link in filter(None, map(_link, fds)):
            if link.startswith("socket:[") and (inode := link[8:-1]) in inodes:
                found.append(Listening(pid, name, *inodes[inode]))
    return sorted(set(found), key=lambda s: (s.pid, s.port))


def unexplained(engine: str, sockets: list[Listening]) -> list[Listening]:
    """The sockets beyond loopback that BEYOND_LOOPBACK does not name for `engine`."""
    return [s for s in sockets if not s.loopback and (engine, s.process) not in BEYOND_LOOPBACK]
