"""A long validation pass, on PYTHONPATH: each validation batch waits RIG_TEST_VAL_BATCH_S seconds
more (Ultralytics' own on_val_batch_start callback), so a signal surely comes while one runs. Only
the test's clock changes: the batches, the stop and the checkpoint are the real ones."""

import os
import time

_DELAY = float(os.environ.get("RIG_TEST_VAL_BATCH_S", "0") or 0)
if _DELAY > 0:
    from ultralytics.utils import callbacks

    def _slow(_validator: object) -> None:
        time.sleep(_DELAY)

    callbacks.default_callbacks.setdefault("on_val_batch_start", []).append(_slow)
