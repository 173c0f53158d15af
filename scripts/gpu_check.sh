#!/usr/bin/env bash
# The hand-run GPU check (see docs/gpu.md): suite + corpora compiled on CUDA, a seed fuzz run,
# the num_kv_splits timings. Needs the seed and the sglang cache under .carry/ (git-ignored):
#   mkdir -p .carry/seed && cp ../shared/seed/metadata_kernels.py .carry/seed/
#   KVFUZZ_CACHE=.carry/cache python -c "from kvfuzz.targets.wheels import sglang_kernel_file as f; f('0.5.14')"
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KVFUZZ_CACHE=$PWD/.carry/cache KVFUZZ_SEED_PATH=$PWD/.carry/seed/metadata_kernels.py
python3 -m pip install -q --no-deps --no-build-isolation -e . || exit 2
nvidia-smi -L
# -v: every result is a line as it happens, so a run cut short still says what failed
timeout "${PYTEST_S:-300}" python3 -m pytest -n 8 tests corpora -v -W ignore -m "not slow" -p no:cacheprovider \
    --timeout 240 -rfE > "$OUT/pytest.txt" 2>&1
grep -E "FAILED|ERROR|passed|failed" "$OUT/pytest.txt" | grep -v " PASSED" | tail -15
timeout "${SLOW_S:-300}" python3 -m pytest -n 4 tests -v -W ignore -m slow -p no:cacheprovider --timeout 280 \
    > "$OUT/pytest-slow.txt" 2>&1
grep -E "FAILED|ERROR|passed|failed" "$OUT/pytest-slow.txt" | grep -v " PASSED" | tail -8
pkill -f kvfuzz.worker; pkill -f "pytest -n"; sleep 1
timeout 90 python3 -m kvfuzz.cli fuzz --target "$KVFUZZ_SEED_PATH" --device cuda --budget "${FUZZ_S:-45}" --seed 2 \
    --report "$OUT/seed.json" --minimize-budget 10 2>&1 | grep -v "cases/s" | tail -12
timeout 60 python3 scripts/bench_kernels.py --seed-path "$KVFUZZ_SEED_PATH" --only num_kv_splits 2>&1 | tail -18
