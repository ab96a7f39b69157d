"""A slower clock for the stop tests, on PYTHONPATH: each training batch waits RIG_TEST_TRAIN_BATCH_S
seconds more, each validation batch RIG_TEST_VAL_BATCH_S (Ultralytics' own callbacks), so that a
periodic checkpoint comes inside an epoch and a signal surely comes while a validation pass runs,
however fast the machine. Only the time changes: the batches, the draws, the stop and the
checkpoints are the real ones."""

import os
import time

_DELAYS = {
    "on_train_batch_start": float(os.environ.get("RIG_TEST_TRAIN_BATCH_S", "0") or 0),
    "on_val_batch_start": float(os.environ.get("RIG_TEST_VAL_BATCH_S", "0") or 0),
}
if any(_DELAYS.values()):
    from ultralytics.utils import callbacks

    for _event, _delay in _DELAYS.items():
        if _delay > 0:
            callbacks.default_callbacks.setdefault(_event, []).append(lambda _t, d=_delay: time.sleep(d))
