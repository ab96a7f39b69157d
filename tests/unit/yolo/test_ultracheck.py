"""The check at start (rig.yolo.ultracheck): what rig does with the Ultralytics it finds, decided from
the contract check's report (pure), and `rig train`, `rig bench` and `rig plan` running it first."""

from __future__ import annotations

import pytest
from rig import cli
from rig.yolo import contract, contractcheck, ultracheck

WHERE = "/home/yolo/.local/lib/python3.11/site-packages/ultralytics"


def _report(version: str, *missing: tuple[contract.Feature, str]) -> contractcheck.Report:
    return contractcheck.Report(
        version, WHERE, tuple(contractcheck.Missing(f.key, name, "no such method") for f, name in missing)
    )


def test_in_the_window_every_feature_and_no_line() -> None:
    assert ultracheck.decide(_report("8.4.150"), "8.4.190", oldest="8.4.120") == ultracheck.Verdict()


def test_older_than_the_window_is_one_error_naming_version_place_and_window() -> None:
    verdict = ultracheck.decide(_report("8.4.100"), "8.4.190", oldest="8.4.120")
    assert verdict.error == (
        f"Ultralytics 8.4.100 (imported from {WHERE}) is older than rig supports: rig is tested with "
        "Ultralytics 8.4.120 to 8.4.190; use the image's Ultralytics 8.4.190 (remove yours: "
        "`pip uninstall ultralytics`)"
    )


def test_what_rig_cannot_train_without_is_one_error_whatever_the_version() -> None:
    verdict = ultracheck.decide(
        _report("8.5.0", (contract.CORE, "engine.trainer.BaseTrainer._setup_train")), "8.4.190"
    )
    assert (
        verdict.error is not None
        and "lacks engine.trainer.BaseTrainer._setup_train (no such method)" in verdict.error
    )
    assert "which rig cannot train without" in verdict.error


def test_newer_is_untested_and_a_feature_without_its_names_is_off_in_one_warning_each() -> None:
    verdict = ultracheck.decide(
        _report(
            "8.5.2",
            (contract.DEVICE_AUGMENT, "data.augment.Mosaic.apply_image"),
            (contract.DEVICE_AUGMENT, "data.augment.Format.apply_image"),
            (contract.METRICS, "models.yolo.detect.train.DetectionTrainer.save_dir"),
        ),
        "8.4.190",
    )
    assert verdict.error is None and len(verdict.warnings) == 3, verdict
    window = f"({contract.WINDOW.oldest} to 8.4.190)"
    assert verdict.warnings[0].endswith(f"is newer than rig's tested window {window}: untested")
    device, metrics = verdict.warnings[1:]
    assert device.startswith("device augmentation off: Ultralytics 8.5.2 (imported from")
    assert "lacks data.augment.Mosaic.apply_image (no such method)" in device  # the first missing name
    assert device.endswith(contract.DEVICE_AUGMENT.off)
    assert metrics.startswith("metrics and telemetry off:")


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["train", "data=/nowhere/data.yaml"], "rig train"),
        (["plan"], "rig plan"),
        (["bench", "--quick"], "rig bench"),
    ],
)
def test_each_command_checks_first_one_error_line_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str], command: str
) -> None:
    monkeypatch.setattr(ultracheck, "installed", lambda: _report("8.4.100"))
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"ERROR rig: {command}: Ultralytics 8.4.100 "), err


def test_rig_bench_refuses_when_its_own_names_are_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        ultracheck, "installed", lambda: _report("8.4.150", (contract.BENCH, "nn.tasks.DetectionModel"))
    )
    assert cli.main(["bench", "--quick"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lacks nn.tasks.DetectionModel (no such method)" in err[0], err


def test_the_pin_is_pyproject_toml_s() -> None:
    assert ultracheck.pinned() and ultracheck._key(ultracheck.pinned()) > ultracheck._key(
        contract.WINDOW.oldest
    )
