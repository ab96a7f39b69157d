"""What a resume puts back: another geometry's restart, tensors on the training device, gradients
under another AMP scale."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rig.yolo import resumable
from rig.yolo.trainer import resume


@dataclass(frozen=True)
class FakeTensor:
    """A tensor as far as devices and scaling go (torch.load(map_location="cpu") gives "cpu")."""

    value: float
    device: str = "cpu"

    def to(self, device: str) -> FakeTensor:
        return FakeTensor(self.value, device)

    def __mul__(self, factor: float) -> FakeTensor:
        return FakeTensor(self.value * factor, self.device)


def _pending(**kw: Any) -> resumable.Pending:
    fields: dict[str, Any] = {
        "done": 7,
        "last_opt_step": 95,
        "gradients": {"w": FakeTensor(1.0)},
        "tloss": {"box": FakeTensor(2.0)},
        "batches": 20,
        **kw,
    }
    return resumable.Pending(**fields)


def test_the_same_geometry_resumes_as_saved() -> None:
    pending = _pending()
    assert resume.fitted(pending, 20) == (pending, None)
    old = _pending(batches=0)  # a checkpoint that recorded no batches: nothing to compare
    assert resume.fitted(old, 10) == (old, None)


def test_another_geometry_mid_epoch_runs_the_epoch_again_and_restarts_the_accumulation() -> None:
    fitted, warning = resume.fitted(_pending(), 10)
    assert (fitted.done, fitted.gradients, fitted.tloss, fitted.last_opt_step) == (0, {}, None, -1)
    assert warning is not None and "20 batches per rank; this run has 10" in warning
    assert "runs again from its start" in warning and "accumulation restarts" in warning


def test_another_geometry_at_an_epochs_end_restarts_the_accumulation_with_a_warning() -> None:
    fitted, warning = resume.fitted(_pending(done=0, gradients={}, tloss=None, last_opt_step=99), 10)
    assert fitted.last_opt_step == -1 and fitted.done == 0
    assert warning is not None and "at an epoch's end" in warning and "steps at the first batch" in warning


def test_restored_tensors_land_on_the_training_device_nested_or_not() -> None:
    nested = {"box": FakeTensor(1.0), "parts": [FakeTensor(2.0), (FakeTensor(3.0),)]}
    moved = resume.on_device(nested, "cuda:0")
    assert moved["box"].device == "cuda:0"
    assert [moved["parts"][0].device, moved["parts"][1][0].device] == ["cuda:0", "cuda:0"]
    assert isinstance(moved["parts"][1], tuple)
    assert resume.on_device(None, "cuda:0") is None and resume.on_device(0.5, "cuda:0") == 0.5


class _Scaler:
    def __init__(self, enabled: bool, scale: float = 65536.0) -> None:
        self.enabled, self.scale = enabled, scale

    def is_enabled(self) -> bool:
        return self.enabled

    def get_scale(self) -> float:
        return self.scale


def test_gradients_follow_the_scale_they_were_accumulated_under() -> None:
    cpu, gpu = resumable.scale_of(_Scaler(False)), resumable.scale_of(_Scaler(True))
    assert (cpu, gpu, resumable.scale_of(None)) == (1.0, 65536.0, 1.0)
    grads = {"w": FakeTensor(3.0)}
    assert resume.gradients_scaled(grads, cpu, gpu)["w"].value == 3.0 * 65536  # a CPU checkpoint on a GPU
    assert resume.gradients_scaled({"w": FakeTensor(65536.0)}, gpu, cpu)["w"].value == 1.0  # and back
    same = resume.gradients_scaled(grads, gpu, gpu)
    assert same["w"] is grads["w"]  # the same scale: untouched, bit for bit
