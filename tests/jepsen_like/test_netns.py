"""The namespace nemesis itself (tests/jepsen_like/netns.py): members reach each other through
the bridge, iptables DROP partitions both ways and one way without closing connections, and
nothing is left behind (also after a crashed run). Needs root; skipped with the reason if not."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.jepsen_like import netns

REASON = netns.unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no network namespaces: {REASON}")

# Inside member "b": accept one connection, then echo each line back (until EOF).
ECHO = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 7000)); s.listen(); print("ready", flush=True)
c, _ = s.accept()
f = c.makefile("rwb", buffering=0)
for line in f:
    f.write(line)
"""


# Inside member "a": one connection to "b"; per stdin line "WORD SECONDS", send WORD and wait up
# to SECONDS until WORD has come back on that same connection: print "got" or "timeout".
CLIENT = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], 7000), timeout=5)
buf = b""
for line in sys.stdin:
    word, seconds = line.split()
    c.sendall(word.encode() + b"\\n")
    deadline = time.monotonic() + float(seconds)
    while word.encode() + b"\\n" not in buf and time.monotonic() < deadline:
        c.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            buf += c.recv(4096)
        except socket.timeout:
            pass
    print("got" if word.encode() + b"\\n" in buf else "timeout", flush=True)
"""


def _ask(client, word: str, seconds: float) -> str:
    client.stdin.write(f"{word} {seconds}\n")
    client.stdin.flush()
    return client.stdout.readline().strip()


def test_partition_drops_packets_and_the_connection_survives_the_heal():
    net = netns.NetnsNet(["a", "b"])
    server = client = None
    try:
        server = subprocess.Popen([*net.exec_prefix("b"), sys.executable, "-c", ECHO, net.addr("b")],
                                  stdout=subprocess.PIPE, text=True)
        assert server.stdout.readline().strip() == "ready"
        client = subprocess.Popen([*net.exec_prefix("a"), sys.executable, "-c", CLIENT, net.addr("b")],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert _ask(client, "one", 10) == "got"
        for how in ("both", "out", "in"):
            net.block("a", ["b"], how)
            assert "-j DROP" in net.rules("a")
            assert _ask(client, f"cut-{how}", 0.7) == "timeout"      # dropped: neither refused nor reset
            net.heal()
            assert "DROP" not in net.rules("a")
            # the same connection: TCP retransmits what was dropped, and the echo comes back
            assert _ask(client, f"cut-{how}", 30) == "got"
            assert _ask(client, f"after-{how}", 10) == "got"
        assert net.host.startswith("10.77.") and net.addr("b") != net.addr("a")
    finally:
        for p in (client, server):
            if p is not None:
                p.kill()
                p.wait(timeout=10)
        net.close()
    assert net.leftovers() == []


def test_leftovers_of_a_crashed_run_are_removed():
    dead = next(pid for pid in range(0x3ffff0, 0x300000, -1) if not netns._alive(pid))
    name = f"{netns.PREFIX}{dead:06x}0-n1"
    subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "link", "add", f"{netns.PREFIX}{dead:06x}0b", "type", "bridge"], check=True)
    removed = netns.cleanup_stale()
    assert name in removed and f"{netns.PREFIX}{dead:06x}0b" in removed
    assert name not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
