"""rig's trainer types its key=value arguments as Ultralytics' smart_value does."""

from rig.launch.trainer import parse_args

argv = ["epochs=3", "lr0=0.5", "resume=True", "name=2024", "cache=none", "device=0", "imgsz=[640,480]"]
got = parse_args(argv)
want = dict(epochs=3, lr0=0.5, resume=True, name="2024", cache=None, device="0", imgsz=[640, 480])
assert got == want, got
print("OK")
