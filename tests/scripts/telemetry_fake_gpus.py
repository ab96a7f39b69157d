"""Inside the image: the sampler with a fake NVML module writes real TensorBoard event files.

Prints one JSON line: what TensorBoard's own EventAccumulator reads back, next to the CSV rows.
Two fake GPUs at buses 17 and 18; run it under CUDA_VISIBLE_DEVICES to sample a subset.
"""

import csv
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from fake_nvml import FakeGpu, FakeNvml
from rig import log
from rig.instrument import telemetry
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

log.setup()  # attach() and record() do this; a bare Recorder does not
run = Path(tempfile.mkdtemp()) / "run"
gpus = [
    FakeGpu(utils=[10, 20, 30, 40]),
    FakeGpu(name="NVIDIA H100", uuid="GPU-1", bus_id="00000000:18:00.0", utils=[70, 90]),
]
rec = telemetry.Recorder(run, nvml_module=FakeNvml(gpus, fail_after=20), interval_s=0.05)
rec.start()
rec.timer.epoch_start()
while rec.summary is None and len((run / "telemetry.csv").read_text().splitlines()) < 15:
    rec.timer.batch_start()
    time.sleep(0.01)
    rec.timer.batch_end()
summary = rec.stop()

acc = EventAccumulator(str(run / "telemetry"))
acc.Reload()
rows = list(csv.DictReader((run / "telemetry.csv").open()))
print(
    json.dumps(
        {
            "event_files": sorted(p.name for p in (run / "telemetry").iterdir()),
            "tags": sorted(acc.Tags()["scalars"]),
            # Per GPU as telemetry numbers them (CUDA_VISIBLE_DEVICES=1: the H100 is gpu0).
            "tb_util": {
                t.split("/")[0]: [e.value for e in acc.Scalars(t)]
                for t in acc.Tags()["scalars"]
                if t.endswith("/util_pct")
            },
            "csv_util": {
                k[: -len("_util_pct")]: [float(r[k]) for r in rows if r[k]]
                for k in rows[0]
                if k.endswith("_util_pct")
            },
            "csv_rows": len(rows),
            "summary": json.loads((run / "telemetry_summary.json").read_text()),
        }
    )
)
