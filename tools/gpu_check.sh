#!/usr/bin/env bash
# shellcheck disable=SC2329  # the parts are called by name: "part_$2"
# The GPU check: one call on a lent one-GPU box measures every speed claim, unattended, within 8 minutes.
#
#   OUT=/some/dir tools/gpu_check.sh            # every part
#   OUT=/some/dir tools/gpu_check.sh --again    # only the parts the first call's notes say failed or were cut
#
# Runs outside Docker from the repository root with a bare Python (torch and the box's packages), no
# network: what rig needs beyond the box's packages comes from the wheels in $WHEELS (default .whl/,
# `make gpu-wheels` fetches them), installed with --no-index. GPU_CHECK_SIZE=tiny runs the same parts
# on the CPU at toy sizes (`make gpu-rehearsal`: the box less its GPU, in a container of the image).
#
# The parts, the most wanted first, YOLO11n and YOLO26n at 640 px with loader workers, YOLO26n with
# MuSGD as its recipe names it (BUDGET: each part's share; a part records each result as it has it):
#   env      nvidia-smi, torch and driver (gpu.txt); rig doctor; the batch `rig train --dry-run` adds,
#            for each model;
#   runs     for each model, rig train without batch= against stock `yolo train` (Ultralytics' default
#            recipe) on the same 1280x720 frames: img/s over the steps after the first epoch, NVML's busy
#            share, peak memory (torch and NVML), the batch rig chose and why; the targets;
#   tail     the device tail on the device: ms/image of colour+layout and with mosaic+warp at rig's
#            batch; the warp's equality with OpenCV (share of values off by >0 and >1 level), affine and
#            perspective;
#   levers   rig bench's step with each lever on against off (channels_last, fused optimizer; CUDA
#            graphs, which compile for minutes, on YOLO11n alone), Ultralytics' amp=bf16 against fp16
#            where the GPU has native bfloat16, the first 50 steps' losses of each, the optimizer step's
#            share of the step; YOLO26n first;
#   planner  the batch planner's predicted memory against the measured peak: YOLO11n/26n at 640 and
#            1280, YOLO11s/26s at 640, YOLO11n with multi_scale=0.5 at its largest size;
#   resume   a stop during validation (YOLO11n) and a stop inside an epoch with loader workers
#            (YOLO26n, MuSGD), TERM as docker stop, the kubelet and scancel send it, each resumed with
#            resume=auto to the run's end.
# Under $OUT, each appended as it is measured (a kill at any moment keeps what was measured):
#   summary.txt   one line per result;   results.jsonl   the same as JSON, with every figure;
#   notes.txt     each part's start and end (ok, failed, cut), which --again reads;
#   log.txt       every command's output;   gpu.txt   the machine: nvidia-smi, torch, driver, date.
# Exit 0 only when every part ran and passed; 1 otherwise (notes.txt and summary.txt say which).
set -uo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO" || exit 1
OUT=${OUT:?set OUT to a folder for the results}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
SIZE=${GPU_CHECK_SIZE:-full}
WORK=${GPU_CHECK_WORK:-/tmp/rig-gpu-check} # kept between calls: --again reuses its data
PARTS=(env runs tail levers planner resume)
# The budget, in one place: the whole call, each part's share (a part is cut at its share or at what
# is left of the whole, whichever comes first; a cut part fails).
BUDGET=480
AGAIN_BUDGET=240
# Not yet timed on a GPU since YOLO26n joined (runs and levers measure two models; the shares were
# 25/120/30/170/35/90 for YOLO11n alone): the tail now times one batch, CUDA graphs compile for YOLO11n
# alone, the planner dropped YOLO11s at 1280 px; a part cut at its share is what --again reruns.
declare -A SHARE=([env]=20 [runs]=160 [tail]=20 [levers]=170 [planner]=35 [resume]=65)
SLOW=1 # the rehearsal's toy sizes on a shared 2-core CPU: each share and the whole times SLOW

log() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$OUT/summary.txt"; }
note() { echo "$(date -u +%s) $*" >>"$OUT/notes.txt"; }

# ---------------------------------------------------------------------------------------------
# The sizes: the box's, or toy ones for the CPU rehearsal.
# MODEL_OF: each model the check trains, by the name its results carry; RECIPE_OF: what its recipe
# names beyond Ultralytics' defaults (YOLO26's: MuSGD), for rig train and yolo train, BENCH_RECIPE_OF the
# same for rig bench; LEVERS_OF: what its bench measures beside eager (all: every lever and amp=bf16).
MODELS=(yolo11n yolo26n)
declare -A RECIPE_OF=([yolo11n]="" [yolo26n]="optimizer=MuSGD")
declare -A BENCH_RECIPE_OF=([yolo11n]="" [yolo26n]="--optimizer MuSGD")
if [ "$SIZE" = tiny ]; then
    declare -A MODEL_OF=([yolo11n]=tests/scripts/tiny_detect.yaml [yolo26n]=tests/scripts/tiny_detect26.yaml)
    declare -A LEVERS_OF=([yolo11n]=all [yolo26n]=all)
    IMGSZ=64 W=64 H=64 PER=8 EPOCHS=2 DEV=cpu
    DEVICE=(device=cpu) BENCH=(--device cpu --equal-steps 3 --quick) WARP_REPEATS=1
    TAILS=("2 64") PLAN_STEPS=1 PLAN_BATCH=2
    CASES=(yolo11n:32 yolo26n:32 yolo26s:32 yolo11n:64:0.5) # one of each kind the box measures: seconds each
    R_DATA=(--train 12 --val 8 --imgsz 64) R_ARGS=(imgsz=64 batch=2 workers=2 epochs=1)
    R_TRAIN_S=0.3 R_VAL_S=2 SLOW=3
else
    declare -A MODEL_OF=([yolo11n]=yolo11n.yaml [yolo26n]=yolo26n.yaml)
    # CUDA graphs compile for minutes before their first step: within the budget, for YOLO11n alone.
    declare -A LEVERS_OF=([yolo11n]=all [yolo26n]=channels_last,fused_optimizer,bf16)
    IMGSZ=640 W=1280 H=720 PER=256 EPOCHS=3 DEV=cuda:0
    DEVICE=() BENCH=(--quick) WARP_REPEATS=4
    TAILS=("64 640") PLAN_STEPS=3 PLAN_BATCH=auto
    CASES=(yolo11n:640 yolo26n:640 yolo11n:1280 yolo26n:1280 yolo11s:640 yolo26s:640 yolo11n:640:0.5)
    R_DATA=(--train 64 --val 32 --imgsz 320) R_ARGS=(imgsz=320 batch=8 workers=4 epochs=3)
    R_TRAIN_S=0.3 R_VAL_S=2
fi
IMAGES=$((4 * PER))
DATA=$WORK/data/data.yaml

# ---------------------------------------------------------------------------------------------
# The parts. Each runs in its own call of this script (--part NAME) under `timeout`, output to log.txt.

frames() { # the runs' and levers' frames: four folders generated at once, one data yaml over them
    [ -f "$DATA" ] && return 0
    for i in 1 2 3 4; do
        "$PY" -m rig demo-data "$WORK/data/p$i" --train "$PER" --val 4 --imgsz "$W" --height "$H" >/dev/null &
    done
    wait
    {
        echo "path: $WORK/data"
        echo "train: [p1/images/train, p2/images/train, p3/images/train, p4/images/train]"
        echo "val: p1/images/val"
        sed -n '/^names:/,$p' "$WORK/data/p1/data.yaml"
    } >"$DATA.tmp" && mv "$DATA.tmp" "$DATA"
}

part_env() {
    {
        date -u +"date %Y-%m-%dT%H:%M:%SZ"
        nvidia-smi || echo "nvidia-smi: none here"
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
        echo "cpus $(nproc)"
        free -g
        "$PY" -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])'
    } >>"$OUT/gpu.txt" 2>&1
    # Doctor and the dry runs at once: each is mostly a Python start-up.
    "$PY" -m rig doctor --json >"$WORK/doctor.json" 2>>"$OUT/gpu.txt" &
    local doctor=$! m dryruns=() pids=() i r=0
    # The batch rig adds without batch=: from the GPU's memory on a GPU (one GPU too), none on the CPU.
    for m in "${MODELS[@]}"; do
        dryruns+=("$m=$WORK/dryrun-$m.txt")
        "$PY" -m rig train --dry-run "${DEVICE[@]}" data=x.yaml model="$m.yaml" >"$WORK/dryrun-$m.txt" 2>&1 &
        pids+=($!)
    done
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || { tail -n 3 "$WORK/dryrun-${MODELS[$i]}.txt"; r=1; }
    done
    wait "$doctor"
    [ $? -le 1 ] || return 1 # 1: a check failed, which its line says; more: it crashed
    [ "$r" -eq 0 ] || return 1
    "$PY" tools/gpu_check.py env "$OUT" "$WORK/doctor.json" "$DEV" "${dryruns[@]}"
}

run_pair() { # MODEL: rig train without batch= against stock yolo train, then their figures
    local m=$1 recipe
    read -r -a recipe <<<"${RECIPE_OF[$1]}"
    local common=(data="$DATA" epochs="$EPOCHS" imgsz="$IMGSZ" val=False plots=False close_mosaic=0 exist_ok=True
        project="$WORK/runs" "${recipe[@]}" "${DEVICE[@]}")
    rm -rf "$WORK/runs/ours-$m" "$WORK/runs/stock-$m"
    PYTHONPATH="$REPO/tools/gpu_check_site:$PYTHONPATH" "$PY" -m rig train model="${MODEL_OF[$m]}" name="ours-$m" \
        "${common[@]}" 2>&1 | tee "$WORK/ours-$m.log" || return 1
    PYTHONPATH="$REPO/tools/gpu_check_site:$PYTHONPATH" "$PY" tools/gpu_check.py stock-train model="${MODEL_OF[$m]}" \
        name="stock-$m" "${common[@]}" 2>&1 | tee "$WORK/stock-$m.log" || return 1
    "$PY" tools/gpu_check.py runs "$OUT" "$WORK" "$IMAGES" "$m" "${MODEL_OF[$m]}" "${recipe[*]}"
}

part_runs() {
    frames || return 1
    local m r=0
    for m in "${MODELS[@]}"; do run_pair "$m" || r=1; done
    return "$r"
}

part_tail() {
    local probe=(tests/scripts/device_augment_probe.py) t
    {
        "$PY" "${probe[@]}" warp "$DEV" torch "$WARP_REPEATS" || return 1
        for t in "${TAILS[@]}"; do
            # shellcheck disable=SC2086  # "BATCH IMGSZ": two words
            "$PY" "${probe[@]}" tail "$DEV" $t || return 1
        done
    } | tee "$WORK/tail.log"
    "$PY" tools/gpu_check.py tail "$OUT" "$WORK/tail.log"
}

part_levers() { # YOLO26n first: its bench compiles nothing
    frames || return 1
    local m r=0 levers recipe
    for m in yolo26n yolo11n; do
        levers=()
        [ "${LEVERS_OF[$m]}" = all ] || levers=(--levers "${LEVERS_OF[$m]}")
        read -r -a recipe <<<"${BENCH_RECIPE_OF[$m]}"
        "$PY" -m rig bench --model "${MODEL_OF[$m]}" --imgsz "$IMGSZ" --parts step --data "$DATA" "${BENCH[@]}" \
            "${levers[@]}" "${recipe[@]}" --json "$WORK/bench-$m.json" || { r=1; continue; }
        "$PY" tools/gpu_check.py levers "$OUT" "$WORK/bench-$m.json" "$m" "${LEVERS_OF[$m]}" || r=1
    done
    return "$r"
}

part_planner() {
    "$PY" tools/gpu_check.py planner "$OUT" "$DEV" "$PLAN_STEPS" "$PLAN_BATCH" "${CASES[@]}"
}

stop_and_resume() { # name model slow-clock-setting wait-pattern where: TERM once the pattern is in the log, then resume=auto
    local name=$1 slow=$3 pattern=$4 want=$5 recipe
    read -r -a recipe <<<"${RECIPE_OF[$2]}"
    local run=("$PY" -m rig train data="$WORK/stops/data.yaml" model="${MODEL_OF[$2]}" "${R_ARGS[@]}" "${recipe[@]}"
        plots=False project="$WORK/runs" name="$1" resume=auto "${DEVICE[@]}")
    rm -rf "${WORK:?}/runs/$name"
    env PYTHONPATH="$REPO/tests/scripts/slow_clock:$PYTHONPATH" "$slow" "${run[@]}" >"$WORK/$name.log" 2>&1 &
    local pid=$! i
    for i in $(seq 1 600); do grep -q -- "$pattern" "$WORK/$name.log" && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    sleep 0.5 # inside the validation pass (each batch slowed by the clock) or a few batches into the epoch
    kill -TERM "$pid" 2>/dev/null
    wait "$pid"
    local rc=$?
    cat "$WORK/$name.log"
    "${run[@]}" >"$WORK/$name-resumed.log" 2>&1
    local rc2=$?
    cat "$WORK/$name-resumed.log"
    "$PY" tools/gpu_check.py stop "$OUT" "$name" "$rc" "$want" "$rc2" "$WORK/$name.log" "$WORK/$name-resumed.log" "$2"
}

part_resume() {
    [ -f "$WORK/stops/data.yaml" ] || "$PY" -m rig demo-data "$WORK/stops" "${R_DATA[@]}" >/dev/null || return 1
    local r=0
    stop_and_resume val-stop yolo11n "RIG_TEST_VAL_BATCH_S=$R_VAL_S" "mAP50-95" "its validation next" || r=1
    stop_and_resume epoch-stop yolo26n "RIG_TEST_TRAIN_BATCH_S=$R_TRAIN_S" "loader workers for training" " at batch " || r=1
    return "$r"
}

if [ "${1:-}" = --part ]; then
    "part_$2"
    exit
fi

# ---------------------------------------------------------------------------------------------
# The preamble: the carried wheels, the import check, Ultralytics' settings in the work folder.
mkdir -p "$WORK"
export PYTHONPATH="$REPO/entrypoint:$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export YOLO_OFFLINE=true YOLO_AUTOINSTALL=false YOLO_CONFIG_DIR="$WORK/cfg" RIG_CONFIGS_DIR="$REPO/configs" \
    RIG_CACHE_DIR="$WORK/cache" RIG_STACK=${STACK:-cu121} RIG_TELEMETRY_INTERVAL=0.25 \
    TORCHINDUCTOR_CACHE_DIR="$WORK/cache/inductor" TRITON_CACHE_DIR="$WORK/cache/triton"
if compgen -G "$WHEELS/*.whl" >/dev/null; then
    # Installed once into the work folder; a later call (--again) with the same wheels reuses them.
    carried=$(cd "$WHEELS" && ls -l -- *.whl)
    if [ "$carried" != "$(cat "$WORK/site/.carried" 2>/dev/null)" ]; then
        rm -rf "$WORK/site"
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" \
            "$WHEELS"/*.whl >>"$OUT/log.txt" 2>&1 || { log "ERROR gpu_check: the wheels in $WHEELS do not install (log.txt)"; exit 1; }
        echo "$carried" >"$WORK/site/.carried"
    fi
    export PYTHONPATH="$PYTHONPATH:$WORK/site"
fi
# Every module the parts need imports (else one line naming the wheel to carry); Ultralytics' settings
# then point at the work folder.
if ! "$PY" tools/gpu_check.py imports "$WORK" >>"$OUT/log.txt" 2>"$WORK/imports.err"; then
    cat "$WORK/imports.err" >>"$OUT/log.txt"
    log "$(tail -n 1 "$WORK/imports.err")"
    note "preamble failed"
    exit 1
fi

# ---------------------------------------------------------------------------------------------
# Which parts, and the budget.
deadline=$((BUDGET * SLOW))
todo=("${PARTS[@]}")
if [ "${1:-}" = --again ]; then
    deadline=$((AGAIN_BUDGET * SLOW))
    read -r -a todo < <("$PY" tools/gpu_check.py again "$OUT/notes.txt" "${PARTS[@]}")
    log "again: ${todo[*]:-nothing to rerun}"
fi
models=$(for m in "${MODELS[@]}"; do printf '%s=%s ' "$m" "${MODEL_OF[$m]}"; done)
log "gpu_check ($SIZE): parts ${todo[*]:-none}; $deadline s in all; ${models}at $IMGSZ px on $DEV"

status=0
for p in "${todo[@]}"; do
    left=$((deadline - SECONDS - 10)) # timeout's --kill-after included
    share=$((SHARE[$p] * SLOW))
    limit=$((share < left ? share : left))
    if [ "$limit" -lt 10 ]; then
        note "$p cut 0 s: ${left} s left of the ${deadline} s"
        log "  $p: CUT: ${left} s left of the ${deadline} s"
        status=1
        continue
    fi
    note "$p started"
    echo "=== $p $(date -u +%H:%M:%S) (limit $limit s)" >>"$OUT/log.txt"
    start=$SECONDS
    timeout --kill-after=10 "$limit" bash "$REPO/tools/gpu_check.sh" --part "$p" >>"$OUT/log.txt" 2>&1
    rc=$?
    took=$((SECONDS - start))
    if [ "$rc" -eq 0 ]; then
        note "$p ok $took s"
        log "  $p: ok in $took s (share $share s)"
    elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        note "$p cut $took s: over its $limit s"
        log "  $p: CUT after $took s: over its $limit s"
        status=1
    else
        note "$p failed $took s: rc $rc"
        log "  $p: FAILED rc $rc in $took s: $(grep -v '^PEAK' "$OUT/log.txt" | tail -n 1 | cut -c1-300)"
        status=1
    fi
done
log "gpu_check done: exit $status"
exit "$status"
