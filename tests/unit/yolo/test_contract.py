"""rig's contract with Ultralytics (rig.yolo.contract) checked against real releases' source.

The locked wheel and the tested window's oldest release have every listed name; a copy of the
locked wheel with one listed name removed or changed fails, naming it and the feature it turns off;
the contract itself lists every Protocol it declares where the check reads it.
"""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from rig.yolo import contract, contractcheck, ultracheck

from tools import ultralytics_releases


def _missing(report: contractcheck.Report) -> list[str]:
    return [f"{m.feature}: {m.describe()}" for m in report.missing]


def test_the_image_s_ultralytics_has_every_listed_name() -> None:
    report = contractcheck.check(ultralytics_releases.source())
    assert report.version == ultralytics_releases.locked_version() == ultracheck.pinned()
    assert _missing(report) == []
    assert "engine/trainer.py" in report.files and "cfg/default.yaml" in report.files


def test_the_window_s_oldest_has_every_listed_name() -> None:
    report = contractcheck.check(ultralytics_releases.source(contract.WINDOW.oldest))
    assert report.version == contract.WINDOW.oldest
    assert _missing(report) == []


def _edit(package: Path, rel: str, old: str, new: str) -> None:
    path = package / rel
    text = path.read_text()
    assert old in text, f"{old!r} is not in {rel}: the mutation no longer applies"
    path.write_text(text.replace(old, new, 1))


MUTATIONS = {
    # (file, text, replacement): the feature and where the check says it
    "a method removed": (
        "engine/trainer.py",
        "    def save_model(self):",
        "    def save_model_v2(self):",
        "exact_resume: ultralytics.models.yolo.detect.train.DetectionTrainer.save_model (no such method)",
    ),
    "a method rig overrides given another parameter": (
        "models/yolo/detect/train.py",
        'def build_dataset(self, img_path: str, mode: str = "train", batch: int | None = None):',
        'def build_dataset(self, img_path: str, mode: str = "train", batch: int | None = None, rank=0):',
        "core: ultralytics.models.yolo.detect.train.DetectionTrainer.build_dataset "
        "(takes (img_path, mode=..., batch=..., rank=...); rig's override takes",
    ),
    "a swapped global no longer read where rig swaps it": (
        "data/build.py",
        "    return InfiniteDataLoader(",
        "    return dataloader.DataLoader(",
        "exact_resume: ultralytics.data.build.InfiniteDataLoader (build_dataloader no longer reads it, so "
        "rig's swap would do nothing)",
    ),
    "the write rig's checkpoints extend, gone": (
        "engine/trainer.py",
        "        self.last.write_bytes(serialized_ckpt)  # save last.pt",
        "        torch.save(serialized_ckpt, self.last)",
        "exact_resume: ultralytics.models.yolo.detect.train.DetectionTrainer.save_model (no longer calls "
        "self.last.write_bytes, which rig relies on)",
    ),
    "a key of Mosaic's parameters renamed": (
        "data/augment.py",
        'params["layout"] = layout',
        'params["tiles"] = layout',
        "device_augment: ultralytics.data.augment.Mosaic.get_params: key 'layout' (not made there)",
    ),
    "a training argument removed": (
        "cfg/default.yaml",
        "\nnbs:",
        "\nnominal_batch:",
        "core: ultralytics/cfg/default.yaml: key 'nbs' (not made there)",
    ),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_a_listed_name_removed_from_a_copy_of_the_locked_wheel_is_named(
    tmp_path: Path, mutation: str
) -> None:
    rel, old, new, said = MUTATIONS[mutation]
    package = ultralytics_releases.copy_of(None, tmp_path)
    _edit(package, rel, old, new)
    missing = _missing(contractcheck.check(package))
    assert [m for m in missing if m.startswith(said)], missing


def test_every_protocol_of_the_contract_is_where_the_check_reads_it() -> None:
    checked = {*contract.MODULES, *contract.CLASSES, *contract.KEYS, *contract.TORCH_MODULES}
    checked |= {contract.TaskValidator, *contract.TORCH}
    declared = {
        value
        for value in vars(contract).values()
        if isinstance(value, type)
        and value.__module__ == contract.__name__
        and (getattr(value, "_is_protocol", False) or typing.is_typeddict(value))
    }
    bases = {b for cls in checked for b in cls.__mro__[1:] if b in declared}
    assert declared - checked - bases == set()


def test_every_listed_member_names_its_feature() -> None:
    for proto in [*contract.MODULES, *contract.CLASSES, *contract.KEYS]:
        for name, _thing, tags, owner in contractcheck._members(proto):
            if owner in contract.TORCH:
                continue  # torch's members, not Ultralytics'
            assert any(isinstance(t, contract.Feature) for t in tags), f"{proto.__name__}.{name}"


def test_the_window_is_named_once_and_its_oldest_is_older_than_the_pin() -> None:
    newest = ultracheck.pinned()
    assert ultracheck._key(contract.WINDOW.oldest) < ultracheck._key(newest)
    assert re.fullmatch(r"\d+\.\d+\.\d+", contract.WINDOW.oldest)


def test_the_baked_report_is_used_only_for_the_files_it_was_made_from(tmp_path: Path) -> None:
    package = ultralytics_releases.copy_of(None, tmp_path)
    baked = tmp_path / "baked.json"
    assert contractcheck.main([str(package), "--bake", str(baked)]) == 0
    fresh = contractcheck.installed_report(package, baked)
    assert fresh.missing == () and fresh.files
    # The same files: the baked report, not read again (its location is what it was baked for).
    _edit(
        tmp_path,
        "baked.json",
        '"missing": []',
        '"missing": [{"feature": "bench", "name": "x", "why": "baked"}]',
    )
    assert [m.why for m in contractcheck.installed_report(package, baked).missing] == ["baked"]
    # A file changed (another release installed over it): read again, the baked report ignored.
    _edit(package, "engine/trainer.py", "    def save_model(self):", "    def save_model_v2(self):")
    again = contractcheck.installed_report(package, baked)
    assert [m.why for m in again.missing] == ["no such method"]
