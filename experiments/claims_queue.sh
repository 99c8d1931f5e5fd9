#!/usr/bin/env bash
# Issue 50's CPU claims still to run, in the order declared in docs/notebook.md (session 64), from
# the worktrees of the commits they were declared to run from. Safe to start again at any time (a
# new session, a new machine): every finished run is kept in experiments/records/ and skipped,
# and a run cut off resumes from its checkpoint on the same machine.
#
#   nohup bash experiments/claims_queue.sh > ../claims_queue.log 2>&1 &   # from the main checkout
#   DRY=1 bash experiments/claims_queue.sh       # print the calls, run nothing
#
# `old`: the code every dreamcpu* run so far used (a9443d4) with the script that declared the
# new arms (694fff9), for what pairs with dreamcpubest's runs (cpu_malloc=system, as they ran);
# `new`: ebc1c2c's own script, for the paper-settings measurements (none had run when it made
# the faster memory setting theirs); `squad`: the code squad1cpupaper's seeds 0-2 ran (3f5789e),
# for the seeds 3-4 the rule below owes it, with 694fff9's script (the same flags, and
# SEED_VALUES). A selection runs through its declared follow-ups
# (`claims.py followup`), then its arm's dreamcpubest at the choice; the paper-settings
# measurements run seed by seed (both arms of a seed before the next: a paired seed every two
# runs), then seeds 3 and 4 of a claim whose interval over seeds 0-2 holds 0 (issue 50's rule,
# `claims.py seeds`). Every ablations.sh call is one run (one arm, one seed, one rate), because
# ablations.sh keeps finished runs in experiments/records/ only when its call ends: a call of
# several runs cut off by the end of a session lost those it had finished with the machine.
# Each stage still has to be merged into docs/claims.json by hand (`claims.py select`, `merge`)
# and committed, with experiments/records/, before the session ends.
set -u
if [ -z "${CLAIMS_QUEUE_COPY:-}" ]; then  # bash reads a script as it runs: run a copy, so that
  copy=$(mktemp /tmp/claims_queue.XXXXXX.sh)  # a checkout or an edit cannot reach this run
  cp "$0" "$copy"
  CLAIMS_QUEUE_COPY=1 MAIN=$(cd "$(dirname "$0")/.." && pwd) exec bash "$copy" "$@"
fi
trap 'rm -f "$0"' EXIT  # the copy
MAIN=${MAIN:?}
PARENT=$(dirname "$MAIN")
export NLTK_DATA=${NLTK_DATA:-$PARENT/shared/data/nltk_data} RECORDS=$MAIN/experiments/records
CLAIMS=$MAIN/experiments/claims.py
declare -A TREE=([old]=$PARENT/claims-wt [script]=$PARENT/declared-wt [new]=$PARENT/paper-wt
                 [squad]=$PARENT/squad-wt)
declare -A COMMIT=([old]=a9443d4 [script]=694fff9 [new]=ebc1c2c [squad]=3f5789e)
declare -A SPEC=([enc]="model.head=none model.pos_embedding=false"
                 [poi]="model.head=poi model.pos_embedding=true"
                 [duma]="model.head=duma model.pos_embedding=false"
                 [nopos]="model.head=poi model.pos_embedding=false"
                 [pos]="model.head=none model.pos_embedding=true")
declare -A ARM_OF_CELL  # ablation.py's cell name (model.head-poi__model.pos_embedding-true) -> arm
for a in "${!SPEC[@]}"; do cell=${SPEC[$a]//=/-}; ARM_OF_CELL[${cell// /__}]=$a; done
S=${TREE[script]}/experiments/ablations.sh

stamp() { date -u +%FT%TZ; }
script_of() {  # the ablations.sh a worktree runs: its own at ebc1c2c, 694fff9's for the others
  if [ "$1" = new ]; then echo experiments/ablations.sh; else echo "$S"; fi
}
run() {  # run old|new|squad MEASUREMENT ENV...: one ablations.sh call, niced, from its worktree
  local how=$1 what=$2; shift 2
  echo "== $how $what $* $(stamp)"
  [ -n "${DRY:-}" ] && return 0
  local script; script=$(script_of "$how")
  (cd "${TREE[$how]}" && env "$@" nice -n 19 bash "$script" run "$what"); local rc=$?
  echo "== rc=$rc $(stamp)"; return $rc
}
each_arm() {  # each_arm HOW MEASUREMENT "ARMS" SEED ENV...: one run a call, the arms in turn
  local how=$1 what=$2 arms=$3 seed=$4 a; shift 4
  for a in $arms; do
    run "$how" "$what" ARMS="$a" "$@" SEEDS=$((seed + 1)) SEED_VALUES="$seed" || return 1
  done
}
by_seed() {  # by_seed old|new MEASUREMENT N "ARMS": seeds 0..N-1, each seed's arms in turn
  local how=$1 what=$2 n=$3 arms=$4 s
  for ((s = 0; s < n; s++)); do each_arm "$how" "$what" "$arms" $s || return 1; done
}
more_seeds() {  # more_seeds HOW MEASUREMENT ARMS: seeds 3-4 where a claim's 0-2 interval holds 0
  local how=$1 what=$2 arms=$3 d out seed s m cell want
  if [ -n "${DRY:-}" ]; then
    echo "== (seeds 3-4 of $what where a claim's interval holds 0, by claims.py seeds)"; return 0
  fi
  for _ in 1 2 3; do  # one seed a call (both cells of it): 2 owed at most, then none
    (cd "${TREE[$how]}" && ARMS="$arms" SEEDS=5 bash "$(script_of "$how")" table "$what" \
       > /dev/null 2>&1)  # gathers every finished run of the measurement
    local runs=()  # (with claims.json's merged seeds: squad1cpupaper's 0-2 ran on a lost machine)
    for d in "${TREE[$how]}/workdir-ablations/$what" "${TREE[$how]}/workdir-ablations/$what"-*; do
      [ -f "$d/ablation.json" ] && runs+=("--runs=${d##*/}=$d/ablation.json")
    done
    out=$(python3 "$CLAIMS" seeds "${runs[@]}") || return 1
    seed= want=()
    while IFS=$'\t' read -r s m cell; do
      [ -n "$s" ] || continue
      seed=${seed:-$s}
      [ "$s" = "$seed" ] || continue
      if [ "$m" = "$what" ]; then want+=("${ARM_OF_CELL[$cell]:?no arm for cell $cell}")
      else want+=("${m#"$what"-}"); fi  # qopncpupaper-window: the arm is the directory's suffix
    done <<< "$out"
    [ -n "$seed" ] || return 0
    each_arm "$how" "$what" "${want[*]}" "$seed" || return 1
  done
}
owed() {  # owed ARM [--choices]: what dreamcpusel's declared follow-ups still owe ARM
  local arm=$1; shift
  (cd "${TREE[old]}" && ARMS=$arm LRS="1e-5 2e-5 5e-5 1e-4 2e-4" SEEDS=2 \
     bash "$S" table dreamcpusel > /dev/null 2>&1  # gathers every finished run of the arm
   python3 "$CLAIMS" followup --name=dreamcpusel --metric=accuracy \
     --ablation=workdir-ablations/dreamcpusel/ablation.json --arms="{\"$arm\": \"${SPEC[$arm]}\"}" "$@")
}
select_then_best() {  # select_then_best ARM LR_VAR: dreamcpusel and its follow-ups, then best
  local arm=$1 var=$2 next line kv choice lr s
  for lr in 2e-5 5e-5 1e-4; do  # the declared grid (ablations.sh's dreamcpusel default LRS)
    run old dreamcpusel ARMS="$arm" LRS=$lr || return 1
  done
  if [ -n "${DRY:-}" ]; then
    echo "== (follow-ups of $arm by claims.py followup)"
    for s in 0 1 2 3 4; do run old dreamcpubest "$var=<choice>" SEEDS=$((s + 1)) SEED_VALUES=$s; done
    return
  fi
  for _ in 1 2 3 4; do  # each follow-up once at most (claims.py followup): 2 rounds suffice
    mapfile -t next < <(owed "$arm")  # read whole: a run must not read the list as its stdin
    [ ${#next[@]} -gt 0 ] || break
    for line in "${next[@]}"; do  # a run a line: ARMS=duma LRS=2e-4 SEEDS=2 SEED_VALUES=1
      IFS=$'\t' read -r -a kv <<< "$line"
      run old dreamcpusel "${kv[@]}" || return 1
    done
  done
  choice=$(owed "$arm" --choices) || return 1
  echo "== $arm chooses ${choice#*=} $(stamp)"
  for s in 0 1 2 3 4; do  # dreamcpubest's 5 seeds
    run old dreamcpubest "$var=${choice#*=}" SEEDS=$((s + 1)) SEED_VALUES=$s || return 1
  done
}
screen() {  # screen: dreamcpuwhy's options at POI-Net's chosen rate, seed by seed
  local s why
  for s in 0 1 2; do
    for why in stop add concat zeros lr10; do
      run old dreamcpuwhy WHY=$why POI_LR=5e-5 SEEDS=$((s + 1)) SEED_VALUES=$s || return 1
    done
  done
}

if [ -z "${DRY:-}" ]; then  # one queue at a time: two would train the same run directories
  exec 9> "$PARENT/claims_queue.lock"
  flock -n 9 || { echo "claims_queue.sh: another queue holds $PARENT/claims_queue.lock" >&2; exit 1; }
fi
for how in "${!TREE[@]}"; do  # the worktrees, made again on a new machine
  [ -d "${TREE[$how]}" ] || [ -n "${DRY:-}" ] \
    || git -C "$MAIN" worktree add --detach "${TREE[$how]}" "${COMMIT[$how]}" || exit 1
done
more_seeds squad squad1cpupaper "enc nopos poi"  # owed since 2026-11-27 (session 66)
by_seed new dreamcpupaper 3 "enc poi"
more_seeds new dreamcpupaper "enc poi"
select_then_best duma DUMA_LR
by_seed new dumacpupaper 3 "enc duma"
more_seeds new dumacpupaper "enc duma"
by_seed new qopncpupaper 3 "qopn window"
more_seeds new qopncpupaper "qopn window"
screen
select_then_best nopos NOPOS_LR
select_then_best pos POS_LR
by_seed new dreamcpupaper 3 "nopos pos"
more_seeds new dreamcpupaper "enc poi nopos pos"
echo "== queue done $(stamp)"
