#!/usr/bin/env bash
# Start N poi-jax processes on this machine, joined by jax.distributed (CPU, gloo collectives):
# the way to test multi-host code paths without a cluster.
#
# Usage:
#   launch/local_multiprocess.sh [--dry-run] -- --config=configs/squad2.py:tiny --workdir=/tmp/run \
#       --mode=train_and_eval [--config.x.y=v ...]
#
# Variables (environment):
#   NPROCS            number of processes (default 2)
#   PORT              coordinator port on 127.0.0.1 (default 12355)
#   DEVICES_PER_PROC  simulated CPU devices per process (default 1)
#   LOG_DIR           per-process logs proc<i>.log (default: a new temporary directory)
#   PYTHON            interpreter (default python)
# Every argument after "--" goes to `python -m poi_jax.main`. Exit status: the first non-zero
# status of the processes (143 = preempted by SIGTERM, checkpoint saved), else 0.
set -euo pipefail

DRY_RUN=0
if [[ "${1:-}" == "--dry-run" ]]; then DRY_RUN=1; shift; fi
if [[ "${1:-}" == "--" ]]; then shift; fi

NPROCS="${NPROCS:-2}"
PORT="${PORT:-12355}"
DEVICES_PER_PROC="${DEVICES_PER_PROC:-1}"
PYTHON="${PYTHON:-python}"
LOG_DIR="${LOG_DIR:-$(mktemp -d -t poi-jax-local-XXXXXX)}"

cmd_for() {
  echo "JAX_PLATFORMS=cpu JAX_CPU_COLLECTIVES_IMPLEMENTATION=gloo" \
       "XLA_FLAGS=--xla_force_host_platform_device_count=${DEVICES_PER_PROC}" \
       "${PYTHON} -m poi_jax.main --coordinator_address=127.0.0.1:${PORT}" \
       "--num_processes=${NPROCS} --process_id=$1 $(printf '%q ' "${@:2}")"
}

if [[ "${DRY_RUN}" == 1 ]]; then
  for ((i = 0; i < NPROCS; i++)); do
    echo "$(cmd_for "$i" "$@") > ${LOG_DIR}/proc${i}.log 2>&1 &"
  done
  echo "wait"
  exit 0
fi

mkdir -p "${LOG_DIR}"
pids=()
trap 'kill -TERM "${pids[@]}" 2>/dev/null || true' TERM INT
for ((i = 0; i < NPROCS; i++)); do
  JAX_PLATFORMS=cpu JAX_CPU_COLLECTIVES_IMPLEMENTATION=gloo \
  XLA_FLAGS="--xla_force_host_platform_device_count=${DEVICES_PER_PROC}" \
    "${PYTHON}" -m poi_jax.main --coordinator_address="127.0.0.1:${PORT}" \
      --num_processes="${NPROCS}" --process_id="${i}" "$@" > "${LOG_DIR}/proc${i}.log" 2>&1 &
  pids+=($!)
done
echo "started ${NPROCS} processes; logs in ${LOG_DIR}" >&2
status=0
for pid in "${pids[@]}"; do
  rc=0
  wait "${pid}" || rc=$?
  if [[ "${status}" == 0 && "${rc}" != 0 ]]; then status="${rc}"; fi
done
if [[ "${status}" != 0 ]]; then
  echo "a process failed (status ${status}); see ${LOG_DIR}/proc*.log" >&2
fi
exit "${status}"
