"""rig.cli: the lazy command table (each entry names a real module whose parser agrees with it) and
the parser built from it. That `rig --version`/`--help`/`health` load nothing else is checked in the
image (tests/image/test_image.py), in a fresh process."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest
from rig import cli

from tests.helpers import ENTRYPOINT


def _registered(name: str) -> tuple[str | None, argparse.ArgumentParser]:
    """What `name`'s module registers: its help line in `rig --help` and its parser."""
    sub = argparse.ArgumentParser().add_subparsers()
    importlib.import_module(cli.module_name(name)).register(sub)
    (action,) = sub._choices_actions  # argparse keeps each command's help line here
    assert action.dest == name
    return action.help, sub.choices[name]


def _functions(parser: argparse.ArgumentParser) -> list[object]:
    """The functions a parser runs: its own, or its verbs' (`rig weights get`)."""
    verbs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not verbs:
        return [parser.get_default("func")]
    return [f for v in verbs for p in v.choices.values() for f in _functions(p)]


@pytest.mark.parametrize("name", cli.COMMANDS)
def test_each_lazy_entry_resolves_to_its_module_and_function(name: str) -> None:
    help_text, parser = _registered(name)
    assert help_text == cli.COMMANDS[name]
    for func in _functions(parser):
        assert callable(func) and getattr(func, "__module__", None) == cli.module_name(name)


def test_every_command_module_is_in_the_table() -> None:
    modules = {p.stem for p in (ENTRYPOINT / "rig" / "commands").glob("*.py")}
    helpers = {"__init__", "options"}  # shared by the commands, no command of their own
    assert {cli.module_name(n).rsplit(".", 1)[1] for n in cli.COMMANDS} == modules - helpers


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--version"], None),
        ([], None),
        (["--help"], None),
        (["train", "--gpus", "2", "epochs=1"], "train"),
        (["demo-data", "/tmp/d"], "demo-data"),
        (["-h", "health"], "health"),
        (["nosuch", "train"], None),
    ],
)
def test_chosen_command_is_the_first_word(argv: list[str], expected: str | None) -> None:
    assert cli.chosen_command(argv) == expected


def test_help_lists_every_command_with_its_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--help"])
    assert exited.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for name, help_text in cli.COMMANDS.items():
        assert f"{name} {' '.join(help_text.split())}" in out


def test_an_unknown_command_names_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["trian"])
    assert exited.value.code == 2
    assert "invalid choice: 'trian'" in capsys.readouterr().err


def test_the_chosen_command_parses_its_own_options() -> None:
    parser = cli.build_parser("env")
    assert parser.parse_args(["env", "--json"]).json is True


def test_help_in_a_fresh_process_loads_no_command_module() -> None:
    code = "import sys; from rig.cli import main\ntry: main(['--help'])\nexcept SystemExit: pass\n"
    code += "print([m for m in sys.modules if m.startswith('rig.commands.')])"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(ENTRYPOINT)},
    ).stdout
    assert out.strip().splitlines()[-1] == "[]"
