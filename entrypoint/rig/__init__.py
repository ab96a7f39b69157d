"""yolo-rig: the entrypoint of the YOLO training image."""

__version__ = "0.1.0"
