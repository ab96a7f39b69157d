"""Fault injection for the image tests, on PYTHONPATH: rig's part of every checkpoint (its resume
state, rig.yolo.resumable.state) raises, as a bug or a change in Ultralytics would make it raise.
Ultralytics' own save path (its save_model, rig's atomic writes) is left as it is: what the test
checks is that its checkpoint is still written and the run goes on."""

from rig.yolo import resumable


def _raises(*_args: object, **_kwargs: object) -> dict[str, object]:
    raise AttributeError("module 'ultralytics.utils.torch_utils' has no attribute 'qat_state'")


resumable.state = _raises
