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
#   GRACE_S           when a process fails, seconds the others get to stop by themselves before
#                     SIGKILL (default 45; their watchdog stops them within
#                     config.distributed.watchdog_timeout_s, 30 by default)
# Every argument after "--" goes to `python -m poi_jax.main`. Exit status: the first non-zero
# status of the processes, the cause preferred (143 = preempted by SIGTERM, checkpoint saved;
# 137 = one was killed; 70 = one stopped because another was lost or stuck), else 0. Relaunch
# the same command to resume from the last checkpoint (docs/reliability.md).
set -euo pipefail

DRY_RUN=0
if [[ "${1:-}" == "--dry-run" ]]; then DRY_RUN=1; shift; fi
if [[ "${1:-}" == "--" ]]; then shift; fi

NPROCS="${NPROCS:-2}"
PORT="${PORT:-12355}"
DEVICES_PER_PROC="${DEVICES_PER_PROC:-1}"
PYTHON="${PYTHON:-python}"
GRACE_S="${GRACE_S:-45}"
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
# As torchrun's agent does: the first process to fail takes the others down. They get GRACE_S
# seconds to notice by themselves (their watchdog prints one line naming the lost process and
# exits, poi_jax/faults/watchdog.py), then SIGKILL. The exit status is the failed process's: a
# process that stopped because another was lost (70) can be reaped before the lost one, so a
# later status other than 70 (the cause: 137 for a SIGKILL) replaces it.
LOST=70
status=0
live=("${pids[@]}")
while (( ${#live[@]} > 0 )); do
  rc=0
  done_pid=""
  wait -n -p done_pid "${live[@]}" || rc=$?
  next=()
  for pid in "${live[@]}"; do [[ "${pid}" != "${done_pid}" ]] && next+=("${pid}"); done
  live=("${next[@]}")
  [[ "${rc}" == 0 ]] && continue
  for ((i = 0; i < NPROCS; i++)); do [[ "${pids[$i]}" == "${done_pid}" ]] && failed=$i; done
  why="status ${rc}"
  if (( rc > 128 )); then why+=" ($(kill -l $((rc - 128)) 2>/dev/null || echo signal))"; fi
  if [[ "${status}" != 0 ]]; then
    # every failure is named (a crash after the first failure is not hidden), and a later cause
    # (not 70) replaces a first "stopped because another was lost"
    echo "process ${failed:-?} failed with ${why}" >&2
    if [[ "${status}" == "${LOST}" && "${rc}" != "${LOST}" ]]; then status="${rc}"; fi
    continue
  fi
  status="${rc}"
  echo "process ${failed:-?} failed with ${why}; stopping the others (${GRACE_S}s grace)" >&2
  # (Its own stdio, and its sleep ended with it: a caller reading the launcher's output must
  # not wait GRACE_S for a sleep that still holds the pipe.)
  (
    sleep "${GRACE_S}" &
    sleeper=$!
    trap 'kill "${sleeper}" 2>/dev/null; exit 0' TERM
    wait "${sleeper}"
    kill -KILL "${pids[@]}" 2>/dev/null || true
  ) </dev/null >/dev/null 2>&1 &
  killer=$!
done
if [[ -n "${killer:-}" ]]; then kill "${killer}" 2>/dev/null || true; fi
if [[ "${status}" != 0 ]]; then
  echo "a process failed (status ${status}); see ${LOG_DIR}/proc*.log" >&2
fi
exit "${status}"
