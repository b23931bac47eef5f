#!/usr/bin/env bash
# The checks run on a lent GPU machine (README, "Devices"): the GPU tests, then PPO on Pong with
# the learner and inference on CPU or GPU. That machine has torch and CUDA but no network, so the
# project's other dependencies travel as wheels in .whl/ (Ray as a tarball without its Java jars,
# RLlib and Serve, to fit the transfer limit); see README for how they were fetched.
#   bash bench/gpu_check.sh OUT_DIR [STAGE...]    stages: tests pong runners sb3 appo scaling compile
#   (default: tests pong)
set -u
out=${1:-/tmp/gpu_check}
shift || true
stages=${*:-tests pong}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl
tar xJf .whl/ray-stripped.tar.xz -C "$site"
echo "$PWD" >"$site/rltrainer-dev.pth" # the checkout, for the driver and Ray's workers alike
nvidia-smi -L
python3 -c 'import torch, ray, gymnasium; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "ray", ray.__version__)'

has() { [[ " $stages " == *" $1 "* ]]; }

has tests && timeout 300 python3 -m pytest -q -p no:cacheprovider -o addopts="" --timeout 120 tests/test_devices.py tests/test_torch_compile.py 2>&1 |
    tee "$out/tests.log" | tail -25

run() { # name, then bench.atari's arguments
    local name=$1
    shift
    echo "== $name: $*"
    timeout "${RUN_TIMEOUT:-120}" python3 -m bench.atari --iterations "${ITERATIONS:-6}" "$@" 2>&1 | tee "$out/atari_$name.log" |
        grep -v "^\s*$" | tail -4
}
if has pong; then
    run cpu_learner --main-cpus 8
    run gpu_learner --main-cpus 8 --num-gpus 1
    run gpu_learner_gpu_inference --main-cpus 8 --num-gpus 1 --gpus-per-env-runner 1
    run gpu_learner_nature --main-cpus 8 --num-gpus 1 --gpus-per-env-runner 1 --nature
    run cpu_learner_nature --main-cpus 8 --nature
fi
if has runners; then # 8 envs over 2 and 4 remote runners, the learner on the GPU
    run runners_cpu_inference --main-cpus 4 --num-gpus 1 --env-runners 2,4
    run runners_gpu_inference --main-cpus 4 --num-gpus 1 --env-runners 2,4 --gpus-per-env-runner 0.2
fi
if has sb3; then # the anchor on the same machine: SB3's PPO picks the GPU itself (device="auto")
    echo "== sb3"
    timeout 150 python3 -m bench.atari --lib sb3 --iterations 6 2>&1 | tee "$out/atari_sb3.log" | tail -2
fi
if has appo; then # APPO from pixels (asynchronous runners), and PPO's figure on the same machine
    run ppo_gpu_learner_gpu_inference --main-cpus 8 --num-gpus 1 --gpus-per-env-runner 1
    run appo_gpu_learner_gpu_inference --algo APPO --main-cpus 8 --num-gpus 1 --gpus-per-env-runner 1
    run appo_runners_gpu_inference --algo APPO --main-cpus 4 --num-gpus 1 --env-runners 2,4 --gpus-per-env-runner 0.2
fi
if has scaling; then # env steps/s against the number of runners on a machine with 16 cores
    echo "== scaling"
    timeout 200 python3 -m bench.impala_appo throughput --algo APPO --runners 1,2,4,8 --seconds 8 2>&1 |
        tee "$out/scaling.log" | grep -E "runners=|Error|error" | tail -8
fi
if has compile; then # torch.compile of the learner and the runners' inference (bench/torch_compile.py)
    echo "== torch.compile"
    timeout 240 python3 -m bench.torch_compile --device cuda --threads 8 --repeats 8 \
        --learner-modes eager,forward_train,complete_update,forward_train+reduce-overhead,complete_update+reduce-overhead \
        --worker-modes eager,compiled 2>&1 | tee "$out/compile.log" | grep -v "^\s*$" | tail -20
    export ITERATIONS=4 RUN_TIMEOUT=90
    run pong_eager --main-cpus 8 --num-gpus 1 --gpus-per-env-runner 1
    run pong_compiled --main-cpus 8 --num-gpus 1 --gpus-per-env-runner 1 --torch-compile learner,worker
fi
