#!/usr/bin/env bash
# The CUDA checks, for a machine with a CUDA GPU and torch but no OpenMMLab packages: the
# pure-Python wheels it installs travel in .whl/ (docs/performance.md#measuring-on-a-gpu says
# how to fill it and run this). Sized for one H200 inside 10 minutes (one device call):
# each step has its own time limit (the limits add up to 9 min) and writes its output under
# $OUT while it runs, so a step cut short keeps what it printed; summary.txt gets a line per
# step as it ends. At most 4 ranks train at once (16 processes started together there once
# sat for 9 minutes without output). The steps, most wanted first:
#   1. the fast path's sync check (tests/test_cuda_fast_path.py: NCCL, world size 1);
#   2. the step-time benchmark on a CenterPoint-sized BEV conv net and the chain of 100
#      blocks, bf16 autocast, NCCL at world size 1, then torch.profiler's operator table of
#      every wrapper (the chain of 1500 blocks took the step past its limit: on the GPU
#      those small layers cost a kernel launch each, 37 ms a step at 100 blocks);
#   2b. GPT-2 in a plain loop and under the trainers (benchmarks/bench_trainers.py, NCCL at
#      world size 1), where this Python has transformers: the .whl folder does not carry
#      it (its tokenizers and safetensors are compiled for one Python);
#   3. torch's own SyncBatchNorm on NCCL through the stall guard's record
#      (benchmarks/nccl_sync_bn_record.py; on 2 GPUs or more also a SyncBatchNorm in a branch
#      one rank skips, ended and named by the stall guard);
#   4. the training-equivalence tests (every unused-parameter case, SGD and AdamW, AMP with a
#      real CUDA GradScaler) at NCCL world size 1, then 5. with 2 gloo ranks sharing the GPU.
# The step-time benchmark with 2 gloo ranks on one GPU is left out: gloo moves every CUDA
# gradient through the host, so its figure says nothing of a GPU job, and it never finished
# inside a session's device time (2026-11-30).
#
# DEVICE_CHECK_SMOKE=1 runs every step at its smallest size on whatever the machine has
# (CI: the CPU, gloo, the project's .venv as PYTHON; the CUDA-only steps say they are
# skipped), so that the script itself cannot rot where no GPU runs it
# (tests/tooling/test_benchmarks_run.py); DEVICE_CHECK_LIMIT_SCALE multiplies every step's
# limit there (a loaded CI machine's slowdown).
set -uo pipefail
OUT=${OUT:-/tmp/ddp_guard_device}
PYTHON=${PYTHON:-python3}
SMOKE=${DEVICE_CHECK_SMOKE:-0}
LIMIT_SCALE=${DEVICE_CHECK_LIMIT_SCALE:-1}
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
if [ -d .whl ]; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=$PWD:/tmp/site  # the checkout first: the code under test, uninstalled
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
CUDA=$("$PYTHON" -c "import torch; print(int(torch.cuda.is_available()))") || exit 1
{
  date -u '+%Y-%m-%d %H:%M UTC'
  if [ "$CUDA" = 1 ]; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  fi
  "$PYTHON" -c "
import torch, mmengine
nccl = '.'.join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else '-'
print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'NCCL', nccl,
      'mmengine', mmengine.__version__)"
} | tee -a "$SUMMARY"

# step NAME SECONDS COMMAND...: runs COMMAND under its own limit (every process it starts
# included), its output into $OUT/NAME.txt as it comes, and a line into summary.txt.
step() {
  local name=$1 limit start=$SECONDS code
  limit=$(awk -v s="$2" -v k="$LIMIT_SCALE" 'BEGIN { printf "%d", s * k }')
  shift 2
  echo "== $name (limit ${limit} s): $*" | tee -a "$SUMMARY"
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.txt" 2>&1
  code=$?
  local verdict="exit $code"
  [ "$code" = 124 ] || [ "$code" = 137 ] && verdict="STOPPED at its ${limit} s limit"
  echo "   $name: $verdict after $((SECONDS - start)) s" | tee -a "$SUMMARY"
  tail -3 "$OUT/$name.txt"
}

skipped() {
  echo "== $1: skipped, $2" | tee -a "$SUMMARY"
}

if [ "$SMOKE" = 1 ]; then
  BENCH_SIZE="--in-channels 1 --width 1 --layers-per-stage 1 --size 8 --batch-size 1
    --repetitions 1 --steps 1 --warmup 1 --chain-depths --profile-steps 1"
  TEST_PICK=(-k "no_unused and sgd")
  WORKERS=()
else
  BENCH_SIZE="--in-channels 64 --width 64 --size 512 --batch-size 4 --amp --repetitions 5
    --steps 10 --chain-depths 100 --profile-steps 3"
  TEST_PICK=()
  WORKERS=(-n 2)
fi
if [ "$CUDA" = 1 ]; then
  DEVICE=cuda BACKEND=nccl
else
  DEVICE=cpu BACKEND=gloo
fi
PYTEST=("$PYTHON" -m pytest -q -p no:cacheprovider)

step tests_cuda_fast_path 60 "${PYTEST[@]}" tests/test_cuda_fast_path.py
# shellcheck disable=SC2086 (BENCH_SIZE is a list of arguments)
step bench_step_time 180 "$PYTHON" -m torch.distributed.run --nproc_per_node 1 \
  benchmarks/bench_step_time.py --device "$DEVICE" --backend "$BACKEND" $BENCH_SIZE \
  --out "$OUT/bench_step_time.json" --profile-out "$OUT/bench_profile.txt"
# GPT-2 in a plain loop, and under the Hugging Face Trainer and Lightning where this Python
# has them (benchmarks/bench_trainers.py; a setting whose packages are missing is left out).
TRAINERS=$("$PYTHON" -c "
import importlib.util as u
have = lambda *names: all(u.find_spec(name) for name in names)
print(' '.join(setting for setting, packages in (('loop', ['transformers']),
      ('hf', ['transformers', 'accelerate']), ('lightning', ['transformers', 'lightning']))
      if have(*packages)))")
if [ -z "$TRAINERS" ]; then
  skipped bench_trainers "transformers is not installed here"
elif [ "$SMOKE" = 1 ]; then
  step bench_trainers 120 "$PYTHON" -m torch.distributed.run --nproc_per_node 1 \
    benchmarks/bench_trainers.py --device "$DEVICE" --trainers $TRAINERS --layers 1 \
    --rounds 1 --steps 1
else
  step bench_trainers 90 "$PYTHON" -m torch.distributed.run --nproc_per_node 1 \
    benchmarks/bench_trainers.py --device "$DEVICE" --trainers $TRAINERS --rounds 8 --steps 5
fi
if [ "$CUDA" = 1 ]; then
  GPUS=$("$PYTHON" -c "import torch; print(torch.cuda.device_count())")
  step nccl_sync_bn_record 45 "$PYTHON" -m torch.distributed.run --nproc_per_node "$GPUS" \
    benchmarks/nccl_sync_bn_record.py
else
  skipped nccl_sync_bn_record "no CUDA (SyncBatchNorm's statistics kernels have no CPU build)"
fi
step tests_equivalence_1rank 90 env DDP_GUARD_TEST_BACKEND="$BACKEND" \
  DDP_GUARD_TEST_WORLD_SIZE=1 "${PYTEST[@]}" "${WORKERS[@]}" "${TEST_PICK[@]}" \
  tests/test_guarded_ddp_training.py
step tests_equivalence_2ranks 75 "${PYTEST[@]}" "${WORKERS[@]}" "${TEST_PICK[@]}" \
  tests/test_guarded_ddp_training.py
echo "device check: $SECONDS s in all" | tee -a "$SUMMARY"
