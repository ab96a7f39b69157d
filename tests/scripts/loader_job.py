"""A job with a PyTorch DataLoader worker that keeps loading batches after SIGTERM (only possible if
the worker got no SIGTERM of its own)."""

import pathlib
import signal
import time

from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 10**9

    def __getitem__(self, i):
        time.sleep(0.01)
        return i


stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
batches = iter(DataLoader(Slow(), batch_size=4, num_workers=1))
next(batches)
out = pathlib.Path("/workspace/markers")
(out / "loader.ready").touch()
while not stop:
    next(batches)
for _ in range(20):
    next(batches)
(out / "loader").write_text("SIGTERM")
