#!/usr/bin/env bash
# Every GPU figure and GPU test ragspine has, in one command, for a short lease on a GPU box:
#
#     bash bench/gpu_checks.sh OUT_DIR [PDF_DATA_DIR [OCR_RECORD_DIR]]
#
# Needs the gpu extra's packages importable by ${PYTHON:-python3} (ragspine itself from src/ is
# enough: PYTHONPATH=src). Each step has its own time limit, so one that hangs or breaks costs its
# slot and not the figures after it; each writes its output to OUT_DIR and the script goes on.
# In order of importance: page-model encoding (ColPali, ColQwen2; their queries on the plain
# forward and from CUDA graphs), exact MaxSim on the device, the tests marked gpu, the two other
# page-model architectures, ColPali's ingest with pages prepared in processes, then queries a
# second through the server with and without graphs.
# Then OCR on CUDA (torch, onnx2torch) against onnxruntime on the machine's CPU, on the images
# `bench/ocr_device.py record` saved in OCR_RECORD_DIR: the whole engine where RapidOCR's
# dependencies import, the two models alone (no OpenCV needed) in any case. A step whose limit is
# 0 is skipped (ENCODE_S=0 ...): the limits add up to ~950 s, over one device call's 600, so a
# first call runs up to the graph tests and a second the rest when the steps use all their time.
set -u
out=${1:?usage: bench/gpu_checks.sh OUT_DIR [PDF_DATA_DIR [OCR_RECORD_DIR]]}
data=${2:-../shared/data/mmlongbench_dev}
ocr_record=${3:-}
py=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 RAGSPINE_DENSE_MODEL=none RAGSPINE_OCR=off HF_HUB_OFFLINE=1

step() {  # step NAME SECONDS CMD...: run CMD under a time limit, output to OUT_DIR/NAME.log
    local name=$1 limit=$2
    shift 2
    [ "$limit" = 0 ] && { echo "== $name: skipped"; return; }
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
step imports 30 "$py" -c "
import importlib
for m in ('cv2', 'PIL', 'shapely', 'pyclipper', 'yaml', 'onnx', 'onnx2torch', 'rapidocr_onnxruntime', 'pymupdf', 'pydantic'):
    try:
        print(m, getattr(importlib.import_module(m), '__version__', '?'))
    except Exception as exc:
        print(m, 'MISSING', type(exc).__name__, exc)"

step encode_colpali_colqwen2 "${ENCODE_S:-240}" "$py" bench/encode.py --arch colpali,colqwen2 \
    --data "$data" --pages 256 --queries 50 --json "$out/encode.json"
step maxsim_device "${MAXSIM_S:-70}" "$py" bench/maxsim_device.py --device cuda \
    --pages 1000,10000,100000 --json "$out/maxsim.json"
step pytest_gpu "${PYTEST_S:-60}" "$py" -m pytest -q -p no:cacheprovider -m gpu \
    tests/models/test_page_encoders.py tests/models/test_windows.py tests/models/test_prepare_pages.py \
    tests/models/test_muvera_device.py tests/models/test_idefics3_prep.py tests/models/test_query_graphs.py \
    tests/ocr/test_ocr_rapid.py
step encode_colqwen2_5_colidefics3 "${ENCODE2_S:-100}" "$py" bench/encode.py \
    --arch colqwen2_5,colidefics3 --data "$data" --pages 128 --queries 20 --json "$out/encode2.json"
# ColPali's ingest with its pages prepared in 4 processes (RAGSPINE_PREP_WORKERS) against the prep
# threads of the first step: does the hand-over pay on a GPU node?
step encode_colpali_prep_processes "${PREP_S:-120}" "$py" bench/encode.py --arch colpali \
    --data "$data" --pages 128 --queries 10 --prep-workers 4 --json "$out/encode_prep.json"
# Queries a second through the server, 1 and 8 clients, plain forward against CUDA graphs: a full
# random ColPali saved (~6 GB), 2 PDFs ingested, then one server per rule.
step serve_queries "${SERVE_S:-300}" "$py" bench/serve_load.py --data "$data" --docs 2 --mode hybrid \
    --page-size full --device cuda --threads "plain=RAGSPINE_QUERY_GRAPHS=off,graphs=auto" \
    --clients-list 1,8 --duration 8 --rounds 1 \
    --server-env RAGSPINE_OCR=off --server-env RAGSPINE_DENSE_MODEL=none

if [ -n "$ocr_record" ]; then
    # The ONNX files out of rapidocr-onnxruntime's wheel, for the models-only step (which must not
    # import rapidocr_onnxruntime: it needs OpenCV).
    models=$out/ocr_models
    "$py" -c "import rapidocr_onnxruntime, shutil, pathlib, sys; \
shutil.copytree(pathlib.Path(rapidocr_onnxruntime.__file__).parent / 'models', sys.argv[1], dirs_exist_ok=True)" \
        "$models" 2>/dev/null || "$py" - "$models" <<'PY'
import pathlib, sys, sysconfig, zipfile
out = pathlib.Path(sys.argv[1])
for whl in pathlib.Path(".").glob("**/rapidocr_onnxruntime-*.whl"):
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            if name.endswith(".onnx"):
                (out / pathlib.Path(name).name).parent.mkdir(parents=True, exist_ok=True)
                (out / pathlib.Path(name).name).write_bytes(z.read(name))
    break
PY
    ls -la "$models"
    step ocr_engine_cuda "${OCR_S:-150}" "$py" bench/ocr_device.py replay "$ocr_record" \
        --engines cpu:onnxruntime cuda:torch --json "$out/ocr_engine.json"
    # Recognition batches of 32 crops (the engine's are RapidOCR's 6): faster, read differently.
    step ocr_engine_cuda_batch32 "${OCR32_S:-40}" "$py" bench/ocr_device.py replay "$ocr_record" \
        --engines cuda:torch --rec-batch 32 --json "$out/ocr_engine_b32.json"
    step ocr_models_cuda "${OCRM_S:-90}" "$py" bench/ocr_device.py models "$ocr_record" \
        --models-dir "$models" --engines cpu:onnxruntime cuda:torch --json "$out/ocr_models.json"
fi
