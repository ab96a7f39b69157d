"""pi-heif's HEVC decoder is there (no HEVC encoder here to make a .heic from), and tracking's imports."""

import faster_coco_eval  # noqa: F401
import lap
import pi_heif
import shapely  # noqa: F401

assert "HEVC" in str(pi_heif.libheif_info()["decoders"]), pi_heif.libheif_info()
print("IMPORTS-OK", lap.__version__)
