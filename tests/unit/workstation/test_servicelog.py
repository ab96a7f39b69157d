"""rig.workstation.servicelog: a service's output as log lines, each classified by its level and
bounded in length, drained in bounded memory however long a line is."""

from __future__ import annotations

import logging
import os
import time

import pytest
from rig.workstation.servicelog import Lines, classify, pump

from tests.helpers.logrecords import Records


@pytest.mark.parametrize(
    ("line", "level", "text"),
    [
        (
            "[I 2026-11-29 14:00:00.123 ServerApp] Jupyter Server is running",
            logging.INFO,
            "ServerApp: Jupyter",
        ),
        ("[W 2026-11-29 14:00:00.123 LabApp] Could not determine", logging.WARNING, "LabApp: Could not"),
        ("[E 2026-11-29 14:00:00.123 ServerApp] 500 GET /api", logging.ERROR, "ServerApp: 500 GET"),
        ("W1129 14:00:00.123456 140 plugin.py:12] no data", logging.WARNING, "no data"),
        ("error: Bind to port 2222 on 0.0.0.0 failed", logging.ERROR, "error: Bind"),
        ("fatal: Cannot bind any address.", logging.ERROR, "fatal: Cannot"),
        ("Server listening on 0.0.0.0 port 2222.", logging.INFO, "Server listening"),
        ("/x.py:3: DeprecationWarning: old", logging.WARNING, "/x.py:3"),
        ("Traceback (most recent call last):", logging.ERROR, "Traceback"),
    ],
)
def test_classify_service_lines(line: str, level: int, text: str) -> None:
    got_level, got_text = classify(line)
    assert got_level == level
    assert got_text.startswith(text)


# ---- a service's output: bounded lines ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("chunks", "lines"),
    [
        ([b"a\nb\n"], [b"a", b"b"]),
        ([b"par", b"tial\n", b"\n"], [b"partial", b""]),
        ([b"12345678\n"], [b"12345678"]),  # exactly max_line: whole
        ([b"123456789\nok\n"], [b"12345678 [...] (line cut at 8 bytes, the rest dropped)", b"ok"]),
        (
            [b"1234", b"5678", b"9", b"xyz", b"\nok\n"],
            [b"12345678 [...] (line cut at 8 bytes, the rest dropped)", b"ok"],
        ),
    ],
)
def test_lines_are_cut_at_max_line(chunks: list[bytes], lines: list[bytes]) -> None:
    splitter = Lines(max_line=8)
    out = [line for chunk in chunks for line in splitter.feed(chunk)]
    assert out == lines
    assert splitter.flush() == []


def test_an_unterminated_last_line_is_flushed_once() -> None:
    splitter = Lines(max_line=8)
    assert splitter.feed(b"last") == []
    assert splitter.flush() == [b"last"]
    assert splitter.flush() == []
    assert splitter.feed(b"0123456789") == [b"01234567 [...] (line cut at 8 bytes, the rest dropped)"]
    assert splitter.flush() == []  # the rest of a cut line is dropped, even at the end


def test_a_huge_line_keeps_the_buffer_bounded() -> None:
    splitter = Lines(max_line=8192)
    chunk = b"x" * 65536
    out: list[bytes] = []
    biggest = 0
    for _ in range(2000):  # 128 MiB, no newline
        out += splitter.feed(chunk)
        biggest = max(biggest, len(splitter.buf))
    out += splitter.feed(b"x\nnext line\n")
    assert biggest <= 8192
    assert [len(line) for line in out[:1]] == [8192 + len(splitter.marker)]
    assert out[0].endswith(b"[...] (line cut at 8192 bytes, the rest dropped)")
    assert out[1:] == [b"next line"]


def test_pump_drains_a_huge_line_fast_in_bounded_memory() -> None:
    import threading
    import tracemalloc

    read_end, write_end = os.pipe()
    block = b"y" * (1 << 20)
    size_mib = 512

    def write() -> None:
        with os.fdopen(write_end, "wb", buffering=0) as w:
            w.write(b"[W 2026-11-29 14:00:00.123 ServerApp] before\n")
            for _ in range(size_mib):
                w.write(block)
            w.write(b"\nafter\n")

    logger = logging.getLogger("rig.pumped")
    handler = Records()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    writer = threading.Thread(target=write)
    tracemalloc.start()
    try:
        started = time.monotonic()
        writer.start()
        pump(os.fdopen(read_end, "rb"), logger)
        took = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        writer.join()
        logger.removeHandler(handler)
    lines = [(r.levelno, r.getMessage()) for r in handler.records]
    assert lines[0] == (logging.WARNING, "ServerApp: before")
    assert lines[1][1] == "y" * 8192 + " [...] (line cut at 8192 bytes, the rest dropped)"
    assert lines[2:] == [(logging.INFO, "after")]
    assert peak < 1 << 20, peak  # a chunk and a line, whatever the stream carries
    print(f"pump: {size_mib} MiB in one line drained in {took:.2f} s, peak {peak / 1024:.0f} KiB")
    assert took < 30


# ---- issue 26, item 8: a service's output cannot forge or hide a log line --------------------------
def test_control_characters_in_service_output_are_escaped(records: Records) -> None:
    read_end, write_end = os.pipe()
    forged = b"\x1b[2K\rINFO serve: JupyterLab: http://evil/lab?token=x \xff\xe2\x80\xae\n"
    os.write(write_end, b"kernel says " + forged + b"\tnext\n")
    os.close(write_end)
    with os.fdopen(read_end, "rb", buffering=0) as stream:
        pump(stream, logging.getLogger("rig.jupyter"))
    assert records.lines(logging.INFO) == [
        "rig.jupyter: kernel says \\x1b[2K\\rINFO serve: JupyterLab: http://evil/lab?token=x \\xff\\u202e",
        "rig.jupyter: \\tnext",
    ]
