"""How fast one loader process reads decoded images out of a mapped, page-cached file (the node image
cache), against what a training sample needs: the figure behind docs/ddp-notes.md's NUMA note.

Writes a file of SIZE_MB of random bytes, reads it once to put it in the page cache, then copies
640x480x3 images (a 640 px camera frame, 0.92 MB) out of a read-only map of it, as warpAffine reads
them, four per sample (mosaic). Prints GB/s and the milliseconds a sample's reads take. One NUMA node
measures the local rate only; a remote node's rate is the same copy from another socket's memory.
"""

from __future__ import annotations

import mmap
import os
import sys
import tempfile
import time

import numpy as np

IMAGE = (480, 640, 3)
SIZE_MB = int(sys.argv[1]) if len(sys.argv) > 1 else 1024


def main() -> int:
    nbytes = int(np.prod(IMAGE))
    count = SIZE_MB * 2**20 // nbytes
    with tempfile.NamedTemporaryFile(dir=os.environ.get("TMPDIR", "/tmp")) as f:
        rng = np.random.default_rng(0)
        for _ in range(count):
            f.write(rng.integers(0, 255, nbytes, dtype=np.uint8).tobytes())
        f.flush()
        with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
            pixels = np.frombuffer(m, dtype=np.uint8)
            out = np.empty(nbytes, dtype=np.uint8)
            best = 0.0
            for _ in range(5):  # the first pass faults the map in; the best pass is the copy rate
                start = time.perf_counter()
                for i in range(count):
                    np.copyto(out, pixels[i * nbytes : (i + 1) * nbytes])
                best = max(best, count * nbytes / (time.perf_counter() - start))
            del pixels
    print(f"image {nbytes / 2**20:.2f} MiB, {count} images mapped: {best / 1e9:.1f} GB/s one process")
    print(f"a mosaic sample's 4 reads: {4 * nbytes / best * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
