#!/bin/bash
# Two users on one shared runs folder (root's, 1777, as a cluster's /shared/runs): B (uid 2002) plants
# pickles that write a marker, owner files, links and folders of its own; A (uid 2001) plans and trains
# as a Slurm job would. Each of A's steps prints "STEP name rc=N" and its last log line; the marker
# must never appear. Run as root (RIG_USER=root), the shared folder at /workspace/runs.
set -u
as() { local uid=$1; shift; setpriv --reuid="$uid" --regid="$uid" --clear-groups env HOME=/tmp/home-"$uid" "$@"; }
mkdir -p /tmp/home-2001 /tmp/home-2002 && chown 2001:2001 /tmp/home-2001 && chown 2002:2002 /tmp/home-2002
runs=/workspace/runs
mkdir -p "$runs/detect" && chown root:root "$runs" "$runs/detect" && chmod 1777 "$runs" "$runs/detect"
as 2001 rig demo-data /tmp/demo --train 4 --val 2 --imgsz 32 >/dev/null 2>&1

# B: a pickle that, unpickled by anyone, writes /tmp/marker with that user's uid.
as 2002 python - <<'EOF'
import os, pathlib, torch
class Marker:
    def __reduce__(self):
        return (os.system, ("id -u >> /tmp/marker",))
d = pathlib.Path("/workspace/runs/detect")
for run, owner in (("train-slurm-4242", None), ("train-slurm-4243", "slurm-4243")):
    (d / run / "weights").mkdir(parents=True)
    if owner:
        (d / run / ".rig-owner").write_text(owner + "\n")
    torch.save({"epoch": 0, "train_args": {"epochs": 5}, "optimizer": {}, "x": Marker()}, d / run / "weights/last.pt")
for folder in (d / "bobs", pathlib.Path("/workspace/runs/alice")):
    folder.mkdir()
    os.chmod(folder, 0o777)
EOF

step() { local name=$1; shift; local out rc; out=$(as 2001 env "$@" 2>&1); rc=$?; echo "STEP $name rc=$rc ${out##*$'\n'}"; }
common="rig train data=/tmp/demo/data.yaml device=cpu epochs=1 imgsz=32 batch=2 workers=0 plots=False"
slurm="SLURM_JOB_ID=4242 SLURM_JOB_NUM_NODES=1"
fresh="model=yolo11n.yaml"
step dry-auto-4242 $slurm $common $fresh --dry-run resume=auto
step dry-auto-4243 SLURM_JOB_ID=4243 SLURM_JOB_NUM_NODES=1 $common $fresh --dry-run resume=auto
step dry-resume-true $common --dry-run resume=True
step dry-resume-theirs $common --dry-run resume=True model=$runs/detect/train-slurm-4243/weights/last.pt
step dry-exist-ok-theirs $common $fresh --dry-run name=bobs exist_ok=True
step dry-project-theirs $common $fresh --dry-run project=$runs/alice
step train-auto-4242 $slurm $common $fresh resume=auto
# B's link to A's earlier run, named for A's next job: never A's run folder.
as 2002 ln -s $runs/detect/train-slurm-4242-2 $runs/detect/train-slurm-4260
step dry-auto-4260 SLURM_JOB_ID=4260 SLURM_JOB_NUM_NODES=1 $common $fresh --dry-run resume=auto
echo "MODES $(stat -c '%n %a %u' $runs/detect/train-slurm-4242-2 $runs/detect/train-slurm-4242-2/weights/last.pt 2>&1 | tr '\n' ' ')"
echo "THEIRS $(find $runs/detect/train-slurm-4242 $runs/detect/bobs $runs/alice -newer /tmp/demo/data.yaml ! -user 2002 | tr '\n' ' ')"
echo "MARKER $(cat /tmp/marker 2>/dev/null | tr '\n' ' ')"
