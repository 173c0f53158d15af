#!/usr/bin/env bash
#SBATCH --job-name=kvfuzz-shard
#SBATCH --array=0-15
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=8
#SBATCH --time=02:00:00
#SBATCH --output=kvfuzz-shard-%A_%a.out
#
# kvfuzz on a Slurm cluster: one campaign split into SHARDS shards, one array task each, every
# shard saving into a corpus of its own; then a merge job, started once every task has ended
# (however it ended), merges the shards' corpora into CORPUS and says how to commit the new cases.
#
#   kvfuzz-shards.sh submit   on the login node: sbatch the array, then the merge job after it
#   kvfuzz-shards.sh task     one shard (what each array task runs; SLURM_ARRAY_TASK_ID 0..SHARDS-1)
#   kvfuzz-shards.sh merge    every shard's corpus into CORPUS, then the git commands (the merge job)
#
# Settings (environment; `submit` passes them on to both jobs):
#   SHARDS    number of shards, one array task each (default 16; `submit` sizes the array from it)
#   RUN_DIR   on a filesystem every node sees: shard-<I>/corpus, shard-<I>/report.json and
#             .xml, and campaign/ (every shard's case stream: the next submit continues them)
#             (default kvfuzz-run in the directory sbatch was called from)
#   CORPUS    the corpus the merge job merges into (default: corpora/ of the kvfuzz checkout that
#             holds this script)
#   TARGET    (default sglang==0.5.23)  DEVICE (default cuda)  BUDGET seconds per shard (default 6000)
#   TIME_LIMIT wall clock per shard, minimizing included (default 1.5 x BUDGET; keep it under --time)
#   FUZZ_ARGS more `kvfuzz fuzz` options for every shard
#   COMMIT=1  the merge job commits the new cases itself instead of printing the commands
# `kvfuzz` must be on PATH in the jobs: activate its environment before `submit` (sbatch passes
# the environment on).
set -u

mode=${1:-}
shards=${SHARDS:-16}
run_dir=${RUN_DIR:-kvfuzz-run}

case "$mode" in
submit)
    # Inside a job Slurm runs a copy of this script, so its checkout is found here, on the login node.
    here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    checkout=$(cd "$here/../../.." && pwd)
    mkdir -p "$run_dir" || exit 2
    run_dir=$(cd "$run_dir" && pwd)
    export SHARDS=$shards RUN_DIR=$run_dir CORPUS=${CORPUS:-$checkout/corpora}
    array=$(sbatch --parsable --array="0-$((shards - 1))" "$here/kvfuzz-shards.sh" task) || exit 2
    array=${array%%;*}  # "jobid" or "jobid;cluster"
    merge=$(sbatch --parsable --dependency="afterany:$array" --job-name=kvfuzz-merge --time=00:30:00 \
        --output="$RUN_DIR/merge-%j.out" --wrap="bash $(printf '%q' "$here/kvfuzz-shards.sh") merge") || exit 2
    echo "kvfuzz: shards in array job ${array} (${shards} tasks), merge job ${merge%%;*} after it; output in $RUN_DIR"
    ;;
task)
    if [ -z "${SLURM_ARRAY_TASK_ID:-}" ]; then
        echo "kvfuzz-shards.sh task: SLURM_ARRAY_TASK_ID is not set (run it as an array task, or set it)" >&2
        exit 2
    fi
    shard=$((SLURM_ARRAY_TASK_ID + 1))  # array tasks count from 0, kvfuzz's shards from 1
    out=$run_dir/shard-$shard
    mkdir -p "$out" || exit 2
    budget=${BUDGET:-6000}
    # exit 1: new findings (saved in $out/corpus for the merge job); 2: the run could not be judged
    # shellcheck disable=SC2086 # FUZZ_ARGS is a list of options
    exec kvfuzz fuzz --target "${TARGET:-sglang==0.5.23}" --device "${DEVICE:-cuda}" \
        --budget "$budget" --time-limit "${TIME_LIMIT:-$(( ${budget%.*} * 3 / 2 ))}" \
        --shard "$shard/$shards" --campaign "$run_dir/campaign" --corpus "$out/corpus" \
        --report "$out/report.json" --junit "$out/report.xml" ${FUZZ_ARGS:-}
    ;;
merge)
    here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    corpus=${CORPUS:-$(cd "$here/../../.." && pwd)/corpora}
    sources=()
    for d in "$run_dir"/shard-*/corpus; do
        [ -d "$d" ] && sources+=("$d")
    done
    if [ ${#sources[@]} -eq 0 ]; then
        echo "kvfuzz: no shard saved a case under $run_dir; nothing to merge"
        exit 0
    fi
    mkdir -p "$corpus" || exit 2
    kvfuzz corpus merge "${sources[@]}" "$corpus" || exit 2
    # bring the new cases back: a commit in the checkout that holds CORPUS
    corpus=$(cd "$corpus" && pwd)
    top=$(git -C "$corpus" rev-parse --show-toplevel 2>/dev/null) || {
        echo "kvfuzz: $corpus is not in a git checkout; nothing to commit"
        exit 0
    }
    rel=${corpus#"$top"/}
    [ "$rel" = "$corpus" ] && rel=.  # CORPUS is the checkout's root itself
    # the store's own files and folders (locks, work in progress) start with a dot: never committed
    inside=$([ "$rel" = . ] && echo "" || echo "$rel/")
    paths=(-- "$rel" ":(exclude,glob)$inside**/.*" ":(exclude,glob)$inside**/.*/**")
    add=(git -C "$top" add "${paths[@]}")
    commit=(git -C "$top" commit -m "corpora: new cases from kvfuzz's $shards-shard run in $run_dir" "${paths[@]}")
    if [ -z "$(git -C "$top" status --porcelain --untracked-files=all "${paths[@]}")" ]; then
        echo "kvfuzz: no new cases in $corpus"
    elif [ "${COMMIT:-0}" = 1 ]; then
        "${add[@]}" && "${commit[@]}" || exit 2
    else
        echo "kvfuzz: new cases in $corpus; to commit them:"
        printf '%q ' "${add[@]}"; echo
        printf '%q ' "${commit[@]}"; echo
    fi
    ;;
*)
    echo "usage: kvfuzz-shards.sh submit|task|merge (see the header of this script)" >&2
    exit 2
    ;;
esac
