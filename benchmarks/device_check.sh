#!/usr/bin/env bash
# The CUDA checks, for a machine with a CUDA GPU and torch but no OpenMMLab packages: the
# pure-Python wheels it installs travel in .whl/ (docs/performance.md#measuring-on-a-gpu says
# how to fill it and run this). Writes its figures under $OUT.
#   0. the fast path's sync check (tests/test_cuda_fast_path.py);
#   1. the training-equivalence tests (every unused-parameter case, SGD and AdamW, AMP with
#      a real CUDA GradScaler) with 2 gloo ranks sharing the GPU, then NCCL at world size 1;
#   2. the step-time benchmark on a CenterPoint-sized BEV conv net, bf16 autocast, NCCL at
#      world size 1 and 2 gloo ranks on the one GPU;
#   3. torch's own SyncBatchNorm on NCCL through the stall guard's record (all_gather_single
#      on torch 2.13 and 2.14), and on 2 GPUs or more a SyncBatchNorm in a branch that one
#      rank skips, ended and named by the stall guard (benchmarks/nccl_sync_bn_record.py).
set -uo pipefail
OUT=${OUT:-/tmp/ddp_guard_device}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, mmengine; print('torch', torch.__version__, 'mmengine', mmengine.__version__)" \
  | tee -a "$OUT/gpu.txt"

# The fast path waits for nothing: no host sync between backward and step under
# torch.cuda.set_sync_debug_mode('error') (NCCL, world size 1).
python3 -m pytest -q -p no:cacheprovider tests/test_cuda_fast_path.py 2>&1 | tail -4 \
  | tee "$OUT/tests_cuda_fast_path.txt"
TESTS="python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_guarded_ddp_training.py"
$TESTS 2>&1 | tail -8 | tee "$OUT/tests_gloo_2ranks.txt"
DDP_GUARD_TEST_BACKEND=nccl DDP_GUARD_TEST_WORLD_SIZE=1 $TESTS 2>&1 | tail -8 \
  | tee "$OUT/tests_nccl_1rank.txt"

BENCH="benchmarks/bench_step_time.py --device cuda --in-channels 64 --width 64 --size 512
  --batch-size 4 --amp --repetitions 5 --steps 20 --chain-depths 100 1500"
python3 -m torch.distributed.run --nproc_per_node 1 $BENCH --backend nccl \
  --out "$OUT/bench_nccl_1rank.json" 2>&1 | grep -v "GuardedDDP decision\|^  " \
  | tail -16 | tee "$OUT/bench_nccl_1rank.txt"
python3 -m torch.distributed.run --nproc_per_node 2 $BENCH --backend gloo \
  --out "$OUT/bench_gloo_2ranks.json" 2>&1 | grep -v "GuardedDDP decision\|^  " \
  | tail -16 | tee "$OUT/bench_gloo_2ranks.txt"

GPUS=$(python3 -c "import torch; print(torch.cuda.device_count())")
python3 -m torch.distributed.run --nproc_per_node "$GPUS" benchmarks/nccl_sync_bn_record.py \
  2>&1 | grep -v "^  " | tail -30 | tee "$OUT/nccl_sync_bn_record.txt"
