"""Seeding the home folder: what is missing is made, nothing is overwritten, no link is followed."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from rig.workstation import home


def seeds(image: Path) -> tuple[home.Seed, ...]:
    (image / "skel").mkdir(exist_ok=True)
    (image / "skel/.bashrc").write_text("# the image's bashrc\n")
    return (home.Seed(".bashrc", image / "skel/.bashrc"), home.Seed(".local/lib/site"))


def test_a_fresh_home_gets_every_seed(tmp_path: Path) -> None:
    user = tmp_path / "home"
    user.mkdir()
    made = home.seed(user, seeds(tmp_path))
    assert made == [".bashrc", ".local/lib/site"]
    assert (user / ".bashrc").read_text() == "# the image's bashrc\n"
    assert (user / ".local/lib/site").is_dir()
    assert home.seed(user, seeds(tmp_path)) == []  # a second start makes nothing


def test_the_users_files_are_kept(tmp_path: Path) -> None:
    user = tmp_path / "home"
    user.mkdir()
    (user / ".bashrc").write_text("mine\n")
    assert home.seed(user, seeds(tmp_path)) == [".local/lib/site"]
    assert (user / ".bashrc").read_text() == "mine\n"


def test_links_are_never_followed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    user, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    user.mkdir()
    elsewhere.mkdir()
    (user / ".bashrc").symlink_to(elsewhere / "written-through-the-link")
    (user / ".local").symlink_to(elsewhere)
    with caplog.at_level(logging.WARNING):
        assert home.seed(user, seeds(tmp_path)) == []
    assert list(elsewhere.iterdir()) == []
    assert (user / ".bashrc").is_symlink()
    warnings = [r.getMessage() for r in caplog.records]
    assert any("skipped ~/.bashrc: it is a symbolic link" in w for w in warnings), warnings
    assert any("skipped ~/.local/lib/site" in w for w in warnings), warnings


def test_the_image_seeds_pips_folders() -> None:
    paths = {s.path for s in home.SEEDS}
    assert {".bashrc", ".profile", ".local/lib/python3.11/site-packages", ".local/bin"} <= paths
