"""`schedd local` restarted right after a stop keeps its ports (a port in TIME_WAIT is free to
the nodes, which bind with SO_REUSEADDR), and its banner tells a second terminal to activate
the virtualenv schedctl is installed in."""

from __future__ import annotations

import socket

from schedd.runtime.cluster import ports_free
from schedd.runtime.local import activate_lines


def _time_wait_port() -> int:
    """A port left in TIME_WAIT: the server side closes an accepted connection first."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    conn.close()                      # the active close: TIME_WAIT on (127.0.0.1:port, client)
    server.close()
    client.recv(1)
    client.close()
    return port


def test_a_port_in_time_wait_is_free_and_a_listening_one_is_not():
    port = _time_wait_port()
    with socket.socket() as plain:    # what the check did before: refused in TIME_WAIT
        try:
            plain.bind(("127.0.0.1", port))
            strict_refused = False
        except OSError:
            strict_refused = True
    assert strict_refused
    assert ports_free([port])
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        assert not ports_free([listening.getsockname()[1]])


def test_the_banner_says_to_activate_the_virtualenv(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "activate").write_text("")
    assert activate_lines(str(tmp_path), "/usr") == [
        f"  . {tmp_path}/bin/activate          # schedctl is installed in this virtualenv"]
    assert activate_lines("/usr", "/usr") == []                 # not in a virtualenv: nothing to do
