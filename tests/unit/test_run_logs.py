"""Run logs on the worker (schedd_worker.run_logs): the record format read back split by stream
and interleaved in order, the per-attempt bound (head and tail kept, the dropped bytes counted
where they were), the worker's total cap, age and per-job retention, the marked tail of the
Raft record, following a live log, the worker's answer to the leader, and the config keys."""

from __future__ import annotations

import asyncio
import os
import stat

import pytest

from schedd.ports.fakes import wait_until
from schedd_proto import logs_pb2 as lpb
from schedd_worker.config import ConfigError, parse_config
from schedd_worker.handlers.base import OUTPUT_TAIL_BYTES, Tail, marked_tail
from schedd_worker.run_logs import (HEAD_SEGMENTS, SEGMENTS, STDERR, STDOUT, LogLimits, LogStore,
                                    attempt_dir, read_page, read_tail)

SMALL = LogLimits(attempt_bytes=SEGMENTS * 4096, total_bytes=1 << 20, max_age_s=3600, keep_per_job=3)


class Clock:
    def __init__(self, ms: int = 1_000_000) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def store(tmp_path, limits: LogLimits = SMALL, clock: Clock | None = None, auto: bool = False) -> LogStore:
    return LogStore(tmp_path / "logs", limits, clock or Clock(), auto_sweep=auto)


def text(chunks, stream: str = "") -> str:
    return b"".join(c.data for c in chunks if c.kind == "output" and (not stream or c.stream == stream)).decode()


def test_both_streams_read_back_in_order_and_apart(tmp_path) -> None:
    s = store(tmp_path)
    log = s.open(7, "j@1", "j", 1, "t")
    for i in range(50):
        log.write(STDOUT, f"out {i}\n".encode())
        log.write(STDERR, f"err {i}\n".encode())
    log.close("SUCCEEDED", 0)
    d = s.root / attempt_dir(7, "j@1")
    page = read_page(d, 0, 1 << 20)
    assert page.at_end and [c.kind for c in page.chunks] == ["output"] * 100
    assert text(page.chunks) == "".join(f"out {i}\nerr {i}\n" for i in range(50))
    assert text(read_page(d, 0, 1 << 20, "stderr").chunks) == "".join(f"err {i}\n" for i in range(50))
    assert {c.stream for c in read_page(d, 0, 1 << 20, "stdout").chunks} == {"stdout"}
    # pages: a small max_bytes gives the same bytes in several pages, each starting where the last ended
    got, offset = [], 0
    while True:
        p = read_page(d, offset, 20)
        got += p.chunks
        offset = p.next_offset
        if p.at_end:
            break
    assert text(got) == text(page.chunks)


def test_the_folder_is_the_workers_alone_and_made_only_by_output(tmp_path) -> None:
    s = store(tmp_path)
    silent = s.open(1, "j@1", "j", 1, "t")
    silent.close("SUCCEEDED", 0)
    assert not (s.root / attempt_dir(1, "j@1")).exists()       # printed nothing: no folder
    log = s.open(2, "j@2", "j", 1, "t")
    log.write(STDOUT, b"x")
    d = s.root / attempt_dir(2, "j@2")
    assert stat.S_IMODE(os.stat(s.root).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert all(stat.S_IMODE(os.stat(f).st_mode) == 0o600 for f in d.iterdir())


def test_past_its_bound_an_attempt_keeps_head_and_tail_and_counts_what_it_dropped(tmp_path) -> None:
    s = store(tmp_path)
    log = s.open(3, "j@3", "j", 1, "t")
    lines = [f"line {i:05d}\n".encode() for i in range(20_000)]      # 240 KB past a 32 KiB bound
    for line in lines:
        log.write(STDOUT, line)
    log.close("FAILED", 1)
    d = s.root / attempt_dir(3, "j@3")
    size = sum(f.stat().st_size for f in d.glob("*.seg"))
    assert size <= SMALL.attempt_bytes
    page = read_page(d, 0, 1 << 30)
    kinds = [c.kind for c in page.chunks]
    assert kinds.count("dropped") == 1
    cut = kinds.index("dropped")
    head = text(page.chunks[:cut])
    tail = text(page.chunks[cut + 1:])
    dropped = page.chunks[cut].dropped_bytes
    whole = b"".join(lines).decode()
    assert whole.startswith(head) and whole.endswith(tail)            # how it started, how it ended
    assert len(head) + dropped + len(tail) == len(whole)              # and exactly what is missing
    assert len(head) >= HEAD_SEGMENTS * SMALL.segment_bytes // 3      # the head segments, less headers
    assert dropped == log.dropped and log.data_total == len(whole)
    # a reader that had an offset inside the removed part is told, and goes on after the gap
    later = read_page(d, page.chunks and SMALL.segment_bytes * (HEAD_SEGMENTS + 1), 1 << 30)
    assert later.chunks[0].kind == "dropped" and text(later.chunks) == tail


def test_tail_lines_of_one_stream(tmp_path) -> None:
    s = store(tmp_path)
    log = s.open(4, "j@4", "j", 1, "t")
    for i in range(100):
        log.write(STDOUT if i % 2 else STDERR, f"{i}\n".encode())
    log.write(STDOUT, b"no newline at the end")
    d = s.root / attempt_dir(4, "j@4")
    assert text(read_tail(d, 3).chunks) == "98\n99\nno newline at the end"
    assert text(read_tail(d, 2, which="stderr").chunks) == "96\n98\n"
    assert text(read_tail(d, 1000).chunks) == text(read_page(d, 0, 1 << 20).chunks)
    assert text(read_tail(d, 1000, max_bytes=10).chunks) == "ne at the end"[-10:]


def test_total_cap_age_and_per_job_retention(tmp_path) -> None:
    clock = Clock()
    limits = LogLimits(attempt_bytes=SEGMENTS * 4096, total_bytes=SEGMENTS * 4096 * 2, max_age_s=60,
                       keep_per_job=2)
    s = store(tmp_path, limits, clock)

    def run(token: int, job: str, size: int) -> str:
        log = s.open(token, f"{job}@{token}", job, 1, "t")
        log.write(STDOUT, b"x" * size)
        clock.ms += 1000
        log.close("SUCCEEDED", 0)
        return attempt_dir(token, f"{job}@{token}")

    a1, a2, a3 = run(1, "a", 100), run(2, "a", 100), run(3, "a", 100)
    assert s.sweep() == [a1]                          # a keeps its 2 newest
    old = run(4, "b", 100)
    clock.ms += 61_000
    fresh = run(5, "b", 100)
    assert set(s.sweep()) == {a2, a3, old}            # older than a minute after they ended
    big = [run(10 + i, f"c{i}", 20_000) for i in range(4)]     # 80 KB past a 64 KiB cap
    gone = s.sweep()
    assert big[0] in gone and big[-1] not in gone and fresh in gone
    assert s.total <= limits.total_bytes
    live = s.open(99, "d@99", "d", 1, "t")            # a running attempt is never removed
    live.write(STDOUT, b"y" * 30_000)
    assert attempt_dir(99, "d@99") not in s.sweep()


def test_attempts_ending_past_the_cap_sweep_in_the_background(tmp_path) -> None:
    s = store(tmp_path, LogLimits(attempt_bytes=SEGMENTS * 4096, total_bytes=SEGMENTS * 4096), auto=True)
    for token in range(6):
        log = s.open(token, f"j{token}@1", f"j{token}", 1, "t")
        log.write(STDOUT, b"z" * 12_000)
        log.close("SUCCEEDED", 0)
    wait_until(lambda: s.total <= s.limits.total_bytes and not s._sweeping, timeout=30,
               what="the background sweep")
    assert (s.root / attempt_dir(5, "j5@1")).is_dir() and not (s.root / attempt_dir(0, "j0@1")).exists()


def test_the_raft_tail_says_how_much_came_before() -> None:
    t = Tail()
    t.feed(b"a" * 20_000 + b"the end")
    marked = t.marked()
    assert marked.startswith("… 15,") and marked.endswith("aaathe end")
    assert len(marked.encode()) <= OUTPUT_TAIL_BYTES
    before = int(marked.split(" ")[1].replace(",", ""))
    assert before + len(marked.split("\n", 1)[1].encode()) == 20_007
    assert marked_tail(b"short", 5) == "short"


async def test_a_follower_waits_for_more_and_sees_the_end(tmp_path) -> None:
    s = store(tmp_path)
    log = s.open(5, "j@5", "j", 1, "t")
    log.write(STDOUT, b"first\n")
    req = lpb.LogRequest(request_id=1, fencing_token=5, execution_id="j@5", offset=0, wait_ms=0)
    page = await s.answer(req)
    assert text(page.chunks) == "first\n" and page.at_end and not page.finished
    waiting = asyncio.ensure_future(s.answer(lpb.LogRequest(
        request_id=2, fencing_token=5, execution_id="j@5", offset=page.next_offset, wait_ms=30_000)))
    await asyncio.sleep(0)
    assert not waiting.done()
    log.write(STDERR, b"second\n")
    page = await asyncio.wait_for(waiting, 10)
    assert page.request_id == 2 and [(c.stream, c.data) for c in page.chunks] == [("stderr", b"second\n")]
    waiting = asyncio.ensure_future(s.answer(lpb.LogRequest(
        request_id=3, fencing_token=5, execution_id="j@5", offset=page.next_offset, wait_ms=30_000)))
    await asyncio.sleep(0)
    log.close("FAILED", 3)
    page = await asyncio.wait_for(waiting, 10)
    assert page.finished and page.at_end and (page.state, page.exit_code) == ("FAILED", 3)
    missing = await s.answer(lpb.LogRequest(request_id=4, fencing_token=6, execution_id="j@6"))
    assert missing.missing and not missing.chunks


def test_limits_and_config_keys() -> None:
    cfg = parse_config('[logs]\ndir = "/srv/logs"\nattempt_bytes = 1048576\ntotal_bytes = 10485760\n'
                       'max_age = 3600\nkeep_per_job = 5\n')
    assert cfg.logs_dir == "/srv/logs" and cfg.logs_enabled
    assert cfg.logs == LogLimits(attempt_bytes=1 << 20, total_bytes=10 << 20, max_age_s=3600.0, keep_per_job=5)
    assert not parse_config("[logs]\nenabled = false\n").logs_enabled
    for bad, why in (('[logs]\ndir = "logs"', "absolute"), ("[logs]\nattempt_bytes = 10", "at least"),
                     ("[logs]\nkeep_per_job = 0", "at least 1"), ("[logs]\nsize = 1", "unknown key"),
                     ("[logs]\ntotal_bytes = 40000\nattempt_bytes = 65536", "at least attempt_bytes")):
        with pytest.raises(ConfigError, match=why):
            parse_config(bad)


async def test_a_shell_jobs_streams_are_read_by_the_worker_into_its_log(tmp_path) -> None:
    from schedd_worker.executors import Assignment, execute
    s = store(tmp_path)
    a = Assignment(execution_id="sh@1", job="sh", scheduled_ms=0, attempt=1, fencing_token=8,
                   handler={"shell": {"command": "echo one; echo two >&2; echo three; exit 4"}})
    log = s.open(8, "sh@1", "sh", 1, "")
    out = await execute(a, run_log=log)
    log.close(out.state, out.exit_code)
    d = s.root / attempt_dir(8, "sh@1")
    assert (out.state, out.exit_code) == ("FAILED", 4)
    assert text(read_page(d, 0).chunks, "stdout") == "one\nthree\n"
    assert text(read_page(d, 0).chunks, "stderr") == "two\n"
    assert sorted(text(read_page(d, 0).chunks).splitlines()) == ["one", "three", "two"]
    assert out.output_tail.count("\n") == 3                # the tail holds both streams, as before


class _Conn:
    def __init__(self) -> None:
        self.closed = False
        self.sent: list = []


async def test_the_leader_takes_a_page_only_from_the_stream_it_asked() -> None:
    from schedd.leader.log_requests import LogRequests
    reqs, asked, other = LogRequests(), _Conn(), _Conn()

    def send(conn: _Conn, msg) -> None:
        conn.sent.append(msg)

    pending = asyncio.ensure_future(reqs.ask(send, asked, lpb.LogRequest(fencing_token=5), 10))
    await asyncio.sleep(0)
    rid = asked.sent[0].log_request.request_id
    reqs.answered(other, lpb.LogPage(request_id=rid, next_offset=99))     # another worker's: ignored
    await asyncio.sleep(0)
    assert not pending.done()
    reqs.answered(asked, lpb.LogPage(request_id=rid, next_offset=7))
    assert (await pending).next_offset == 7
    pending = asyncio.ensure_future(reqs.ask(send, asked, lpb.LogRequest(fencing_token=5), 10))
    await asyncio.sleep(0)
    reqs.stream_closed(asked)                                                # its stream ended
    assert await pending is None
    assert await reqs.ask(send, asked, lpb.LogRequest(fencing_token=5), 0.05) is None   # no answer in time
