# `rig yolo` train, val, predict and export on a tiny demo set, run with --network none.
set -euo pipefail
cd /workspace
rig demo-data /datasets/demo --train 16 --val 8 --imgsz 160
ARGS="imgsz=160 batch=8 workers=1 exist_ok=True"
rig yolo train model=yolo11n.yaml data=/datasets/demo/data.yaml epochs=1 name=off $ARGS
W=/workspace/runs/detect/off/weights/best.pt
test -f "$W"
grep -q '^cache: false' /workspace/runs/detect/off/args.yaml  # plain yolo: Ultralytics' default
rig yolo val model=$W data=/datasets/demo/data.yaml imgsz=160 batch=8 name=offval exist_ok=True
rig yolo predict model=$W source=/datasets/demo/images/val imgsz=160 name=offpred exist_ok=True
rig yolo export model=$W format=onnx imgsz=160
test -s /workspace/runs/detect/off/weights/best.onnx
echo ALL-STEPS-DONE
