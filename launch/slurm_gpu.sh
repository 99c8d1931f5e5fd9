#!/usr/bin/env bash
# Multi-node training under SLURM: one poi-jax process per GPU (default), per GPU host, or
# TASKS_PER_NODE per CPU node (PER=cpu), joined by jax.distributed, which reads SLURM's
# environment (--distributed=auto).
#
# Usage (inside an allocation, or submitted with sbatch):
#   NODES=4 GPUS_PER_NODE=8 launch/slurm_gpu.sh [--dry-run] -- \
#       --config=configs/squad2.py --workdir=/shared/runs/squad2 --mode=train_and_eval
#   sbatch --nodes=4 --gpus-per-node=8 launch/slurm_gpu.sh -- --config=... --workdir=...
#
# Variables (environment):
#   NODES           number of nodes (default: SLURM_JOB_NUM_NODES, else 1)
#   GPUS_PER_NODE   GPUs per node (default: SLURM_GPUS_ON_NODE, else 8)
#   PER             "gpu": one process per GPU (each sees one GPU); "host": one process per node
#                   seeing all its GPUs; "cpu": TASKS_PER_NODE processes per node on the CPU
#                   (JAX_PLATFORMS=cpu; CPU clusters, and tests/slow/test_slurm.py) (default gpu)
#   TASKS_PER_NODE  PER=cpu: processes per node (default 1)
#   PYTHON          interpreter on the nodes (default python)
#   SRUN_ARGS       extra srun arguments (partition, account, container flags ...)
# The workdir must be on a file system every node sees (checkpoints are written by all
# processes, metrics and predictions by process 0). A run preempted with SIGTERM exits 143 after
# saving; submit the same command again (or use sbatch --requeue) to resume.
# A lost process (node failure, OOM kill): srun --kill-on-bad-exit=1 ends the job step, and each
# surviving process's watchdog stops it first with one line naming the lost one
# (config.distributed.watchdog_timeout_s, default 30 s, below JAX's heartbeat timeout
# config.distributed.heartbeat_timeout_s, default 100 s). On a busy shared file system raise
# both together, e.g. --config.distributed.watchdog_timeout_s=60
# --config.distributed.heartbeat_timeout_s=120; resubmit to resume (docs/reliability.md).
# The loss of process 0 (it hosts JAX's coordination service) is one line on every other task
# within a second. A task alive but hung (a deadlocked input pipeline) is named by every task
# config.distributed.stuck_timeout_s (default 300 s; 0: off) after the others moved past it.
set -euo pipefail

DRY_RUN=0
if [[ "${1:-}" == "--dry-run" ]]; then DRY_RUN=1; shift; fi
if [[ "${1:-}" == "--" ]]; then shift; fi

NODES="${NODES:-${SLURM_JOB_NUM_NODES:-1}}"
GPUS_PER_NODE="${GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-8}}"
PER="${PER:-gpu}"
PYTHON="${PYTHON:-python}"
SRUN_ARGS="${SRUN_ARGS:-}"

case "${PER}" in
  gpu) TASKS_PER_NODE="${GPUS_PER_NODE}"; GPU_BIND="--gpus-per-task=1" ;;
  host) TASKS_PER_NODE=1; GPU_BIND="--gpus-per-task=${GPUS_PER_NODE}" ;;
  cpu) TASKS_PER_NODE="${TASKS_PER_NODE:-1}"; GPU_BIND=""; export JAX_PLATFORMS=cpu ;;
  *) echo "PER must be gpu, host or cpu, got '${PER}'" >&2; exit 2 ;;
esac

CMD=(srun --nodes="${NODES}" --ntasks-per-node="${TASKS_PER_NODE}" ${GPU_BIND}
     --kill-on-bad-exit=1 ${SRUN_ARGS}
     "${PYTHON}" -m poi_jax.main --distributed=auto "$@")

if [[ "${DRY_RUN}" == 1 ]]; then
  printf '%q ' "${CMD[@]}"; echo
  exit 0
fi
exec "${CMD[@]}"
