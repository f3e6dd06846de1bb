#!/usr/bin/env bash
# Example sharded campaign on Slurm: one array task per lane runs that lane's shard, all
# at the same time; a dependent job pools the shards into ONE verdict.
#
#   jobid=$(sbatch --parsable --array=0-1 examples/ci/sharded-slurm.sh)
#   sbatch --dependency=afterany:$jobid examples/ci/sharded-slurm.sh pool "$jobid"
#
# --array=0-N: N+1 tasks for the N+1 lanes in LANES below (task i runs LANES[i]).
# afterany: the pool job runs even when a lane's task failed; a lane without a shard
# makes the pooled verdict incomplete. Submit from the repository (the job runs in
# $SLURM_SUBMIT_DIR); SHARDS must be on a filesystem every node and the pool job share.
# Slurm gives each task a whole node (--exclusive) from the partition: this fits lanes
# that are identical nodes and whose `lanes:` entries differ by name (and ports) only.
# To tie a lane to one machine, submit one single-task array per lane instead:
#   sbatch --parsable --array=1 --nodelist=gb300-b examples/ci/sharded-slurm.sh
# and pool with --dependency=afterany:JOB_A:JOB_B ... pool JOB_A JOB_B.
#
# Each lane: `spec-ab clean` (leftovers of a crashed night), `spec-ab check --lane` (this
# lane's launches and this node), `spec-ab run --lane --out $SHARDS/<job id>` (4,
# finished but incomplete, is judged by the pool; any other failure fails the task), and
# `spec-ab clean` again on the way out. Pool: `spec-ab report SHARD...` as JSON, Markdown
# and HTML into $SHARDS/<job id>/pooled/, then one named outcome: adopt (exit 0) or
# keep-default / loss / unstable / incomplete (exit 4, each named). Every lane must run
# the same, unchanged campaign file, or `report` refuses to pool (exit 2).
# docs/nightly-ci.md ("Several lanes") explains the steps and the exit codes.
#
# Without Slurm (one machine, by hand): SLURM_ARRAY_TASK_ID=0 SLURM_ARRAY_JOB_ID=42 \
#   bash examples/ci/sharded-slurm.sh, then `bash examples/ci/sharded-slurm.sh pool 42`.
#SBATCH --job-name=spec-ab-shard
#SBATCH --nodes=1
#SBATCH --exclusive
#SBATCH --time=12:00:00
#SBATCH --output=spec-ab-%A_%a.log
set -euo pipefail

LANES=(gb300-a gb300-b)   # the campaign's `lanes:`, one per array task (--array=0-1)
CAMPAIGN=${CAMPAIGN:-campaigns/sharded.yaml}
SHARDS=${SHARDS:-/srv/spec-ab/shards}   # shared: each job's shards in SHARDS/<job id>
SPEC_AB=${SPEC_AB:-.venv/bin/spec-ab}

cd "${SLURM_SUBMIT_DIR:-.}"

shard() {
    if [ -z "${SLURM_ARRAY_TASK_ID:-}" ]; then
        echo "not an array task: sbatch --array=0-$((${#LANES[@]} - 1)) $0" >&2
        exit 2
    fi
    if [ "$SLURM_ARRAY_TASK_ID" -ge "${#LANES[@]}" ]; then
        echo "array task $SLURM_ARRAY_TASK_ID: LANES has ${#LANES[@]} lanes" >&2
        exit 2
    fi
    local lane=${LANES[$SLURM_ARRAY_TASK_ID]}
    local out="$SHARDS/${SLURM_ARRAY_JOB_ID:-${SLURM_JOB_ID:-manual}}"
    mkdir -p "$out"
    echo "lane $lane on $(hostname): shard into $out"
    "$SPEC_AB" clean "$CAMPAIGN"
    trap '"$SPEC_AB" clean "$CAMPAIGN" > /dev/null || true' EXIT
    "$SPEC_AB" check "$CAMPAIGN" --lane "$lane"
    local status=0
    # $out/<lane>.run_dir names this lane's run directory as soon as it exists; a
    # requeued task overwrites it, so the pool takes one shard per lane.
    "$SPEC_AB" run "$CAMPAIGN" --lane "$lane" --out "$out" \
        --run-dir-file "$out/$lane.run_dir" || status=$?
    if [ "$status" -ne 0 ] && [ "$status" -ne 4 ]; then exit "$status"; fi
}

pool() {
    if [ "$#" -eq 0 ]; then
        echo "usage: $0 pool JOB_ID... (the array job(s) whose shards to pool)" >&2
        exit 2
    fi
    local out="$SHARDS/$1" dirs=() job lane
    for lane in "${LANES[@]}"; do
        for job in "$@"; do
            if [ -s "$SHARDS/$job/$lane.run_dir" ]; then
                dirs+=("$(cat "$SHARDS/$job/$lane.run_dir")")
                continue 2
            fi
        done
        echo "lane $lane: no shard (its task failed before its run directory existed)" >&2
    done
    if [ "${#dirs[@]}" -eq 0 ]; then
        echo "no shard in $SHARDS/{$*}" >&2
        exit 3
    fi
    mkdir -p "$out/pooled"
    "$SPEC_AB" report "${dirs[@]}" --format json --output "$out/pooled/report.json"
    "$SPEC_AB" report "${dirs[@]}" --format markdown --output "$out/pooled/report.md"
    "$SPEC_AB" report "${dirs[@]}" --format html --output "$out/pooled/report.html"
    local failed="" cond status
    for cond in incomplete unstable loss keep-default; do
        status=0
        "$SPEC_AB" -q report "${dirs[@]}" --format json --fail-on "$cond" > /dev/null \
            || status=$?
        if [ "$status" -eq 4 ]; then failed="$failed $cond"
        elif [ "$status" -ne 0 ]; then exit "$status"; fi
    done
    echo "verdict:${failed:- adopt}" | tee "$out/pooled/verdict.txt"
    [ -z "$failed" ] || exit 4
}

case "${1:-shard}" in
    shard) shard ;;
    pool) shift; pool "$@" ;;
    *) echo "usage: $0 [shard | pool JOB_ID...]" >&2; exit 2 ;;
esac
