#!/bin/bash
# Two users on one shared runs folder (root's, 1777, as a cluster's /shared/runs): B (uid 2002) plants
# pickles that write a marker, owner files, links and folders of its own; A (uid 2001) plans and trains
# as a Slurm job would. Both are in group team (3000), whose share /workspace/runs/team is root:team
# 2775, as a site's team folders are. Each of A's steps prints "STEP name rc=N" and its last log line;
# the marker must never appear. Run as root (RIG_USER=root), the shared folder mounted at
# /workspace/runs (a tmpfs: a mount point, as a cluster's runs volume is).
set -u
groupadd -g 3000 team
as() { local uid=$1; shift; setpriv --reuid="$uid" --regid="$uid" --groups=3000 env HOME=/tmp/home-"$uid" "$@"; }
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
# Steps that stop at planning, as A, each "NAME [VAR=VALUE...] rig ARGS": one Python that imported
# rig's planning once forks a child per step to run rig's own main.
planned() {
  as 2001 python -I - "$@" <<'PLANNED'
import os, shlex, sys
from rig import cli
from rig.yolo import ultra
ultra.default("batch")  # rig's planning and Ultralytics imported once, before the forks
for case in sys.argv[1:]:
    name, _, line = case.partition(" ")
    words = shlex.split(line)
    first = next(i for i, w in enumerate(words) if w == "rig")
    env = dict(w.split("=", 1) for w in words[:first])
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.dup2(w, 1)
        os.dup2(w, 2)
        os.environ.update(env)
        os._exit(cli.main(words[first + 1 :]))
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read().decode(errors="replace").strip()
    _, status = os.waitpid(pid, 0)
    print(f"STEP {name} rc={os.waitstatus_to_exitcode(status)} {out.splitlines()[-1] if out else ''}", flush=True)
PLANNED
}
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

# ---- The team share (root:team 2775: group-writable, not sticky): B may rename anything in it.
team=$runs/team
mkdir -p $team && chown root:team $team && chmod 2775 $team
as 2001 mkdir -m 0755 $team/alice
t4300="SLURM_JOB_ID=4300 SLURM_JOB_NUM_NODES=1"
last=$team/alice/train-slurm-4300/weights/last.pt
tiny="rig train data=/tmp/demo/data.yaml device=cpu epochs=2 imgsz=32 batch=2 workers=0 plots=False model=/tests/tiny_detect.yaml"
# Without RIG_SHARE_GROUP the team's write access is refused, in one line.
planned "team-unshared $t4300 $tiny project=$team/alice --dry-run resume=auto"
# A's run there (RIG_SHARE_GROUP=team), stopped inside its first epoch: a checkpoint to resume.
(as 2001 env RIG_SHARE_GROUP=team $t4300 PYTHONPATH=/tests/slow_clock RIG_TEST_TRAIN_BATCH_S=0.5 RIG_CHECKPOINT_EVERY=1 \
  $tiny project=$team/alice resume=auto >/tmp/stopped.log 2>&1; echo "STEP team-stopped rc=$? $(tail -n 1 /tmp/stopped.log)") &
for _ in $(seq 1200); do grep -q 'INFO trainer: checkpoint: ' /tmp/stopped.log 2>/dev/null && break; sleep 0.1; done
pkill -TERM -u 2001 -f rig.launch.trainer
wait
# B's swap once A's process $2 runs (rig's trainer, or stock `yolo`): A's folder renamed away, B's own
# at its path, B's pickle at last.pt.
swap() {
  for _ in $(seq 1200); do pgrep -u 2001 -f "${2:-rig.launch.trainer}" >/dev/null && break; sleep 0.05; done
  as 2002 sh -c "mv $team/alice $team/alice-A && mkdir -m 0777 -p $team/alice/train-slurm-4300/weights \
    && chmod -R 0777 $team/alice && cp $runs/detect/train-slurm-4242/weights/last.pt $last && chmod 0666 $last"
  echo "SWAPPED $1 $(stat -c %u $last)"
}
swap resume-true & step team-resume-true RIG_SHARE_GROUP=team ${tiny% model=*} resume=True model=$last
wait
echo "RESUMED $(cut -d, -f1 $team/alice/train-slurm-4300/results.csv 2>/dev/null | tail -n +2 | tr -d ' ' | tr '\n' ' ')"
rm -rf $team/alice && mv $team/alice-A $team/alice  # A's stopped run back, as it was
# Stock `yolo train resume` through `rig yolo`, the same swap while `yolo` starts.
swap rig-yolo "bin/yolo train" & step team-rig-yolo RIG_SHARE_GROUP=team rig yolo train resume model=$last
wait
rm -rf $team/alice && mv $team/alice-A $team/alice
# The job requeued: resume=auto reads the state, copies the checkpoint; B swaps during the start.
swap resume-auto & step team-requeued RIG_SHARE_GROUP=team $t4300 SLURM_RESTART_COUNT=1 $tiny project=$team/alice resume=auto
wait
for _ in $(seq 50); do ls -d /tmp/rig-resume-* >/dev/null 2>&1 || break; sleep 0.1; done
echo "LEFT $(ls -d /tmp/rig-resume-* 2>/dev/null | tr '\n' ' ')"  # the private copies, removed at the end

# ---- A's run folder in B's 1777 folder: B, its owner, may rename A's folder away.
as 2002 sh -c "mkdir -m 1777 $runs/bobs-share && chmod 1777 $runs/bobs-share"
as 2001 mkdir -m 0700 $runs/bobs-share/alice
# ---- and one line each, in a dry run: RIG_SHARE_GROUP, and name= with controls and separators.
planned "bobs-sticky $tiny project=$runs/bobs-share/alice" \
  "group-² RIG_SHARE_GROUP=² $common $fresh --dry-run" \
  "group-99999999999999999999 RIG_SHARE_GROUP=99999999999999999999 $common $fresh --dry-run" \
  "group-4294967295 RIG_SHARE_GROUP=4294967295 $common $fresh --dry-run" \
  "name-c285 $common $fresh --dry-run name=a"$'\u0085'"b" \
  "name-e280a8 $common $fresh --dry-run name=a"$'\u2028'"b" \
  "name-e280ae $common $fresh --dry-run name=a"$'\u202e'"b"

# ---- A's own last.pt, 200 kB deflated: 100 M empty lists once unpickled (4 GiB container).
as 2001 python - <<'EOF2'
import os, pathlib, zipfile
run = pathlib.Path("/workspace/runs/detect/train-slurm-4400")
(run / "weights").mkdir(parents=True, mode=0o700)
os.chmod(run, 0o700)
(run / ".rig-owner").write_text("slurm-4400\n")
with zipfile.ZipFile(run / "weights/last.pt", "w", zipfile.ZIP_DEFLATED) as z, z.open("a/data.pkl", "w") as f:
    f.write(b"\x80\x02](")
    for _ in range(100):
        f.write(b"]" * 1_000_000)
    f.write(b"e.")
print("BOMB", os.path.getsize(run / "weights/last.pt"))
EOF2
planned "bomb SLURM_JOB_ID=4400 SLURM_JOB_NUM_NODES=1 $common $fresh --dry-run resume=auto"
echo "MARKER $(cat /tmp/marker 2>/dev/null | tr '\n' ' ')"
