#!/usr/bin/env bash
# Resolve README.md's install the way a clean Linux machine does, and fail on a conflicting pin.
#
# A fresh virtual environment gets the CPU torch exactly as README's first step installs it
# (PyTorch's CPU index; where that index cannot be reached, pip's own configuration on this machine
# supplies the same wheel). Then, for every constraints file, README's second step runs as a dry run
# against PyPI alone: no local wheel folder, no machine-wide pip configuration. A constraints file
# that pins something the CPU torch, kvfuzz's own requirements or another pin rejects fails here
# with pip's explanation (exit 1).
#   usage: scripts/check_install.sh            (CI runs it; about a minute with a warm pip cache)
set -euo pipefail
cd "$(dirname "$0")/.."
readme_torch_step=$(grep -o "python3 -m pip install torch==[^ ]* --index-url [^ ]*" README.md | head -n 1)
[ -n "$readme_torch_step" ] || { echo "check_install: README.md has no torch install step" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
# README's first step, in the fresh environment (one try per index: an unreachable one is skipped)
# shellcheck disable=SC2086 # the step's words, as README gives them
PIP_RETRIES=0 "$tmp/venv/bin/python" ${readme_torch_step#python3 } -q >"$tmp/torch.log" 2>&1 \
    || { cat "$tmp/torch.log" >&2; echo "check_install: README's torch step failed" >&2; exit 1; }
"$tmp/venv/bin/python" -W ignore -c 'import torch; print(f"check_install: torch {torch.__version__} (README step 1)")'
status=0
for c in constraints/*.txt; do
    # README's second step, PyPI only, as a dry run (nothing is installed)
    if env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_INDEX_URL -u PIP_CONSTRAINT -u PIP_NO_INDEX \
            PIP_CONFIG_FILE=/dev/null "$tmp/venv/bin/python" -m pip install --dry-run \
            -c "$c" -e ".[report,atheris]" >"$tmp/dry.log" 2>&1; then
        echo "check_install: $c resolves: $(grep -o 'Would install.*' "$tmp/dry.log" | tr ' ' '\n' | grep -E '^(triton|numpy|torch)-' | tr '\n' ' ')"
    else
        cat "$tmp/dry.log" >&2
        echo "check_install: $c does not resolve on a clean machine (above: pip's reason)" >&2
        status=1
    fi
done
exit "$status"
