"""A rank's GPU variables as one `PROBE {json}` line."""

import json
import os

keys = ("LOCAL_RANK", "CUDA_VISIBLE_DEVICES", "RIG_CUDA_DEVICE", "RIG_GPU_BUS_ID")
os.write(1, ("PROBE " + json.dumps({k: os.environ.get(k) for k in keys}) + "\n").encode())
