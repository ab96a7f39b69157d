# A demo set moved to another path trains; an old yaml's path: naming another container is
# corrected where the yaml's own folder holds the set, and one line where it does not.
set -eo pipefail
rig demo-data /tmp/made --train 4 --val 2 --imgsz 64 >/dev/null
echo "PATH-LINES $(grep -c '^path:' /tmp/made/data.yaml || true)"
mv /tmp/made /tmp/moved
CPU="device=cpu imgsz=64 batch=4 workers=0 plots=False exist_ok=True"
rig train model=yolo11n.yaml data=/tmp/moved/data.yaml epochs=1 name=moved $CPU >/tmp/train.log 2>&1
echo TRAIN-OK
# A set written before demo-data stopped naming its folder: path: the container it was made in.
{ echo 'path: /datasets/made-elsewhere'; cat /tmp/moved/data.yaml; } >/tmp/moved/old.yaml
rig yolo val model=/workspace/runs/detect/moved/weights/best.pt data=/tmp/moved/old.yaml $CPU 2>&1 \
  | grep -E '^(INFO|WARNING|ERROR) ' | sed 's/^/VAL /'
mkdir /tmp/empty && cp /tmp/moved/old.yaml /tmp/empty/data.yaml
rc=0; rig train model=yolo11n.yaml data=/tmp/empty/data.yaml epochs=1 $CPU >/tmp/wrong.log 2>&1 || rc=$?
echo "WRONG-RC $rc"; sed 's/^/WRONG-LOG /' /tmp/wrong.log
