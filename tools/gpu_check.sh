#!/usr/bin/env bash
# The book and the benchmarks on a GPU machine, in one pass (the developers' rule: whenever a GPU is lent, run the
# whole book under nbval there and the GPU benchmarks, and commit their results). Written for a lent machine with
# no network and no Jupyter: wheels for what its image lacks are carried in .whl/ (see running.md): nbval and
# ipykernel with the Jupyter packages they need, and nbclient, pybtex and latexcodec for tests/test_notebooks.py.
#
#   OUT=/tmp/gpu tools/gpu_check.sh        writes under $OUT: gpu.log (machine, benchmarks), nbval.log, unit.log
#                                          and the benchmarks' results files (bench_*_cuda.json)
#   BENCHES="kernel fast" SUFFIX=_rerun NOTEBOOKS=none UNIT_TESTS=tests/test_notebooks.py tools/gpu_check.sh
#                                          two benchmarks only, written as bench_*_cuda_rerun.json; no notebook;
#                                          one test file
#
# The benchmarks run first, with the GPU otherwise idle; then every notebook under nbval (one process each, two
# CPU threads each) beside the unit tests. Each step has its own time limit, so one that hangs costs only itself;
# the whole takes at most DEADLINE seconds (default 540).
set -u
start=$(date +%s)
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
if ! python3 -c "import importlib.metadata as m; m.version('attention-course')" 2>/dev/null; then
    # the package runs from src/ without being installed: give it the metadata an install would (its version)
    meta=/tmp/meta/attention_course-0.dist-info; mkdir -p "$meta"
    version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)
    printf 'Metadata-Version: 2.1\nName: attention-course\nVersion: %s\n' "$version" >"$meta/METADATA"
    export PYTHONPATH="$PYTHONPATH:/tmp/meta"
fi
log="$OUT/gpu.log"
{
    date -u; git rev-parse HEAD; git status --short | head -5; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; lscpu | grep -E "Model name|^CPU\(s\)"
    python3 -c "import sys, torch, triton, numpy; print(sys.version.split()[0], 'torch', torch.__version__, \
'triton', triton.__version__, 'numpy', numpy.__version__)"
} >"$log" 2>&1

bench() {  # bench SECONDS SCRIPT ARGS...: one benchmark, its output appended to the log
    local limit=$1; shift
    echo "== $*" >>"$log"
    timeout "$limit" python3 "$@" >>"$log" 2>&1 || echo "!! exit $? from $*" >>"$log"
}
benches=${BENCHES-kernel fast mha gpt}  # SKIP_BENCH=1 or BENCHES="": the notebooks and unit tests only
[ -n "${SKIP_BENCH:-}" ] && benches=""
suffix=${SUFFIX:-}
for b in $benches; do
    case $b in
    kernel) bench 420 benchmarks/bench_kernel.py --out "$OUT/bench_kernel_cuda$suffix.json" ;;
    fast) bench 60 benchmarks/bench_fast.py compare --device cuda --batch 4 --heads 16 --n 4096 --d 64 \
        --out "$OUT/bench_fast_cuda$suffix.json" ;;
    mha) bench 60 benchmarks/bench_mha.py --device cuda --batch 16 --n 1024 --d-model 1024 --heads 16 \
        --out "$OUT/bench_mha_cuda$suffix.json" ;;
    gpt) bench 120 benchmarks/bench_gpt.py --device cuda --autocast bfloat16 --d-model 768 --heads 12 --layers 12 \
        --vocab 50257 --batch 8 --length 1024 --steps 20 --reps 5 --out "$OUT/bench_gpt_cuda$suffix.json" ;;
    *) echo "!! unknown benchmark $b (kernel, fast, mha, gpt)" >>"$log" ;;
    esac
done

# the notebooks and unit tests get what is left of DEADLINE seconds (default 540: a 10-minute call, with margin)
limit=${NB_LIMIT:-$(( ${DEADLINE:-540} - ($(date +%s) - start) ))}
echo "nbval and unit tests: $limit s" >>"$log"
mkdir -p /tmp/nbval
notebooks=${NOTEBOOKS:-book/*.ipynb}  # NOTEBOOKS="book/05_transformer.ipynb": those only; NOTEBOOKS=none: none
[ "$notebooks" = none ] && notebooks=""
for nb in $notebooks; do
    OMP_NUM_THREADS=2 timeout "$limit" python3 -m pytest --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg \
        --nbval-cell-timeout=900 -p no:cacheprovider -q -rf "$nb" >"/tmp/nbval/$(basename "$nb").log" 2>&1 &
done
# the reader tests and the site's markdown tool need the site's packages (nbclient, playwright, pybtex): not there
# in eight worker processes (pytest-xdist): a test that kills its process fails alone, not the run
OMP_NUM_THREADS=2 timeout "$limit" python3 -m pytest ${UNIT_TESTS:-tests} -m "not reader" -q -rfEs --tb=line -n 8 -p no:cacheprovider \
    --ignore=tests/reader --ignore=tests/test_notebook_markdown.py \
    >"$OUT/unit.log" 2>&1 &
wait
for f in $(ls /tmp/nbval/*.log 2>/dev/null); do echo "=== $f"; tail -c 20000 "$f"; done >"$OUT/nbval.log"
echo "done $(date -u)" >>"$log"
