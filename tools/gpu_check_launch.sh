#!/usr/bin/env bash
# GPU check for the launch area, unattended, about 5 minutes on one NVIDIA GPU.
# Needs: the NVIDIA driver (nvidia-smi), python3 with torch (a newer one than the image's will do).
# Ultralytics 8.4.190 is installed from the wheels in $WHEELS (default .whl/) when it is not
# importable; fetch them beforehand on a machine with network:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl \
#     ultralytics-opencv-headless==8.4.190 ultralytics-thop ultralytics-platform polars polars-runtime-32
# No Docker, no network. Run from the repository root:   OUT=/tmp/out tools/gpu_check_launch.sh
# Writes under $OUT: topo.txt, gpus.csv, plan.json, plan.txt, discovery.json, launch.log,
# train.log, gpus02.log, stop.log, stop2.log, term.log, term2.log, stuck.log, batch.txt, syncbn.log,
# summary.txt.
# Exit 0 when every check that ran passed.
# On one GPU: 1-3 (discovery, one rank's binding and NCCL, a training run), 5 (Ctrl-C keeps the
# epoch and exits 130; a second Ctrl-C ends the ranks at once, none left behind), 5b (TERM to a run
# with 4 loader workers: exit 143, saved inside the epoch, resume continues at that batch), 7 (no batch added
# for one rank), 8 (SyncBatchNorm's graph breaks under torch.compile, on a fake two-rank group).
# Needs two GPUs, skipped with the reason on one: 4 (each rank exactly its GPU, --gpus 0,LAST),
# 6 (a stuck rank ends the job within RIG_NCCL_TIMEOUT), 7's batch for a world of several GPUs.
set -uo pipefail

OUT=${OUT:?set OUT to a directory for the results}
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
# STACK (cu121, the default, or cu128): the yolo-rig stack this machine's torch stands in for.
# rig reads it as RIG_STACK (rig doctor's driver minimum and kernel table); the lock's versions for it
# are logged beside the torch installed here.
export RIG_STACK=${STACK:-cu121}
export PYTHONPATH="$REPO/entrypoint${PYTHONPATH:+:$PYTHONPATH}"
export YOLO_OFFLINE=1 PYTHONUNBUFFERED=1
mkdir -p "$OUT"
WHEELS=${WHEELS:-.whl}
WORK=$(mktemp -d /tmp/rig-gpu-launch.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
if ! "$PY" -c 'import ultralytics' 2>/dev/null && compgen -G "$REPO/$WHEELS/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$REPO/$WHEELS"/*.whl \
        && export PYTHONPATH="$PYTHONPATH:$WORK/site"
fi
export YOLO_CONFIG_DIR="$WORK/cfg"
: >"$OUT/summary.txt"
status=0

result() { # name pass|fail|skip detail
    echo "$1: $2 ${3:-}" | tee -a "$OUT/summary.txt"
    [ "$2" = fail ] && status=1
    return 0
}

nvidia-smi topo -m >"$OUT/topo.txt" 2>&1
echo "stack $RIG_STACK, lock:" $(python3 "$REPO/tools/lock_versions.py" "$REPO/uv.lock" "$RIG_STACK") >>"$OUT/topo.txt"
nvidia-smi --query-gpu=index,pci.bus_id,uuid,name --format=csv,noheader >"$OUT/gpus.csv" 2>&1
timeout 60 "$PY" -m rig plan --json >"$OUT/plan.json" 2>"$OUT/plan.err" || result plan fail "$(tail -1 "$OUT/plan.err")"
timeout 60 "$PY" -m rig plan >"$OUT/plan.txt" 2>&1

# 1. Discovery against nvidia-smi: same GPUs in the same order, NUMA node and CPUs as topo -m says.
timeout 60 "$PY" - "$OUT" <<'EOF' && result discovery pass || result discovery fail "see discovery.json"
import json, re, sys
from pathlib import Path
from rig.hardware.topology import normalize_bus_id, parse_cpulist, read_topology

out = Path(sys.argv[1])
smi = [line.split(", ") for line in (out / "gpus.csv").read_text().splitlines() if line.strip()]
topo = read_topology()
report = {"source": topo.source, "gpus": [], "problems": []}
if [normalize_bus_id(r[1]) for r in smi] != [g.bus_id for g in topo.gpus]:
    report["problems"].append("GPU list or order differs from nvidia-smi")
# topo -m rows: GPU0 ... <CPU Affinity> <NUMA Affinity> [<GPU NUMA ID>]
header = next((l for l in (out / "topo.txt").read_text().splitlines() if "CPU Affinity" in l), "")
cols = re.split(r"\t+", header.strip())
for line in (out / "topo.txt").read_text().splitlines():
    m = re.match(r"^GPU(\d+)\t", line)
    if not m:
        continue
    fields = re.split(r"\t+", line.strip())
    row = dict(zip(["name", *cols], fields))
    i = int(m.group(1))
    gpu = topo.gpus[i] if i < len(topo.gpus) else None
    entry = {"gpu": i, "smi_cpus": row.get("CPU Affinity"), "smi_numa": row.get("NUMA Affinity"),
             "rig_cpus": sorted(gpu.local_cpus) if gpu else None, "rig_numa": gpu.numa_node if gpu else None}
    report["gpus"].append(entry)
    if gpu is None:
        report["problems"].append(f"GPU{i} missing from rig's topology")
        continue
    numa = row.get("NUMA Affinity", "N/A")
    # A VM with one NUMA node may give the GPU no node in /sys (-1) where nvidia-smi says 0.
    online = Path("/sys/devices/system/node/online")
    one_node = not online.exists() or online.read_text().strip() in ("", "0")
    if numa.isdigit() and int(numa) != gpu.numa_node and not (gpu.numa_node == -1 and one_node):
        report["problems"].append(f"GPU{i}: NUMA {gpu.numa_node} vs nvidia-smi {numa}")
    cpus = row.get("CPU Affinity", "N/A")
    if re.fullmatch(r"[0-9,\-]+", cpus or "") and parse_cpulist(cpus) != gpu.local_cpus:
        report["problems"].append(f"GPU{i}: CPUs {sorted(gpu.local_cpus)} vs nvidia-smi {cpus}")
(out / "discovery.json").write_text(json.dumps(report, indent=2))
sys.exit(1 if report["problems"] else 0)
EOF

# 2. One rank through torchrun and the binder: affinity, memory policy, a CUDA all-reduce.
cat >"$OUT/probe.py" <<'EOF'
import ctypes, json, os
import torch, torch.distributed as dist
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
t = torch.ones(1, device="cuda") * (dist.get_rank() + 1)
dist.all_reduce(t)
libc = ctypes.CDLL(None, use_errno=True)
mode, mask = ctypes.c_int(-1), (ctypes.c_ulong * 16)()
rc = libc.syscall(239, ctypes.byref(mode), mask, ctypes.c_ulong(16 * 64), None, ctypes.c_ulong(0))
os.write(1, ("PROBE " + json.dumps({"affinity": sorted(os.sched_getaffinity(0)), "sum": t.item(),
      "mempolicy": [mode.value, mask[0]] if rc == 0 else None, "RIG_CPUS": os.environ.get("RIG_CPUS"),
      "gpu": torch.cuda.get_device_name()}) + "\n").encode())
dist.destroy_process_group()
EOF
if timeout 180 "$PY" -m rig launch --gpus 1 -- "$PY" "$OUT/probe.py" >"$OUT/launch.log" 2>&1 \
    && grep -q '^PROBE ' "$OUT/launch.log"; then
    result launch pass "$(grep '^PROBE ' "$OUT/launch.log" | head -1)"
else
    result launch fail "see launch.log"
fi

# 3. A short single-rank training run through `rig train` (torchrun + binder + trainer).
if "$PY" -c "import ultralytics" 2>/dev/null; then
    timeout 120 "$PY" -m rig demo-data "$OUT/demo" --train 64 --val 16 --imgsz 320 >"$OUT/train.log" 2>&1
    if timeout 300 "$PY" -m rig train --gpus 1 data="$OUT/demo/data.yaml" model=yolo11n.yaml epochs=2 \
        imgsz=320 batch=16 project="$OUT/runs" name=check plots=False >>"$OUT/train.log" 2>&1 \
        && [ -f "$OUT/runs/check/weights/last.pt" ]; then
        result train pass "$OUT/runs/check"
    else
        result train fail "see train.log"
    fi
else
    result train skip "ultralytics is not installed here"
fi
ngpu=$(grep -c . "$OUT/gpus.csv" || true)

# 4. Each rank exactly its GPU: `rig launch --gpus 0,LAST` runs rank 1 on the last GPU (its bus id).
cat >"$OUT/which.py" <<'EOF'
import json, os, subprocess
visible = os.environ["CUDA_VISIBLE_DEVICES"].split(",")
mine = visible[int(os.environ["RIG_CUDA_DEVICE"])]
bus = subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader", "-i", mine],
                     capture_output=True, text=True).stdout.strip()
os.write(1, ("WHICH " + json.dumps({"rank": os.environ["LOCAL_RANK"], "bus": bus,
      "expected": os.environ.get("RIG_GPU_BUS_ID"), "visible": visible}) + "\n").encode())
EOF
cat >"$OUT/which_check.py" <<'EOF'
import json, sys
from rig.hardware.topology import normalize_bus_id
rows = [json.loads(l[6:]) for l in open(sys.argv[1]) if l.startswith("WHICH ")]
sys.exit(0 if len(rows) == 2 and all(normalize_bus_id(r["bus"]) == r["expected"] for r in rows) else 1)
EOF
if [ "$ngpu" -ge 2 ]; then
    last=$((ngpu - 1))
    timeout 180 "$PY" -m rig launch --gpus "0,$last" -- "$PY" "$OUT/which.py" >"$OUT/gpus02.log" 2>&1
    if timeout 30 "$PY" "$OUT/which_check.py" "$OUT/gpus02.log"; then
        result gpu-per-rank pass
    else
        result gpu-per-rank fail "see gpus02.log"
    fi
else
    result gpu-per-rank skip "one GPU: --gpus 0,N needs two"
fi

# 5. Ctrl-C under torchrun keeps the epoch and exits 128+2; a second Ctrl-C ends every rank at once.
# The ranks: processes running the trainer whose parent is not a trainer (its loader workers are).
ranks() {
    ps -eo pid=,ppid=,args= | awk '/-m rig\.launch\.trainer( |$)/ && !/rig\.launch\.(torchrun|binder)/ {p[$1] = $2}
        END {for (k in p) if (!(p[k] in p)) print k}'
}
torchrun_pid() { pgrep -f -- "-m rig.launch.torchrun .*name=$1( |$)" | head -1; }
start_run() { # name
    ( "$PY" -m rig train --gpus 1 data="$OUT/demo/data.yaml" model=yolo11n.yaml epochs=50 imgsz=320 \
        batch=8 project="$OUT/runs" name="$1" plots=False >"$OUT/$1.log" 2>&1; echo $? >"$OUT/$1.rc" ) &
    for _ in $(seq 1 180); do grep -q "Starting training for" "$OUT/$1.log" 2>/dev/null && break; sleep 1; done
    sleep 5
}
if "$PY" -c "import ultralytics" 2>/dev/null; then
    start_run stop
    kill -INT "$(torchrun_pid stop)" 2>/dev/null
    for _ in $(seq 1 150); do [ -s "$OUT/stop.rc" ] && break; sleep 1; done
    rc=$(cat "$OUT/stop.rc" 2>/dev/null)
    if [ "$rc" = 130 ] && grep -q "stopped by signal 2" "$OUT/stop.log" && [ -f "$OUT/runs/stop/weights/last.pt" ] \
        && ! grep -q "Traceback" "$OUT/stop.log"; then
        result stop-keeps-epoch pass "rc $rc, last.pt kept"
    else
        result stop-keeps-epoch fail "rc ${rc:-none} (want 130); see stop.log"
    fi
    start_run stop2
    pids=$(ranks | tr '\n' ' ')
    t0=$(date +%s)
    kill -INT "$(torchrun_pid stop2)" 2>/dev/null
    sleep 1
    kill -INT "$(torchrun_pid stop2)" 2>/dev/null
    for _ in $(seq 1 120); do [ -s "$OUT/stop2.rc" ] && break; sleep 1; done
    took=$(($(date +%s) - t0))
    left=$(for p in $pids; do kill -0 "$p" 2>/dev/null && echo "$p"; done | tr '\n' ' ')
    rc=$(cat "$OUT/stop2.rc" 2>/dev/null)
    if [ -n "$rc" ] && [ "$rc" != 0 ] && [ "$took" -le 30 ] && [ -z "$left" ] && [ -n "$pids" ]; then
        result second-ctrl-c pass "rc $rc after ${took} s, ranks $pids gone"
    else
        result second-ctrl-c fail "rc ${rc:-none} after ${took} s, ranks '${pids}' left '${left}'; see stop2.log"
    fi
else
    result stop-keeps-epoch skip "ultralytics is not installed here (put its wheels in $WHEELS)"
fi

# 5b. TERM with loader workers (what docker stop, Kubernetes and scancel --signal=TERM send): torchrun
# forwards it to the rank's whole process group, its 4 workers included. They outlive it; the rank
# saves at a batch boundary inside the epoch and exits 143; resume=True continues at that batch.
if "$PY" -c "import ultralytics" 2>/dev/null; then
    ( "$PY" -m rig train --gpus 1 data="$OUT/demo/data.yaml" model=yolo11n.yaml epochs=50 imgsz=320 \
        batch=8 workers=4 project="$OUT/runs" name=term plots=False >"$OUT/term.log" 2>&1; echo $? >"$OUT/term.rc" ) &
    for _ in $(seq 1 180); do grep -q "Starting training for" "$OUT/term.log" 2>/dev/null && break; sleep 1; done
    sleep 8
    workers=$(for r in $(ranks); do pgrep -P "$r"; done | wc -l)
    kill -TERM "$(torchrun_pid term)" 2>/dev/null
    for _ in $(seq 1 150); do [ -s "$OUT/term.rc" ] && break; sleep 1; done
    rc=$(cat "$OUT/term.rc" 2>/dev/null)
    # "epoch 3/50 at batch 5/8", or "epoch 3/50 trained, its validation next" (it came while validating)
    where=$(sed -n 's/^INFO trainer: stop: .* continues at \(epoch .*\) ([0-9.]* s)$/\1/p' "$OUT/term.log" | tail -1)
    if [ "$rc" = 143 ] && [ -n "$where" ] && [ "$workers" -ge 4 ] && ! grep -q "DataLoader worker\|Traceback" "$OUT/term.log"; then
        result term-with-workers pass "rc 143 with $workers loader workers; $where"
    else
        result term-with-workers fail "rc ${rc:-none} (want 143), workers ${workers}, '${where}'; see term.log"
    fi
    ( "$PY" -m rig train --gpus 1 resume=True model="$OUT/runs/term/weights/last.pt" >"$OUT/term2.log" 2>&1; echo $? >"$OUT/term2.rc" ) &
    for _ in $(seq 1 180); do grep -q "Starting training for" "$OUT/term2.log" 2>/dev/null && break; sleep 1; done
    kill -INT "$(pgrep -f -- "-m rig.launch.torchrun .*resume=True" | head -1)" 2>/dev/null
    for _ in $(seq 1 150); do [ -s "$OUT/term2.rc" ] && break; sleep 1; done
    if grep -qF "resuming $OUT/runs/term/weights/last.pt: ${where}" "$OUT/term2.log" \
        && [ "$(cat "$OUT/term2.rc" 2>/dev/null)" = 130 ]; then
        result resume-mid-epoch pass "continued at ${where}"
    else
        result resume-mid-epoch fail "no 'resuming ...: ${where}' (or rc not 130); see term2.log"
    fi
else
    result term-with-workers skip "ultralytics is not installed here (put its wheels in $WHEELS)"
fi

# 6. A stuck rank ends the job within RIG_NCCL_TIMEOUT: one rank is frozen (SIGSTOP) mid-training.
if [ "$ngpu" -ge 2 ] && "$PY" -c "import ultralytics" 2>/dev/null; then
    start=$(date +%s)
    ( RIG_NCCL_TIMEOUT=60 timeout 400 "$PY" -m rig train --gpus 2 data="$OUT/demo/data.yaml" \
        model=yolo11n.yaml epochs=50 imgsz=320 project="$OUT/runs" name=stuck plots=False \
        >"$OUT/stuck.log" 2>&1; echo $? >"$OUT/stuck.rc" ) &
    for _ in $(seq 1 120); do grep -q "Starting training for" "$OUT/stuck.log" 2>/dev/null && break; sleep 1; done
    sleep 5
    ranks | tail -1 | xargs -r kill -STOP
    for _ in $(seq 1 300); do [ -s "$OUT/stuck.rc" ] && break; sleep 1; done
    took=$(($(date +%s) - start))
    if [ "$(cat "$OUT/stuck.rc" 2>/dev/null)" != 0 ] && [ "$took" -lt 300 ]; then
        result stuck-rank pass "job ended after ${took} s (RIG_NCCL_TIMEOUT=60)"
    else
        result stuck-rank fail "ended after ${took} s, rc $(cat "$OUT/stuck.rc" 2>/dev/null); see stuck.log"
    fi
    ranks | xargs -r kill -KILL 2>/dev/null || true
else
    result stuck-rank skip "needs two GPUs and ultralytics"
fi

# 7. The batch for the world size: without batch=, 16 per GPU times the GPUs; one GPU adds none
# (Ultralytics' own default, 16, is the batch of its one rank).
timeout 60 "$PY" -m rig train --gpus "$ngpu" --dry-run data=x.yaml model=yolo11n.yaml >"$OUT/batch.txt" 2>&1
if [ "$ngpu" -ge 2 ] && grep -q "batch=$((16 * ngpu))" "$OUT/batch.txt"; then
    result batch-for-world pass "batch=$((16 * ngpu)) on $ngpu GPU(s)"
elif [ "$ngpu" = 1 ] && grep -q "rig.launch.trainer" "$OUT/batch.txt" && ! grep -q " batch=" "$OUT/batch.txt"; then
    result batch-for-world pass "one GPU: no batch added (Ultralytics' 16); the world's batch needs two GPUs"
else
    result batch-for-world fail "see batch.txt"
fi

# 8. sync_bn with compile: how many graph breaks SyncBatchNorm costs dynamo with this torch (a fake
# two-rank process group on this one GPU: the breaks are dynamo's, the collectives do nothing).
timeout 240 "$PY" "$REPO/tools/gpu_check_syncbn_compile.py" >"$OUT/syncbn.log" 2>&1
case $? in
    0) result syncbn-compile pass "$(grep '^SYNCBN ' "$OUT/syncbn.log" | tr '\n' ' ')" ;;
    2) result syncbn-compile skip "$(grep '^SYNCBN not measured' "$OUT/syncbn.log" | head -c 300)" ;;
    *) result syncbn-compile fail "fewer breaks than SyncBatchNorm layers, or it crashed: see syncbn.log" ;;
esac
exit "$status"
