#!/usr/bin/env bash
# Every GPU figure and GPU test ragspine has, in one command, for a short lease on a GPU box:
#
#     bash bench/gpu_checks.sh OUT_DIR [PDF_DATA_DIR [OCR_RECORD_DIR]]
#
# On a device machine of this workplace, after `bench/gpu_bundle.py` here: one call, with the
# command `bash bench/gpu_checks.sh $OUT`, `.gpu` carried and timeout_s 600. The script installs
# the bundle's wheels the machine lacks (into /tmp/ragspine-site), reads its pages (.gpu/data, the
# default PDF_DATA_DIR when present) and puts ragspine's src/ on PYTHONPATH.
#
# The whole run keeps inside BUDGET_S seconds (default 560, under one device call's 600; for a
# call given less, the call's limit minus 40): each step runs under its own limit, cut to what is
# left of the budget, and a step with under MIN_STEP_S (20) left is skipped and says so; a step
# whose limit is 0 is skipped too (ENCODE_S=0 ...), so a rerun can take only the steps missed.
# A step that hangs or breaks costs its slot and not the steps after it. The limits add up to
# more than the budget: the later steps run on what the earlier ones leave. In order of
# importance: page-model encoding of ColPali and ColQwen2 (model alone, encode_pages,
# Engine.ingest, queries on the plain forward and from CUDA graphs), the two other architectures,
# the tests marked gpu, queries a second through the server with and without graphs, exact
# MaxSim on the device, ColPali's ingest with pages prepared in processes; then, given
# OCR_RECORD_DIR (`bench/ocr_device.py record`; the bundle built with --ocr), OCR's CUDA test and
# OCR on CUDA against onnxruntime on the CPU.
#
# OUT_DIR receives two files, rewritten after every step so a run stopped at any point returns
# what it did (a device call returns at most 8 files): table.md, the table judged against the
# targets (bench/gpu_table.py), and gpu_checks.tar.gz, every step's log and JSON.
set -u
out=${1:?usage: bench/gpu_checks.sh OUT_DIR [PDF_DATA_DIR [OCR_RECORD_DIR]]}
bundle=${GPU_BUNDLE:-.gpu}
default_data=../shared/data/mmlongbench_dev
[ -d "$bundle/data" ] && default_data=$bundle/data
data=${2:-$default_data}
ocr_record=${3:-}
py=${PYTHON:-python3}
budget=${BUDGET_S:-560}
min_step=${MIN_STEP_S:-20}
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu_checks.XXXXXX")
echo "== logs and JSON in $work; data $data; budget ${budget}s"
export PYTHONUNBUFFERED=1 RAGSPINE_DENSE_MODEL=none RAGSPINE_OCR=off HF_HUB_OFFLINE=1
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}

pack() {  # the table and the logs into OUT_DIR, each replaced whole (a table that failed says so)
    "$py" bench/gpu_table.py "$work" >"$out/table.md.tmp" 2>"$work/gpu_table.err" \
        || echo "bench/gpu_table.py failed: see gpu_table.err in gpu_checks.tar.gz" >>"$out/table.md.tmp"
    mv -f "$out/table.md.tmp" "$out/table.md"
    tar -czf "$out/gpu_checks.tar.gz.tmp" -C "$work" . && mv -f "$out/gpu_checks.tar.gz.tmp" "$out/gpu_checks.tar.gz"
}

rc=0  # the last step's exit status
step() {  # step NAME SECONDS CMD...: run CMD under a time limit, output to the work folder's NAME.log
    local name=$1 limit=$2
    rc=skipped
    shift 2
    [ "$limit" = 0 ] && { echo "== $name: skipped (limit 0)"; return; }
    local left=$((budget - SECONDS))
    if [ "$left" -lt "$min_step" ]; then
        echo "== $name: skipped, ${left}s of BUDGET_S=${budget} left"
        return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    local t0=$SECONDS
    echo "== $name (limit ${limit}s)"
    timeout --signal=INT --kill-after=10 "$limit" "$@" >"$work/$name.log" 2>&1
    rc=$?
    echo "== $name: rc=$rc in $((SECONDS - t0))s"
    tail -n 25 "$work/$name.log"
    pack
}

if [ -d "$bundle/wheels" ]; then  # only what the machine lacks: the image's own versions stay
    wheels=$("$py" bench/gpu_bundle.py missing "$bundle/wheels")
    if [ -n "$wheels" ]; then
        # shellcheck disable=SC2086  # one word a wheel
        step install 90 "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
            --upgrade --target /tmp/ragspine-site $wheels
        if [ "$rc" != 0 ]; then  # every step after would fail on its imports
            echo "== the bundle's wheels did not install (rc=$rc): stopping"
            pack
            exit 1
        fi
        export PYTHONPATH=$PYTHONPATH:/tmp/ragspine-site
    fi
fi
step env 30 bash -c "nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; \
$py -c 'import sys, torch, transformers; print(sys.version.split()[0], \"torch\", torch.__version__, \
\"transformers\", transformers.__version__, \"cuda\", torch.cuda.is_available())'; \
$py -c 'import onnxruntime as o; print(\"onnxruntime\", o.__version__, o.get_available_providers())'; \
$py -m pip check | grep -i -E 'pydantic|fastapi|starlette|uvicorn|mcp|pymupdf|qdrant|colpali|httpx|anyio|typing' ; \
$py -c 'import importlib
for m in (\"ragspine.serving.app\", \"colpali_engine\", \"pymupdf\", \"qdrant_edge\", \"cv2\", \"onnx2torch\", \"rapidocr_onnxruntime\"):
    try:
        importlib.import_module(m); print(m, \"ok\")
    except Exception as exc:
        print(m, \"MISSING\", type(exc).__name__, exc)'"

step encode_colpali_colqwen2 "${ENCODE_S:-220}" "$py" bench/encode.py --arch colpali,colqwen2 \
    --data "$data" --pages 256 --queries 50 --json "$work/encode.json"
step encode_colqwen2_5_colidefics3 "${ENCODE2_S:-150}" "$py" bench/encode.py \
    --arch colqwen2_5,colidefics3 --data "$data" --pages 64 --queries 20 --json "$work/encode2.json"
step pytest_gpu "${PYTEST_S:-60}" "$py" -m pytest -q -p no:cacheprovider -m gpu --continue-on-collection-errors \
    tests/models/test_page_encoders.py tests/models/test_windows.py tests/models/test_prepare_pages.py \
    tests/models/test_muvera_device.py tests/models/test_idefics3_prep.py tests/models/test_query_graphs.py
# Queries a second through the server, 1 and 8 clients, plain forward against CUDA graphs: a full
# random ColPali saved (~6 GB), 2 PDFs ingested, then one server per rule.
step serve_queries "${SERVE_S:-180}" "$py" bench/serve_load.py --data "$data" --docs 2 --mode hybrid \
    --page-size full --device cuda --threads "plain=RAGSPINE_QUERY_GRAPHS=off,graphs=auto" \
    --clients-list 1,8 --duration 8 --rounds 1 --json "$work/serve.json" \
    --server-env RAGSPINE_OCR=off --server-env RAGSPINE_DENSE_MODEL=none
step maxsim_device "${MAXSIM_S:-50}" "$py" bench/maxsim_device.py --device cuda \
    --pages 1000,10000,100000 --json "$work/maxsim.json"
# ColPali's ingest with its pages prepared in 4 processes (RAGSPINE_PREP_WORKERS) against the prep
# threads of the first step: does the hand-over pay on a GPU node?
step encode_colpali_prep_processes "${PREP_S:-90}" "$py" bench/encode.py --arch colpali \
    --data "$data" --pages 128 --queries 10 --prep-workers 4 --json "$work/encode_prep.json"

if [ -n "$ocr_record" ]; then
    # The ONNX files out of rapidocr-onnxruntime's wheel, for the models-only step (which must not
    # import rapidocr_onnxruntime: it needs OpenCV).
    models=$(mktemp -d "${TMPDIR:-/tmp}/ocr_models.XXXXXX")  # not in the tarball: ~15 MB of ONNX
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
    # OCR's CUDA test needs the OCR packages: a bundle built with --ocr.
    step pytest_gpu_ocr "${PYTEST_OCR_S:-40}" "$py" -m pytest -q -p no:cacheprovider -m gpu tests/ocr/test_ocr_rapid.py
    step ocr_engine_cuda "${OCR_S:-150}" "$py" bench/ocr_device.py replay "$ocr_record" \
        --engines cpu:onnxruntime cuda:torch --json "$work/ocr_engine.json"
    # Recognition batches of 32 crops (the engine's are RapidOCR's 6): faster, read differently.
    step ocr_engine_cuda_batch32 "${OCR32_S:-40}" "$py" bench/ocr_device.py replay "$ocr_record" \
        --engines cuda:torch --rec-batch 32 --json "$work/ocr_engine_b32.json"
    step ocr_models_cuda "${OCRM_S:-90}" "$py" bench/ocr_device.py models "$ocr_record" \
        --models-dir "$models" --engines cpu:onnxruntime cuda:torch --json "$work/ocr_models.json"
fi

pack
echo
cat "$out/table.md"
