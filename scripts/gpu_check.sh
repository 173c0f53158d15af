#!/usr/bin/env bash
# The hand-run GPU check (see docs/gpu.md). Needs the seed and the sglang cache under .carry/
# (git-ignored):
#   mkdir -p .carry/seed && cp ../shared/seed/metadata_kernels.py .carry/seed/
#   KVFUZZ_CACHE=.carry/cache python -c "from kvfuzz.targets.wheels import sglang_kernel_file as f; f('0.5.14')"
# usage: bash scripts/gpu_check.sh [STEP...]   (default: all steps, in this order)
#   suite    tests + corpora, compiled on CUDA, not the slow tests      -> $OUT/pytest.txt
#   corpora  `pytest -n auto corpora/`, the regression suite as users run it -> $OUT/corpora.txt
#   slow     the slow tests (seed defects found and minimized on CUDA)  -> $OUT/pytest-slow.txt
#   builtin  a builtin fuzz run (must find nothing)                     -> $OUT/builtin.json
#   seed     a seed fuzz run (finds SGLang 0.5.14's defects)            -> $OUT/seed.json
#   bench    builtin vs seed timings, all SGLang-sized rows             -> $OUT/bench.txt
# Time limits (s): PYTEST_S SLOW_S CORPORA_S BUILTIN_S FUZZ_S BENCH_S; BENCH_ONLY narrows the bench.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KVFUZZ_CACHE=$PWD/.carry/cache KVFUZZ_SEED_PATH=$PWD/.carry/seed/metadata_kernels.py
python3 -m pip install -q --no-deps --no-build-isolation -e . || exit 2
nvidia-smi -L
python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__)"

# between steps: a step cut by its time limit can leave workers behind that slow the next one
tidy() { pkill -f "m kvfuzz.worker"; pkill -f "python3 -m pytest"; sleep 1; true; }
step() { echo "== $1 ($(date +%T))"; }

run_suite() {
    # -v: every result is a line as it happens, so a run cut short still says what failed
    timeout "${PYTEST_S:-400}" python3 -m pytest -n 8 tests corpora -v -W ignore -m "not slow" -p no:cacheprovider \
        --timeout 240 -rfE > "$OUT/pytest.txt" 2>&1
    grep -E "FAILED|ERROR|passed|failed" "$OUT/pytest.txt" | grep -v " PASSED" | tail -15
}
run_corpora() {
    timeout "${CORPORA_S:-240}" python3 -m pytest -n auto corpora/ -p no:cacheprovider -rfE \
        --junitxml="$OUT/corpora.xml" > "$OUT/corpora.txt" 2>&1
    tail -3 "$OUT/corpora.txt"
    python3 - "$OUT/corpora.xml" <<'EOF'
import sys, collections, xml.etree.ElementTree as ET
devs = collections.Counter(p.get("value") for p in ET.parse(sys.argv[1]).iter("property") if p.get("name") == "kvfuzz_device")
print("cases per device:", dict(devs))
EOF
}
run_slow() {
    timeout "${SLOW_S:-300}" python3 -m pytest -n 4 tests -v -W ignore -m slow -p no:cacheprovider --timeout 280 \
        > "$OUT/pytest-slow.txt" 2>&1
    grep -E "FAILED|ERROR|passed|failed" "$OUT/pytest-slow.txt" | grep -v " PASSED" | tail -8
}
run_builtin() {
    timeout $(( ${BUILTIN_S:-120} + 60 )) python3 -m kvfuzz.cli fuzz --target builtin --device cuda \
        --budget "${BUILTIN_S:-120}" --seed 11 --report "$OUT/builtin.json" 2>&1 | grep -v "cases/s" | tail -6
}
run_seed() {
    # minimizing comes on top of --budget; past the limit, SIGTERM: kvfuzz saves what it has
    rm -rf /tmp/kvfuzz-seed-corpus
    timeout -s TERM $(( ${FUZZ_S:-45} + 180 )) python3 -m kvfuzz.cli fuzz --target "$KVFUZZ_SEED_PATH" --device cuda \
        --budget "${FUZZ_S:-45}" --seed 2 --report "$OUT/seed.json" --minimize-budget 10 \
        --corpus /tmp/kvfuzz-seed-corpus 2>&1 | grep -v "cases/s" | tail -14
    echo "exit ${PIPESTATUS[0]}"
    # each finding was saved when first seen, then its minimized form over it: one case each
    python3 -c "import sys; from kvfuzz.corpus import iter_cases; r = [s for _, s in iter_cases(sys.argv[1])]; \
print(len(r), 'corpus cases,', sum(getattr(s, 'minimized', False) for s in r), 'minimized')" /tmp/kvfuzz-seed-corpus
}
run_bench() {
    timeout "${BENCH_S:-240}" python3 scripts/bench_kernels.py --seed-path "$KVFUZZ_SEED_PATH" \
        --only "${BENCH_ONLY:-}" > "$OUT/bench.txt" 2>&1
    cat "$OUT/bench.txt"
}

steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(suite corpora slow builtin seed bench)
for s in "${steps[@]}"; do
    case "$s" in
        suite|corpora|slow|builtin|seed|bench) step "$s"; "run_$s"; tidy ;;
        *) echo "gpu_check.sh: unknown step $s" >&2; exit 2 ;;
    esac
done
