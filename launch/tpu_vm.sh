#!/usr/bin/env bash
# Training on a Cloud TPU VM pod slice: the same command on every worker through
# `gcloud compute tpus tpu-vm ssh --worker=all`; jax.distributed finds the other workers itself
# (--distributed=auto).
#
# Usage:
#   TPU_NAME=my-v4-32 ZONE=us-central2-b launch/tpu_vm.sh [--dry-run] -- \
#       --config=configs/squad2.py --workdir=/mnt/gcs/runs/squad2 --mode=train_and_eval
#
# Variables (environment):
#   TPU_NAME   the TPU VM name (required)
#   ZONE       its zone (required)
#   PROJECT    the GCP project (default: gcloud's configured project)
#   REPO_DIR   where poi-jax is checked out on the workers (default ~/poi-jax)
#   SETUP      a command run first on every worker, e.g. "pip install -e ~/poi-jax" (default none)
#   PYTHON     interpreter on the workers (default python3)
# The workdir must be a path every worker sees (e.g. a bucket mounted with gcsfuse at /mnt/gcs):
# metrics and predictions are written with ordinary file I/O. A preempted run exits 143
# after saving its checkpoint; run the same command again to resume.
# A lost worker (host maintenance, a crash): every other worker's watchdog stops it within
# config.distributed.watchdog_timeout_s (default 30 s) with one line naming the lost worker, so
# `gcloud ... --worker=all` returns instead of idling the slice until JAX's heartbeat timeout
# (config.distributed.heartbeat_timeout_s, 100 s). Large slices whose first compile or
# initialization is slow: raise config.distributed.initialization_timeout_s. Run the same command
# again to resume from the last checkpoint (docs/reliability.md). Worker 0 hosts JAX's
# coordination service: its loss is one line on every other worker within a second. A worker
# alive but hung (its input pipeline deadlocked) is named by every worker
# config.distributed.stuck_timeout_s (default 300 s; 0: off) after the others moved past it.
set -euo pipefail

DRY_RUN=0
if [[ "${1:-}" == "--dry-run" ]]; then DRY_RUN=1; shift; fi
if [[ "${1:-}" == "--" ]]; then shift; fi

: "${TPU_NAME:?set TPU_NAME to the TPU VM name}"
: "${ZONE:?set ZONE to the TPU VM zone}"
REPO_DIR="${REPO_DIR:-~/poi-jax}"
PYTHON="${PYTHON:-python3}"
SETUP="${SETUP:-}"

REMOTE="cd ${REPO_DIR} && "
if [[ -n "${SETUP}" ]]; then REMOTE+="${SETUP} && "; fi
REMOTE+="${PYTHON} -m poi_jax.main --distributed=auto $(printf '%q ' "$@")"

CMD=(gcloud compute tpus tpu-vm ssh "${TPU_NAME}" --zone="${ZONE}" --worker=all)
if [[ -n "${PROJECT:-}" ]]; then CMD+=(--project="${PROJECT}"); fi
CMD+=(--command="${REMOTE}")

if [[ "${DRY_RUN}" == 1 ]]; then
  printf '%q ' "${CMD[@]}"; echo
  exit 0
fi
exec "${CMD[@]}"
