"""Reading listening sockets from /proc: addresses decoded, only LISTEN rows, only the given processes."""

from __future__ import annotations

import os
import socket

from servelab.engines import listening


def _fake_proc(tmp_path, rows4: list[str], rows6: list[str], fds: dict[int, list[str]]):
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    (proc / "net" / "tcp").write_text(head + "\n".join(rows4) + "\n")
    (proc / "net" / "tcp6").write_text(head + "\n".join(rows6) + "\n")
    for pid, inodes in fds.items():
        (proc / str(pid) / "fd").mkdir(parents=True)
        (proc / str(pid) / "comm").write_text("sglang::schedul\n")
        for i, inode in enumerate(inodes):
            os.symlink(f"socket:[{inode}]", proc / str(pid) / "fd" / str(i))
    return proc


def _row(address: str, state: str, inode: int) -> str:
    return f"   0: {address} 00000000:0000 {state} 00000000:00000000 00:00000000 00000000     0        0 {inode} 1"


def test_listening_decodes_addresses_and_keeps_only_listen_rows_of_the_given_pids(tmp_path):
    proc = _fake_proc(tmp_path, [_row("0100007F:1F90", "0A", 11), _row("00000000:1F91", "0A", 12),
                                 _row("0100007F:1F92", "01", 13), _row("00000000:1F93", "0A", 99)],
                      [_row("00000000000000000000000000000000:6D9C", "0A", 14)], {42: ["11", "12", "13", "14"]})
    found = listening.listening([42, 7], proc)
    assert [(s.address, s.port, s.loopback) for s in found] == [
        ("127.0.0.1", 8080, True), ("0.0.0.0", 8081, False), ("::", 28060, False)]
    assert listening.unexplained("sglang", found) == []  # the scheduler's store is named
    assert [s.port for s in listening.unexplained("vllm", found)] == [8081, 28060]


def test_listening_finds_a_real_socket_of_this_process():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        found = listening.listening([os.getpid()])
    assert [(s.address, s.port, s.loopback) for s in found if s.port == port] == [("127.0.0.1", port, True)]


def test_every_named_exception_gives_its_reason():
    assert all(len(reason.split()) > 10 for reason in listening.BEYOND_LOOPBACK.values())
