"""A slower clock for the stop tests, on PYTHONPATH: each training batch waits RIG_TEST_TRAIN_BATCH_S
seconds more, each validation batch RIG_TEST_VAL_BATCH_S (Ultralytics' own callbacks), so that a
periodic checkpoint comes inside an epoch and a signal surely comes while a validation pass runs,
however fast the machine. Only the time changes: the batches, the draws, the stop and the
checkpoints are the real ones.

RIG_TEST_EMA_TAU sets the EMA's time constant (Ultralytics': 2000 updates, so the few updates of a
test run leave an EMA that is mostly the last weights, whatever its history): with 1 the EMA's
decay is at once 0.9999 and every update before the stop still weighs in its last value."""

import os

_DELAYS = {
    "on_train_batch_start": float(os.environ.get("RIG_TEST_TRAIN_BATCH_S", "0") or 0),
    "on_val_batch_start": float(os.environ.get("RIG_TEST_VAL_BATCH_S", "0") or 0),
}
if any(_DELAYS.values()):
    import time

    from ultralytics.utils import callbacks

    for _event, _delay in _DELAYS.items():
        if _delay > 0:
            callbacks.default_callbacks.setdefault(_event, []).append(lambda _t, d=_delay: time.sleep(d))

_TAU = float(os.environ.get("RIG_TEST_EMA_TAU", "0") or 0)
if _TAU > 0:
    from ultralytics.utils import torch_utils

    _init = torch_utils.ModelEMA.__init__

    def _with_tau(self, model, decay=0.9999, tau=2000, updates=0):
        _init(self, model, decay, _TAU, updates)

    torch_utils.ModelEMA.__init__ = _with_tau
