"""Ultralytics, as the image ships it: the config overlay, launch-time tuning, offline checks,
ONNX export with its check, and the generated demo dataset."""
