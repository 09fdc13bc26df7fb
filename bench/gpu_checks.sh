#!/usr/bin/env bash
# Every GPU figure and GPU test ragspine has, in one command, for a short lease on a GPU box:
#
#     bash bench/gpu_checks.sh OUT_DIR [PDF_DATA_DIR]
#
# Needs the gpu extra's packages importable by ${PYTHON:-python3} (ragspine itself from src/ is
# enough: PYTHONPATH=src). Each step has its own time limit, so one that hangs or breaks costs its
# slot and not the figures after it; each writes its output to OUT_DIR and the script goes on.
# In order of importance: page-model encoding (ColPali, ColQwen2), exact MaxSim on the device,
# the tests marked gpu, then the two other page-model architectures. OCR on CUDA is only tried
# when this onnxruntime has the CUDA provider (the onnxruntime-gpu wheel).
set -u
out=${1:?usage: bench/gpu_checks.sh OUT_DIR [PDF_DATA_DIR]}
data=${2:-../shared/data/mmlongbench_dev}
py=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 RAGSPINE_DENSE_MODEL=none RAGSPINE_OCR=off HF_HUB_OFFLINE=1

step() {  # step NAME SECONDS CMD...: run CMD under a time limit, output to OUT_DIR/NAME.log
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    echo "== $name (limit ${limit}s)"
    timeout --signal=INT --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    echo "== $name: rc=$rc in $((SECONDS - t0))s"
    tail -n 25 "$out/$name.log"
}

step env 30 bash -c "nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; \
$py -c 'import sys, torch, transformers; print(sys.version.split()[0], \"torch\", torch.__version__, \
\"transformers\", transformers.__version__, \"cuda\", torch.cuda.is_available())'; \
$py -c 'import onnxruntime as o; print(\"onnxruntime\", o.__version__, o.get_available_providers())'"

step encode_colpali_colqwen2 "${ENCODE_S:-240}" "$py" bench/encode.py --arch colpali,colqwen2 \
    --data "$data" --pages 256 --queries 50 --json "$out/encode.json"
step maxsim_device "${MAXSIM_S:-70}" "$py" bench/maxsim_device.py --device cuda \
    --pages 1000,10000,100000 --json "$out/maxsim.json"
step pytest_gpu "${PYTEST_S:-60}" "$py" -m pytest -q -p no:cacheprovider -m gpu \
    tests/models/test_page_encoders.py tests/ocr/test_ocr_rapid.py
step encode_colqwen2_5_colidefics3 "${ENCODE2_S:-100}" "$py" bench/encode.py \
    --arch colqwen2_5,colidefics3 --data "$data" --pages 128 --queries 20 --json "$out/encode2.json"
