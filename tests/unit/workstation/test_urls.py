"""The ways in that `rig serve` logs and writes for `make up`: the URL follows each server start's token."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from rig.workstation import services, urls
from rig.workstation.users import Ids

SSH = "SSH: ssh -p 2222 yolo@HOST (1 key(s))"
URL = "http://localhost:8888/lab"


def test_lines_carry_the_current_token_unless_the_user_set_it() -> None:
    both = urls.Entrances(SSH, URL, token_set=False)
    jupyter = f"JupyterLab: {URL}?token={'a1' * 24} (a new token at every start)"
    assert urls.lines(both, "a1" * 24) == [SSH, jupyter]
    assert urls.lines(urls.Entrances(SSH, URL, token_set=True), "mine") == [
        SSH,
        f"JupyterLab: {URL} (token: the one you set)",
    ]
    assert urls.lines(urls.Entrances(None, URL, token_set=False), None) == []  # no server started yet
    assert urls.lines(urls.Entrances(SSH, None, token_set=False), None) == [SSH]


def test_every_start_of_the_server_gets_a_new_token_and_the_file_follows(tmp_path: Path) -> None:
    board = urls.Board(urls.Entrances(SSH, URL, token_set=False), tmp_path / "urls")
    drawn: list[str] = []

    def token() -> str:  # what rig serve's does: draw, publish, give
        drawn.append(os.urandom(24).hex())
        board.publish(drawn[-1])
        return drawn[-1]

    spec = services.jupyter_spec({}, Ids(2001, 2001), token)
    assert spec.stdin is not None
    first, second = spec.stdin(), spec.stdin()  # what the supervisor asks at two starts
    assert first != second and first == (drawn[0] + "\n").encode() and second == (drawn[1] + "\n").encode()
    written = (tmp_path / "urls").read_text()
    assert f"?token={drawn[1]} " in written and drawn[0] not in written
    assert (tmp_path / "urls").stat().st_mode & 0o777 == 0o600


def test_a_file_that_cannot_be_written_warns_once_until_it_can(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = tmp_path / "blocked"
    blocked.write_text("")  # a file where the folder should be: every write fails
    board = urls.Board(urls.Entrances(SSH, URL, token_set=False), blocked / "urls")
    with caplog.at_level(logging.INFO, logger="rig"):
        for n in range(3):
            assert board.publish(f"t{n}" * 12)[0] == SSH
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "cannot write" in warned[0].getMessage()
    assert sum("?token=t2" in r.getMessage() for r in caplog.records) == 1  # logged at each start
