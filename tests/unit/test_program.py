"""Every rig program ends one way (rig.program): `rig` and each internal `python -m rig...` program print
an expected error as one `ERROR <program>: ...` line and exit its code, Ctrl-C is 130, a bug shows its
traceback, a child's code passes through. The rule on its own, then each program started as it is
started in the image (`python -m`), with the input that fails it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rig import program, spelling
from rig.errors import RigError
from rig.launch import trainer
from rig.workstation import pipgate, userenv
from rig.yolo import contractcheck, ultra

from tests.helpers import ENTRYPOINT


def _errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("ERROR")]


def test_an_expected_error_is_one_line_naming_the_program_and_its_exit_code(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def fails(code: int) -> int:
        raise RigError("what is wrong; how to fix it", code)

    assert program.run(lambda: fails(1), "trainer") == 1
    assert program.run(lambda: fails(2), "jupyter") == 2
    assert program.run(lambda: fails(1)) == 1  # rig itself
    assert capsys.readouterr().err.splitlines() == [
        "ERROR trainer: what is wrong; how to fix it",
        "ERROR jupyter: what is wrong; how to fix it",
        "ERROR rig: what is wrong; how to fix it",
    ]


def test_an_option_is_named_as_the_user_typed_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def bad_batch() -> int:
        raise RigError("not a number", option="batch", value="x")

    assert program.run(bad_batch, "trainer") == 1
    monkeypatch.setenv(spelling.ARGS_FROM, "make")  # `make train BATCH=x`
    assert program.run(bad_batch, "trainer") == 1
    assert capsys.readouterr().err.splitlines() == [
        "ERROR trainer: batch=x: not a number",
        "ERROR trainer: BATCH=x: not a number",
    ]


def test_ctrl_c_is_130_a_childs_code_passes_through_and_a_bug_shows_its_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def interrupted() -> int:
        raise KeyboardInterrupt

    def bug() -> int:
        raise ZeroDivisionError("a bug")

    assert program.run(interrupted, "pip") == program.INTERRUPTED == 130
    assert program.run(lambda: 143, "torchrun") == 143  # the ranks' 128 + SIGTERM, as they exited
    with pytest.raises(ZeroDivisionError):
        program.run(bug, "binder")
    assert capsys.readouterr().err == ""


def test_entry_wraps_main_however_it_is_called(capsys: pytest.CaptureFixture[str]) -> None:
    @program.entry("demo")
    def main(argv: list[str] | None = None) -> int:
        if argv:
            raise RigError(f"unexpected {argv[0]}", 3)
        return 0

    assert main() == 0 and main(["x"]) == 3 and main.__name__ == "main"
    assert capsys.readouterr().err.splitlines() == ["ERROR demo: unexpected x"]


def test_bad_input_exits_with_the_programs_own_code_but_keeps_a_named_one() -> None:
    with pytest.raises(RigError) as plain, program.bad_input_exits(2):
        raise RigError("bad value", option="batch", value="x")
    assert (plain.value.exit_code, plain.value.line()) == (2, "batch=x: bad value")
    with pytest.raises(RigError) as named, program.bad_input_exits(2):
        raise RigError("too old", 5)
    assert named.value.exit_code == 5


# ---------------------------------------------------------------------------------------------
# Each program, as the image starts it.

PLAN = json.dumps([{"local_rank": 0, "gpu_bus_id": None, "numa_node": 0, "cpus": [0], "mem_node": None}])
TOKEN = "t" * 32


@pytest.mark.parametrize(
    ("argv", "env", "stdin", "line", "code"),
    [
        (
            ["rig.launch.trainer", "epochs=1"],
            {"RIG_CHECKPOINT_EVERY": "soon"},
            "",
            "ERROR trainer: RIG_CHECKPOINT_EVERY='soon': use whole seconds between 0 and 604800 "
            "(default 900); what a SIGKILL may cost at most; 0 saves at epoch ends only",
            2,  # the trainer's own code for a bad setting
        ),
        (
            ["rig.launch.torchrun", "--standalone"],
            {"RIG_STOP_GRACE": "x"},
            "",
            "ERROR torchrun: RIG_STOP_GRACE='x': use whole seconds between 1 and 3600 (default 90); keep it "
            "below Docker's stop timeout, Kubernetes' terminationGracePeriodSeconds or Slurm's KillWait",
            2,
        ),
        (
            ["rig.launch.binder", "--plan", PLAN, "--", "true"],
            {"LOCAL_RANK": "5"},
            "",
            "ERROR binder: LOCAL_RANK 5 has no entry in a plan of 1 ranks",
            2,
        ),
        (
            ["rig.launch.binder", "--plan", PLAN, "--", "true"],
            {"LOCAL_RANK": "x"},
            "",
            "ERROR binder: LOCAL_RANK='x': use a whole number >= -1 (default 0); torchrun sets it for each "
            "rank; unset it outside torchrun",
            1,
        ),
        (
            ["rig.workstation.labserver"],
            {},
            "short\n",
            "ERROR jupyter: no token on stdin; start JupyterLab with `rig serve`",
            2,
        ),
        (
            ["rig.workstation.labserver"],
            {},
            TOKEN + "\n",
            "ERROR jupyter: no RIG_LISTEN_FD/RIG_READY_FD: start this service with `rig serve`",
            2,
        ),
        (
            ["rig.workstation.boardserver"],
            {"RIG_LISTEN_FD": "x", "RIG_READY_FD": "1"},
            "",
            "ERROR tensorboard: RIG_LISTEN_FD='x': use a whole number >= 0; "
            "start this service with `rig serve`",
            2,
        ),
    ],
    ids=[
        "trainer",
        "torchrun",
        "binder-plan",
        "binder-rank",
        "jupyter-token",
        "jupyter-socket",
        "tensorboard",
    ],
)
def test_each_internal_program_ends_with_one_error_line_and_its_code(
    argv: list[str], env: dict[str, str], stdin: str, line: str, code: int
) -> None:
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("RIG_", "LOCAL_", "WORLD_", "RANK"))},
        "PYTHONPATH": str(ENTRYPOINT),
        **env,
    }
    done = subprocess.run(
        [sys.executable, "-m", *argv], input=stdin, capture_output=True, text=True, env=environ, timeout=60
    )
    assert (done.returncode, _errors(done.stderr)) == (code, [line]), done.stderr
    assert "Traceback" not in done.stderr


def test_the_trainers_bad_argument_is_its_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(signal, "signal", lambda *_a: None)  # the stop handlers: not this test process's
    assert trainer.main(["epochs"]) == trainer.USAGE == 2
    assert _errors(capsys.readouterr().err) == ["ERROR trainer: expected key=value, got 'epochs'"]


def test_the_contract_check_without_ultralytics_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ultra, "package_dirs", list)
    assert contractcheck.main([]) == 2
    assert _errors(capsys.readouterr().err) == ["ERROR contract: Ultralytics is not installed here"]


@pytest.fixture
def gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pip gate run by yolo (uid 1000), with the image's lock in tmp_path."""
    lock = tmp_path / "requirements.lock.txt"
    lock.write_text("numpy==1.26.4 \\\n    --hash=sha256:0123\n")
    monkeypatch.setattr(userenv, "LOCK", lock)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)


def test_pip_as_root_is_one_line(gate: None, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert pipgate.main(["install", "anything"]) == 1
    errors = _errors(capsys.readouterr().err)
    assert len(errors) == 1 and errors[0].startswith("ERROR pip: installs into user yolo's own packages"), (
        errors
    )


def test_pips_code_passes_through_and_a_pinned_conflict_is_one_line(
    gate: None, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    conflict = (
        "ERROR: Cannot install rigneedsnew==0.1 because these package versions have conflicting "
        "dependencies.\n"
        "\nThe conflict is caused by:\n    The user requested (constraint) numpy==1.26.4\n"
        "    rigneedsnew 0.1 depends on numpy>=99\n\n"
    )
    answers = iter([(3, "ERROR: No matching distribution found for nothing-here\n"), (1, conflict)])
    monkeypatch.setattr(pipgate, "_run", lambda _inv: next(answers))
    assert pipgate.main(["install", "nothing-here"]) == 3  # pip's own, its words as it wrote them
    out = capsys.readouterr()
    assert out.out == "ERROR: No matching distribution found for nothing-here\n" and out.err == ""
    assert pipgate.main(["install", "rigneedsnew"]) == 1
    errors = _errors(capsys.readouterr().err)
    assert len(errors) == 1
    assert errors[0].startswith(
        "ERROR pip: rigneedsnew 0.1 depends on numpy>=99 would replace the image's pinned"
    )

    def interrupted(_inv: Any) -> tuple[int, str]:
        raise KeyboardInterrupt

    monkeypatch.setattr(pipgate, "_run", interrupted)
    assert pipgate.main(["install", "slow"]) == 130
