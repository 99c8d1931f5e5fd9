#!/usr/bin/env bash
# The measurements of docs/ablations.md, each 3 seeds with the slow suite's settings.
#
#   bash experiments/ablations.sh carry MEASUREMENT   # here: build .carry/ (wheels, data, MiniLM)
#   source experiments/device_setup.sh && bash experiments/ablations.sh run MEASUREMENT   # device
#   bash experiments/ablations.sh table MEASUREMENT   # here, after unpacking the results: the table
#   bash experiments/ablations.sh keep MEASUREMENT    # its finished runs into experiments/records/
#
# MEASUREMENT: qopn (QOPN vs sliding window; BLOCKS=paper_residual: QOPN's default blocks
# alone), dream1 (plain encoder, POI-Net without POS), dream2 (POI-Net, DUMA), dream (the DREAM
# claims' three cells at once: dream1's plain encoder and dream2's two, into their work
# directories; 5 seeds in 9 minutes of an H200), dreamsel (the DREAM claim's learning-rate
# selection, "each arm at its best": the plain encoder and POI-Net at each rate of LRS, default
# 1e-5 2e-5 3e-5 5e-5, trained on 90% of the training dialogues and scored on the other 10%,
# SEEDS default 1; ARMS=3 adds DUMA, ARMS=duma runs DUMA alone; declared 2026-11-26 before any
# of its runs, DUMA's grid and rule 2026-11-29), dreambest (the evaluation stage after dreamsel:
# each arm at its chosen rate, ENC_LR for the plain encoder, POI_LR for POI-Net, DUMA_LR for DUMA,
# any left unset to skip that arm, train -> dev, SEEDS default 5),
# dreamwhysel (issue 50's "why POI-Net trails": POI-Net with each diagnostic option of
# docs/models.md through dreamsel's selection, i.e. each rate of LRS, default 2e-5 3e-5 5e-5 8e-5,
# on the held-out split, seed 0; WHY="..." picks some of: stop add concat zeros lr10),
# dreampaper (the DREAM claim at the paper's settings, POI-Net's Table 2: lr 1e-5, 512 tokens,
# batch 24, 4 epochs, with all-MiniLM-L6-v2 for ALBERT; the plain encoder and POI-Net, SEEDS
# default 3; ARM=enc or ARM=poi runs one arm, if one device call cannot hold both), dumapaper
# (DUMA's claim at DUMA's settings for DREAM: lr 1e-5, batch 8, 100 warm-up steps, 2 epochs,
# 512 tokens; DUMA and the plain encoder, SEEDS default 3, ARM=enc or ARM=duma),
# squad2 (plain encoder, POI-Net without POS,
# POI-Net), nq (graph layers 0 vs 2), probe10 (the long-context
# probe's QOPN, both block styles, and window cells, 10 epochs; DISTRACTORS=1|3|5). `run` writes
# workdir-ablations/<name>/ and packs the small result files (tables, eval_results.json,
# DONE.json, logs, configs, environment.json, predictions.json) into $OUT/<MEASUREMENT>.tgz (or
# workdir-ablations/<MEASUREMENT>.tgz without $OUT). Each `run` fits one 10-minute device command
# on an H100 (estimated from the slow suite's wall times: docs/results.md).
#
# CPU-scale measurements (run here, no carry; each run minutes on 2 cores; SEEDS=5 for five,
# SEED_VALUES=3,4 for seeds 3 and 4 only):
# squad1cpu (the CPU quickstart's task, configs/squad1.py:minilm_cpu unchanged: plain encoder,
# co-attention without POS, POI-Net), qopncpu (QOPN's default blocks vs the window on 2-paragraph
# articles, 1 epoch: the `qopn` claim sized for the CPU; data built here) and probe (the
# long-context probe: QOPN vs a window on articles whose answer needs two segments no window sees
# together; data generated here, seeded; DISTRACTORS=1|5 for the other counts, QOPN's default
# blocks and the window only); squad1cpu's claims under issue 50's two protocols: squad1cpusel
# (each arm at each rate of LRS on 2 held-out training articles), squad1cpubest (each arm at its
# choice: ENC_LR, NOPOS_LR, POI_LR) and squad1cpupaper (POI-Net's Table 2 settings); ARMS="enc
# nopos poi" (the default) picks the arms of squad1cpusel and squad1cpupaper; qopncpu's claim
# under the same two protocols: qopncpusel, qopncpubest (QOPN_LR, WINDOW_LR) and qopncpupaper
# (QOPN's settings), ARMS="qopn window"; a CPU-sized DREAM under both: dreamcpusel, dreamcpubest
# (ENC_LR, POI_LR, NOPOS_LR, POS_LR) and dreamcpupaper, ARMS="enc poi" (the default; "nopos pos"
# for the 2 x 2 of POS and co-attention), and dreamcpuwhy (the screen of "why POI-Net trails":
# WHY's options at POI_LR, 3 seeds); DUMA's claim at this size: ARMS=duma in dreamcpusel,
# DUMA_LR in dreamcpubest, and dumacpupaper (DUMA's settings, ARMS="enc duma") (each run 20-80
# min here, by CPU).
set -euo pipefail
cmd=${1:?usage: bash experiments/ablations.sh carry|run|table|keep|restore MEASUREMENT}
what=${2:?measurement: qopn dream dream1 dream2 dreamsel dreambest dreampaper dumapaper dreamwhysel squad2 nq squad1cpu squad1cpusel squad1cpubest squad1cpupaper qopncpu qopncpusel qopncpubest qopncpupaper dreamcpusel dreamcpubest dreamcpupaper dreamcpuwhy dumacpupaper probe probe10}
SHARED=${SHARED:-../shared/data}
W=workdir-ablations
MINILM=${MINILM:-/tmp/minilm}
DATA=${DATA:-/tmp/data}
# One evaluation at the end, no intermediate checkpoints, no HuggingFace export (the slow suite's).
ONCE="--config.train.eval_every=100000 --config.train.save_every=100000 --config.train.export_best=false"
# CPU runs of an hour or more (after ONCE, which it overrides): a checkpoint every 100 steps, so
# that a run killed with its session resumes from it on the same command instead of from step 0
# (a saved and resumed run equals the uninterrupted one: tests/faults/test_chaos.py).
RESUMABLE="--config.train.save_every=100"
# The CPU measurements' memory setting: glibc's defaults (system), as every CPU run before
# 2026-11-29 had; the paper-settings runs declared to start after that (dreamcpupaper,
# dumacpupaper, qopncpupaper) run with the default, auto (freed memory kept in training: the DREAM
# step 1.16-1.24x faster, docs/notebook.md's session 64), from a worktree of a commit that has it.
# It changes how memory is handed out, not what is computed.
CPU_MALLOC="--config.runtime.cpu_malloc=system"
RUN="python3 experiments/ablation.py --seeds=${SEEDS:-3}"
# SEED_VALUES=3,4: only those seeds (over SEEDS), e.g. to add seeds to a measurement run before
[ -n "${SEED_VALUES:-}" ] && RUN="$RUN --seed_values=$SEED_VALUES"
[ "$cmd" = table ] && RUN="$RUN --no_run"
# Finished runs kept in the repository (experiments/records.py), so that a measurement spanning
# sessions survives a change of machine. RECORDS: where they live (default: this checkout's
# experiments/records; from a worktree of the measurement's commit, RECORDS=../main/experiments/records).
HERE=$(cd "$(dirname "$0")" && pwd)
RECORDS=${RECORDS:-$HERE/records}
records() {  # keep|restore: every work directory of $what ($W/$what, $W/$what-*)
  local d
  if [ "$1" = keep ]; then  # (not on a device's copy of the tree: no git, no commit to record)
    git rev-parse --git-dir > /dev/null 2>&1 || return 0
    for d in "$W/$what" "$W/$what"-*; do
      [ -d "$d" ] && { python3 "$HERE/records.py" keep "$d" --records="$RECORDS" || return 1; }
    done
  else  # (only where records exist: a device's copy of the tree may not be a git work tree)
    for d in "$RECORDS/$what" "$RECORDS/$what"-*; do
      [ -d "$d" ] && python3 "$HERE/records.py" restore "$W/${d##*/}" --records="$RECORDS"
    done
  fi
  return 0
}
case $cmd in
  keep|restore) records "$cmd"; exit 0 ;;
  run|table) records restore ;;
esac

wheels() {  # the packages the device image lacks (docs/ablations.md), for its Python 3.12
  mkdir -p .carry/whl
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .carry/whl ml_collections==1.1.0 nltk==3.10.4 \
    tensorboardX==2.6.5 grain==0.2.18 array-record==0.8.6 portpicker==1.6.0 defusedxml==0.7.1 \
    ijson==3.6.0 "$@"
}

if [ "$cmd" = carry ]; then
  rm -rf .carry && mkdir -p .carry /tmp/ablation-data
  wheels
  case $what in
    dream|dream1|dream2|dreamsel|dreambest|dreampaper|dreamwhysel)
      tar -cJf .carry/data.tar.xz -C "$SHARED" nltk_data dream
      python3 experiments/pack_minilm.py pack --data="$SHARED/dream/train.json" \
        --data="$SHARED/dream/dev.json" --out=.carry/minilm.pack ;;
    qopn|squad2)
      python3 experiments/ablation_data.py --out=/tmp/ablation-data --only=squad2,qopn
      tar -cJf .carry/data.tar.xz -C "$SHARED" nltk_data -C /tmp/ablation-data squad2 qopn
      python3 experiments/pack_minilm.py pack --data="$SHARED/squad2/squad2-dev-subset.json" \
        --out=.carry/minilm.pack ;;
    probe|probe10)  # the probe's articles with 1, 3 and 5 distractors, generated here (seeded),
      for d in 1 3 5; do  # and the MiniLM rows they use
        python3 experiments/long_context_probe.py --out=/tmp/ablation-data/probe-d$d --seed=100 \
          --train=600 --eval=150 --segments=3 --distractors=$d --filler=5
      done
      tar -cJf .carry/data.tar.xz -C "$SHARED" nltk_data -C /tmp/ablation-data probe-d1 probe-d3 \
        probe-d5
      python3 experiments/pack_minilm.py pack --data=/tmp/ablation-data/probe-d1 \
        --data=/tmp/ablation-data/probe-d3 --data=/tmp/ablation-data/probe-d5 \
        --out=.carry/minilm.pack ;;
    nq)  # + spaCy (the sentencizer) and its dependencies: see docs/ablations.md
      python3 experiments/ablation_data.py --out=/tmp/ablation-data --only=nq
      tar -cJf .carry/data.tar.xz -C "$SHARED" nltk_data -C /tmp/ablation-data nq
      python3 experiments/pack_minilm.py pack --data=/tmp/ablation-data/nq \
        --out=.carry/minilm.pack ;;
    *) echo "unknown measurement $what" >&2; exit 2 ;;
  esac
  du -sh .carry; du -sh --exclude=.git --exclude=.carry . ; exit 0
fi

measure_dream() {  # CELLS... into $W/$what, every run of them at once
  $RUN --config=configs/dream.py:minilm "$@" --parallel=$(( ${SEEDS:-3} * $# / 2 )) \
    --metrics=accuracy --workdir=$W/$what -- --config.model.init_from=$MINILM \
    --config.data.train_file=$DATA/dream/train.json --config.data.eval_file=$DATA/dream/dev.json \
    --config.train.max_steps=-1 --config.train.epochs=3 --config.data.max_seq_length=256 \
    --config.train.batch_size=16 --config.optim.lr=5e-5 $ONCE
}

# Issue 50's diagnostics for "why POI-Net trails" (docs/models.md), by their WHY= names.
declare -A WHY_OPTION=([stop]="model.coattention.score_gradient=stop"
  [add]="model.coattention.output=add" [concat]="model.coattention.output=concat"
  [zeros]="model.coattention.pos_init=zeros" [lr10]="optim.new_params_lr_scale=10")

measure() {
case $what in
  qopn)  # tests/slow/test_qopn_vs_sliding_window.py: lr 1e-4, 10 epochs, 256-token windows
    COMMON="--config.model.init_from=$MINILM --config.train.epochs=10 --config.train.max_steps=-1
      --config.data.max_seq_length=256 --config.data.max_query_length=48 --config.optim.lr=1e-4 $ONCE"
    # BLOCKS=paper_residual: QOPN's default blocks alone (3 runs; the window's seeds, measured
    # once, pair with them by number), declared 2026-11-26 for the next GPU session.
    local cells=()
    for b in ${BLOCKS:-transformer}; do cells+=(--cell "model.qopn.block_style=$b"); done
    $RUN --config=configs/newsqa.py:minilm "${cells[@]}" \
      --parallel=$(( ${SEEDS:-3} * ${#cells[@]} / 2 )) --metrics=exact_match,f1 --workdir=$W/qopn -- \
      $COMMON --config.data.train_file=$DATA/qopn/newsqa-train.json \
      --config.data.eval_file=$DATA/qopn/newsqa-dev.json & qopn=$!
    if [ -n "${BLOCKS:-}" ]; then wait $qopn; return; fi
    $RUN --config=configs/squad1.py:minilm --cell "model.head=none model.pos_embedding=false" \
      --parallel=3 --metrics=exact_match,f1 --workdir=$W/window -- $COMMON \
      --config.data.doc_stride=128 --config.train.batch_size=16 \
      --config.data.train_file=$DATA/qopn/squad-train.json \
      --config.data.eval_file=$DATA/qopn/squad-dev.json & window=$!
    wait $qopn; local a=$?; wait $window; return $(( a || $? )) ;;
  dream1|dream2|dream)  # tests/slow/test_real_results.py: all 6,116 train q -> dev, 3 epochs
    if [ $what = dream ]; then  # the claims' cells, 2 + 1 ablation runners sharing the device
      what=dream1 measure_dream --cell "model.head=none model.pos_embedding=false" & local one=$!
      what=dream2 measure_dream --cell "model.head=poi model.pos_embedding=true" \
        --cell "model.head=duma model.pos_embedding=false" & local two=$!
      wait $one; local a=$?; wait $two; return $(( a || $? ))
    fi
    if [ $what = dream1 ]; then
      CELLS=(--cell "model.head=none model.pos_embedding=false"
             --cell "model.head=poi model.pos_embedding=false")
    else
      CELLS=(--cell "model.head=poi model.pos_embedding=true"
             --cell "model.head=duma model.pos_embedding=false")
    fi
    measure_dream "${CELLS[@]}" ;;
  dreamsel)  # the selection stage of docs/ablations.md's "each arm at its best": dream's
    # settings but the rate, on a split of the training dialogues (never dev)
    local arms=("model.head=none model.pos_embedding=false" "model.head=poi model.pos_embedding=true")
    case ${ARMS:-2} in
      2) ;;
      3) arms+=("model.head=duma model.pos_embedding=false") ;;
      duma) arms=("model.head=duma model.pos_embedding=false") ;;  # DUMA's own selection
      *) echo "dreamsel: ARMS=2 (encoder, POI-Net), 3 (and DUMA) or duma" >&2; return 2 ;;
    esac
    local cells=()
    for arm in "${arms[@]}"; do
      for lr in ${LRS:-1e-5 2e-5 3e-5 5e-5}; do cells+=(--cell "$arm optim.lr=$lr"); done
    done
    $RUN --seeds=${SEEDS:-1} --config=configs/dream.py:minilm "${cells[@]}" --holdout=0.1 \
      --parallel=${PARALLEL:-${#cells[@]}} --metrics=accuracy --workdir=$W/dreamsel -- \
      --config.model.init_from=$MINILM --config.data.train_file=$DATA/dream/train.json \
      --config.data.eval_file=$DATA/dream/dev.json --config.train.max_steps=-1 \
      --config.train.epochs=3 --config.data.max_seq_length=256 --config.train.batch_size=16 $ONCE ;;
  dreambest)  # dreamsel's evaluation stage: dream's settings, each arm at its own chosen rate
    local cells=()
    [ -n "${ENC_LR:-}" ] && cells+=(--cell "model.head=none model.pos_embedding=false optim.lr=$ENC_LR")
    [ -n "${POI_LR:-}" ] && cells+=(--cell "model.head=poi model.pos_embedding=true optim.lr=$POI_LR")
    [ -n "${DUMA_LR:-}" ] && cells+=(--cell "model.head=duma model.pos_embedding=false optim.lr=$DUMA_LR")
    [ ${#cells[@]} -gt 0 ] || { echo "dreambest: set ENC_LR, POI_LR and/or DUMA_LR" >&2; return 2; }
    $RUN --seeds=${SEEDS:-5} --config=configs/dream.py:minilm "${cells[@]}" \
      --parallel=${PARALLEL:-$(( ${SEEDS:-5} * ${#cells[@]} / 2 ))} --metrics=accuracy \
      --workdir=$W/dreambest -- --config.model.init_from=$MINILM \
      --config.data.train_file=$DATA/dream/train.json --config.data.eval_file=$DATA/dream/dev.json \
      --config.train.max_steps=-1 --config.train.epochs=3 --config.data.max_seq_length=256 \
      --config.train.batch_size=16 $ONCE ;;
  dreamwhysel)  # dreamsel's selection for POI-Net with each diagnostic option (docs/models.md)
    local cells=()
    for why in ${WHY:-stop add concat zeros lr10}; do
      for lr in ${LRS:-2e-5 3e-5 5e-5 8e-5}; do
        cells+=(--cell "model.head=poi model.pos_embedding=true ${WHY_OPTION[$why]} optim.lr=$lr")
      done
    done
    $RUN --seeds=${SEEDS:-1} --config=configs/dream.py:minilm "${cells[@]}" --holdout=0.1 \
      --parallel=${PARALLEL:-10} --metrics=accuracy --workdir=$W/dreamwhysel -- \
      --config.model.init_from=$MINILM --config.data.train_file=$DATA/dream/train.json \
      --config.data.eval_file=$DATA/dream/dev.json --config.train.max_steps=-1 \
      --config.train.epochs=3 --config.data.max_seq_length=256 --config.train.batch_size=16 $ONCE ;;
  dreampaper)  # the paper's settings (configs/dream.py's own: lr 1e-5, 512, batch 24, 4 epochs)
    local cells=()
    [ "${ARM:-enc}" = poi ] || cells+=(--cell "model.head=none model.pos_embedding=false")
    [ "${ARM:-poi}" = enc ] || cells+=(--cell "model.head=poi model.pos_embedding=true")
    $RUN --seeds=${SEEDS:-3} --config=configs/dream.py:minilm "${cells[@]}" \
      --parallel=${PARALLEL:-$(( ${SEEDS:-3} * ${#cells[@]} ))} --metrics=accuracy \
      --workdir=$W/dreampaper -- --config.model.init_from=$MINILM \
      --config.data.train_file=$DATA/dream/train.json --config.data.eval_file=$DATA/dream/dev.json \
      --config.train.max_steps=-1 --config.train.epochs=4 --config.data.max_seq_length=512 \
      --config.train.batch_size=24 --config.optim.lr=1e-5 $ONCE ;;
  dumapaper)  # DUMA's claim at DUMA's own settings for DREAM (its section "Experimental
    # Settings": lr 1e-5, batch 8, 100 warm-up steps, 2 epochs; 512 tokens, the DREAM config's,
    # as the paper names no length) with all-MiniLM-L6-v2 for ALBERT: DUMA and the plain encoder,
    # SEEDS default 3; ARM=enc or ARM=duma runs one arm (declared 2026-11-29 before any run)
    local cells=()
    [ "${ARM:-enc}" = duma ] || cells+=(--cell "model.head=none model.pos_embedding=false")
    [ "${ARM:-duma}" = enc ] || cells+=(--cell "model.head=duma model.pos_embedding=false")
    $RUN --seeds=${SEEDS:-3} --config=configs/dream.py:minilm "${cells[@]}" \
      --parallel=${PARALLEL:-$(( ${SEEDS:-3} * ${#cells[@]} ))} --metrics=accuracy \
      --workdir=$W/dumapaper -- --config.model.init_from=$MINILM \
      --config.data.train_file=$DATA/dream/train.json --config.data.eval_file=$DATA/dream/dev.json \
      --config.train.max_steps=-1 --config.train.epochs=2 --config.data.max_seq_length=512 \
      --config.train.batch_size=8 --config.optim.lr=1e-5 --config.optim.warmup_steps=100 $ONCE ;;
  dreamcpusel|dreamcpubest|dreamcpupaper|dreamcpuwhy|dumacpupaper)  # DREAM sized for 2 CPU cores,
    # under issue 50's two protocols (declared 2026-11-27, session 51, before any of their runs;
    # the size from the pilot in docs/notebook.md): all-MiniLM-L6-v2 for ALBERT, 128 tokens for
    # 512, the plain encoder and POI-Net (ARMS="enc poi", the default), one run at a time. sel,
    # the selection stage: each arm at each rate of LRS (default 2e-5 5e-5 1e-4), batch 16, 2
    # epochs, trained on 90% of the training dialogues and scored on the other 10%
    # (--holdout=0.1, as dreamsel; dev never read), SEEDS default 1; best, the evaluation stage:
    # each arm at its choice (ENC_LR, POI_LR, NOPOS_LR, POS_LR; an unset one skipped), all
    # training dialogues -> dev, SEEDS default 5; paper, POI-Net's Table 2 for DREAM (lr 1e-5,
    # batch 24, 4 epochs), SEEDS default 3. The 2 x 2 of POS and co-attention (issue 50's item 4,
    # declared 2026-11-29, session 64, before any of their runs): ARMS="nopos pos" for the
    # co-attention without POS and the encoder with POS alone, through the same three stages.
    # why, the screen of item 4's diagnostics (the same declaration): POI-Net with each option of
    # WHY (default stop add concat zeros lr10) at POI-Net's chosen rate (POI_LR, default 5e-5),
    # best's settings, SEEDS default 3, each paired with POI-Net's own seeds in dreamcpubest.
    # DUMA's claim at this size (declared 2026-11-29, session 64, before any of its runs): the
    # arm duma through sel (ARMS=duma) and best (DUMA_LR), and dumacpupaper, DUMA's own settings
    # for DREAM (lr 1e-5, batch 8, 100 warm-up steps, 2 epochs) for DUMA and the plain encoder
    # (ARMS default "enc duma"), SEEDS default 3
    local seeds=${SEEDS:-5} cells=() holdout=() malloc=$CPU_MALLOC
    declare -A arm_of=([enc]="model.head=none model.pos_embedding=false"
                       [poi]="model.head=poi model.pos_embedding=true"
                       [nopos]="model.head=poi model.pos_embedding=false"
                       [pos]="model.head=none model.pos_embedding=true"
                       [duma]="model.head=duma model.pos_embedding=false")
    declare -A lr_of=([enc]="${ENC_LR:-}" [poi]="${POI_LR:-}" [nopos]="${NOPOS_LR:-}"
                      [pos]="${POS_LR:-}" [duma]="${DUMA_LR:-}")
    # (no optim.lr among the common flags for sel and best: ablation.py passes them after the
    # cells' own, so a rate there would override every cell's)
    local common="--config.train.max_steps=-1 --config.train.epochs=2 --config.train.batch_size=16"
    local arms=${ARMS:-enc poi}
    [ $what = dreamcpubest ] && arms=${ARMS:-enc poi nopos pos duma}  # (the unset rates skip)
    [ $what = dumacpupaper ] && arms=${ARMS:-enc duma}
    for a in $arms; do
      [ -n "${arm_of[$a]:-}" ] || { echo "$what: no arm '$a' (ARMS: enc poi nopos pos duma)" >&2; return 2; }
      case $what in
        dreamcpusel)
          for lr in ${LRS:-2e-5 5e-5 1e-4}; do cells+=(--cell "${arm_of[$a]} optim.lr=$lr"); done ;;
        dreamcpubest) [ -z "${lr_of[$a]}" ] || cells+=(--cell "${arm_of[$a]} optim.lr=${lr_of[$a]}") ;;
        dreamcpupaper|dumacpupaper) cells+=(--cell "${arm_of[$a]}") ;;
      esac
    done
    case $what in
      dreamcpusel) seeds=${SEEDS:-1} holdout=(--holdout=0.1) ;;
      dreamcpupaper) seeds=${SEEDS:-3} malloc=
        common="--config.train.max_steps=-1 --config.train.epochs=4 --config.train.batch_size=24
          --config.optim.lr=1e-5" ;;
      dumacpupaper) seeds=${SEEDS:-3} malloc=
        common="--config.train.max_steps=-1 --config.train.epochs=2 --config.train.batch_size=8
          --config.optim.lr=1e-5 --config.optim.warmup_steps=100" ;;
      dreamcpuwhy) seeds=${SEEDS:-3} cells=()
        for why in ${WHY:-stop add concat zeros lr10}; do
          [ -n "${WHY_OPTION[$why]:-}" ] || { echo "$what: no option '$why'" >&2; return 2; }
          cells+=(--cell "${arm_of[poi]} ${WHY_OPTION[$why]} optim.lr=${POI_LR:-5e-5}")
        done ;;
    esac
    [ ${#cells[@]} -gt 0 ] || { echo "dreamcpubest: set ENC_LR, POI_LR, NOPOS_LR, POS_LR and/or DUMA_LR" >&2; return 2; }
    local dream; dream=$(cd "$SHARED/dream" && pwd)
    $RUN --seeds=$seeds --config=configs/dream.py:minilm "${cells[@]}" "${holdout[@]}" \
      --parallel=1 --metrics=accuracy --workdir=$W/$what -- $common \
      --config.data.max_seq_length=128 $ONCE $RESUMABLE $malloc \
      --config.data.train_file=$dream/train.json --config.data.eval_file=$dream/dev.json ;;
  squad2)  # tests/slow/test_real_results.py: articles 0-8 -> 9-11, 384/128/64, 10 epochs
    $RUN --config=configs/squad2.py:minilm --cell "model.head=none model.pos_embedding=false" \
      --cell "model.head=poi model.pos_embedding=false" \
      --cell "model.head=poi model.pos_embedding=true" --parallel=9 \
      --metrics=f1,tuned_f1,HasAns_f1,NoAns_f1 --workdir=$W/squad2 -- \
      --config.model.init_from=$MINILM --config.data.train_file=$DATA/squad2/train.json \
      --config.data.eval_file=$DATA/squad2/eval.json --config.train.epochs=10 \
      --config.train.max_steps=-1 --config.data.max_seq_length=384 --config.data.doc_stride=128 \
      --config.data.max_query_length=64 --config.train.batch_size=32 --config.optim.lr=2e-4 \
      $ONCE ;;
  nq)  # tests/slow/test_nq_minilm.py: 400 pages -> 80, 2 epochs, batch 8, length 192
    $RUN --config=configs/nq.py:minilm --grid model.graph.num_layers=0,2 \
      --parallel=${PARALLEL:-6} --metrics=long-best-threshold-f1,short-best-threshold-f1 \
      --workdir=$W/nq -- --config.model.init_from=$MINILM \
      --config.data.train_file=$DATA/nq/train.jsonl.gz --config.data.eval_file=$DATA/nq/dev.jsonl.gz \
      --config.train.epochs=2 --config.train.batch_size=8 --config.data.max_seq_length=192 \
      --config.model.graph.max_sentences=48 --config.model.graph.max_paragraphs=24 $ONCE ;;
  squad1cpu)  # 150 steps at lr 1e-4 on 1,506 answerable questions -> 601 held-out ones
    $RUN --config=configs/squad1.py:minilm_cpu --cell "model.head=none model.pos_embedding=false" \
      --cell "model.head=poi model.pos_embedding=false" \
      --cell "model.head=poi model.pos_embedding=true" --parallel=1 \
      --metrics=exact_match,f1 --workdir=$W/squad1cpu -- $ONCE --config.runtime.cpu_malloc=system ;;
  squad1cpusel|squad1cpubest|squad1cpupaper)  # issue 50's two protocols for the squad1cpu
    # claims (declared 2026-11-27 before any of their runs): sel, the selection stage (each arm
    # at each rate of LRS, default 5e-5 1e-4 2e-4, squad1cpu's settings otherwise, trained on 7 of
    # the 9 training articles and scored on the other 2 (--holdout=0.2: 428 questions), SEEDS
    # default 1); best, the evaluation stage (each arm at its chosen rate: ENC_LR, NOPOS_LR,
    # POI_LR, an unset one skipped; SEEDS default 5); paper, POI-Net's Table 2 for SQuAD 1.1
    # (lr 1e-5, warm-up 10%, batch 24, 2 epochs = 188 steps) with what the CPU forces kept from
    # squad1cpu (all-MiniLM-L6-v2 for ALBERT, 192 tokens for 512, the sample's 1,506 questions;
    # SEEDS default 3)
    local arms=() cells=() seeds=${SEEDS:-3} holdout=() extra=()
    declare -A arm_of=([enc]="model.head=none model.pos_embedding=false"
                       [nopos]="model.head=poi model.pos_embedding=false"
                       [poi]="model.head=poi model.pos_embedding=true")
    for a in ${ARMS:-enc nopos poi}; do arms+=("${arm_of[$a]}"); done
    case $what in
      squad1cpusel)
        [ -e $DATA/squad2/train.json ] || python3 experiments/ablation_data.py --out=$DATA --only=squad2
        for arm in "${arms[@]}"; do
          for lr in ${LRS:-5e-5 1e-4 2e-4}; do cells+=(--cell "$arm optim.lr=$lr"); done
        done
        seeds=${SEEDS:-1} holdout=(--holdout=0.2)
        extra=(--config.data.train_file=$DATA/squad2/train.json) ;;
      squad1cpubest)
        declare -A lr_of=([enc]="${ENC_LR:-}" [nopos]="${NOPOS_LR:-}" [poi]="${POI_LR:-}")
        for a in enc nopos poi; do
          [ -n "${lr_of[$a]}" ] && cells+=(--cell "${arm_of[$a]} optim.lr=${lr_of[$a]}")
        done
        [ ${#cells[@]} -gt 0 ] || { echo "squad1cpubest: set ENC_LR, NOPOS_LR and/or POI_LR" >&2; return 2; }
        seeds=${SEEDS:-5} ;;
      squad1cpupaper)
        for arm in "${arms[@]}"; do cells+=(--cell "$arm"); done
        extra=(--config.optim.lr=1e-5 --config.optim.warmup_ratio=0.1 --config.train.batch_size=24
               --config.train.max_steps=-1 --config.train.epochs=2) ;;
    esac
    $RUN --seeds=$seeds --config=configs/squad1.py:minilm_cpu "${cells[@]}" "${holdout[@]}" \
      --parallel=1 --metrics=exact_match,f1 --workdir=$W/$what -- $ONCE \
      --config.runtime.cpu_malloc=system "${extra[@]}" ;;
  qopncpu)  # the `qopn` claim sized for 2 CPU cores (declared 2026-11-26 after a pilot that
    # evaluated articles 7-8, never 9-11: QOPN F1 39.2 in 1,036 s): 2-paragraph articles of
    # articles 0-6 (1,166 q) -> 9-11, 128 tokens, question 24, lr 1e-4, 1 epoch; QOPN's default
    # blocks and the window (stride 64, batch 16, as `qopn`'s), one run at a time
    P=$DATA/qopncpu
    [ -e $P/newsqa-dev.json ] || python3 experiments/ablation_data.py --out=$DATA --only=qopncpu
    COMMON="--config.train.max_steps=-1 --config.train.epochs=1 --config.data.max_seq_length=128
      --config.data.max_query_length=24 --config.optim.lr=1e-4 $ONCE --config.runtime.cpu_malloc=system"
    $RUN --config=configs/newsqa.py:minilm --cell "model.qopn.block_style=paper_residual" \
      --parallel=1 --metrics=exact_match,f1 --workdir=$W/qopncpu-qopn -- $COMMON \
      --config.data.train_file=$P/newsqa-train.json --config.data.eval_file=$P/newsqa-dev.json
    $RUN --config=configs/squad1.py:minilm --cell "model.head=none model.pos_embedding=false" \
      --parallel=1 --metrics=exact_match,f1 --workdir=$W/qopncpu-window -- $COMMON \
      --config.data.doc_stride=64 --config.train.batch_size=16 \
      --config.data.train_file=$P/squad-train.json --config.data.eval_file=$P/squad-dev.json ;;
  qopncpusel|qopncpubest|qopncpupaper)  # issue 50's two protocols for the qopncpu claim
    # (declared 2026-11-27 before any of their runs), each arm (ARMS="qopn window", the default)
    # with qopncpu's settings unless said: sel, the selection stage (each arm at each rate of
    # LRS, default 5e-5 1e-4 2e-4, SEEDS default 1, on qopncpusel's data: trained on qopncpu's
    # training articles less the two squad1cpusel held out (738 q), scored on those two (428 q));
    # best, the evaluation stage (each arm at its choice: QOPN_LR, WINDOW_LR, an unset one
    # skipped; an arm choosing 1e-4 is qopncpu's own cell: SEED_VALUES=3,4 ... run qopncpu;
    # SEEDS default 5); paper, QOPN's settings (its section 4: Adam lr 3e-5 without weight decay, warm-up 10%,
    # 6 epochs, batch 32, the same for every variant) for both arms, with what the CPU forces
    # kept from qopncpu (all-MiniLM-L6-v2 for RoBERTa-large, 128 tokens for 512, the 2-paragraph
    # articles of 7 training articles; SEEDS default 3)
    local seeds=${SEEDS:-3} P=$DATA/qopncpu malloc=$CPU_MALLOC
    declare -A config_of=([qopn]=configs/newsqa.py:minilm [window]=configs/squad1.py:minilm)
    declare -A cell_of=([qopn]="model.qopn.block_style=paper_residual"
                        [window]="model.head=none model.pos_embedding=false")
    declare -A data_of=([qopn]=newsqa [window]=squad)
    declare -A own_of=([qopn]=""
                       [window]="--config.data.doc_stride=64 --config.train.batch_size=16")
    # (no optim.lr here: ablation.py passes these after the cell's flags, so a rate here would
    # override the cell's; sel and best set it in each cell)
    local extra="--config.train.max_steps=-1 --config.train.epochs=1"
    case $what in
      qopncpusel) P=$DATA/qopncpusel seeds=${SEEDS:-1} ;;
      qopncpubest) seeds=${SEEDS:-5} ;;
      qopncpupaper) malloc=
        extra="--config.train.max_steps=-1 --config.train.epochs=6 --config.optim.lr=3e-5
          --config.optim.warmup_ratio=0.1 --config.optim.weight_decay=0.0"
        own_of[window]="--config.data.doc_stride=64" ;;
    esac
    [ -e $P/newsqa-dev.json ] || python3 experiments/ablation_data.py --out=$DATA --only=${P##*/}
    local ran=0 rc=0
    for a in ${ARMS:-qopn window}; do
      local cells=()
      case $what in
        qopncpusel)
          for lr in ${LRS:-5e-5 1e-4 2e-4}; do cells+=(--cell "${cell_of[$a]} optim.lr=$lr"); done ;;
        qopncpubest)
          declare -A lr_of=([qopn]="${QOPN_LR:-}" [window]="${WINDOW_LR:-}")
          [ -n "${lr_of[$a]}" ] || continue
          cells+=(--cell "${cell_of[$a]} optim.lr=${lr_of[$a]}") ;;
        qopncpupaper) cells+=(--cell "${cell_of[$a]}") ;;
      esac
      # the paper's batch for both arms (QOPN's counts questions with their segments, the
      # window's windows, as in the paper's own QOPN and sliding-window rows)
      local batch=()
      if [ $what = qopncpupaper ]; then batch=(--config.train.batch_size=32 $RESUMABLE); fi
      $RUN --seeds=$seeds --config=${config_of[$a]} "${cells[@]}" --parallel=1 \
        --metrics=exact_match,f1 --workdir=$W/$what-$a -- $extra \
        --config.data.max_seq_length=128 --config.data.max_query_length=24 $ONCE \
        $malloc ${own_of[$a]} "${batch[@]}" \
        --config.data.train_file=$P/${data_of[$a]}-train.json \
        --config.data.eval_file=$P/${data_of[$a]}-dev.json || rc=$?  # the other arm still runs
      ran=1
    done
    [ $ran = 1 ] || { echo "qopncpubest: set QOPN_LR and/or WINDOW_LR" >&2; return 2; }
    return $rc ;;
  probe)  # 3 paragraphs, 3 distractors, facts >= 120 words apart; 600 articles -> 150.
    # DISTRACTORS=1|5 (declared 2026-11-26 before their runs; guessing 50%, 16.7%): the same
    # settings into probe-d<N>-{qopn,window}, with QOPN's default blocks only (at 3 the
    # transformer blocks scored as paper_residual did)
    local d=${DISTRACTORS:-3} name=probe
    [ "$d" = 3 ] || name=probe-d$d
    P=$DATA/probe-d$d
    [ -e $P/newsqa-dev.json ] || python3 experiments/long_context_probe.py --out=$P --seed=100 \
      --train=600 --eval=150 --segments=3 --distractors=$d --filler=5
    COMMON="--config.train.max_steps=-1 --config.train.epochs=2 --config.data.max_seq_length=128
      --config.data.max_query_length=24 --config.optim.lr=1e-4 $ONCE --config.runtime.cpu_malloc=system"
    # QOPN's default blocks, and (declared 2026-11-26 before any of its runs) the transformer
    # blocks that learn on the SQuAD-built articles (`qopn`), since paper_residual did not at seed 0
    local cells=(--cell "model.qopn.block_style=paper_residual")
    [ "$d" = 3 ] && cells+=(--cell "model.qopn.block_style=transformer")
    $RUN --config=configs/newsqa.py:minilm "${cells[@]}" \
      --parallel=1 --metrics=exact_match,f1 --workdir=$W/$name-qopn -- $COMMON \
      --config.data.train_file=$P/newsqa-train.json --config.data.eval_file=$P/newsqa-dev.json
    $RUN --config=configs/squad1.py:minilm --cell "model.head=none model.pos_embedding=false" \
      --parallel=1 --metrics=exact_match,f1 --workdir=$W/$name-window -- $COMMON \
      --config.data.doc_stride=64 --config.data.train_file=$P/squad-train.json \
      --config.data.eval_file=$P/squad-dev.json ;;
  probe10)  # the probe's data and cells, 10 epochs (the `qopn` measurement's): the GPU bundle's
    # probe, declared 2026-11-26 after neither QOPN block style learned it in 2 epochs on the CPU;
    # DISTRACTORS=1|3|5 (default 3; guessing 50%, 25%, 16.7%), into probe10-d<N>-{qopn,window}
    local d=${DISTRACTORS:-3}
    P=$DATA/probe-d$d
    [ -e $P/newsqa-dev.json ] || python3 experiments/long_context_probe.py --out=$P --seed=100 \
      --train=600 --eval=150 --segments=3 --distractors=$d --filler=5
    COMMON="--config.model.init_from=$MINILM --config.train.max_steps=-1 --config.train.epochs=10
      --config.data.max_seq_length=128 --config.data.max_query_length=24 --config.optim.lr=1e-4 $ONCE"
    $RUN --config=configs/newsqa.py:minilm --cell "model.qopn.block_style=paper_residual" \
      --cell "model.qopn.block_style=transformer" --parallel=$(( ${SEEDS:-3} * 2 )) \
      --metrics=exact_match,f1 --workdir=$W/probe10-d$d-qopn -- $COMMON \
      --config.data.train_file=$P/newsqa-train.json --config.data.eval_file=$P/newsqa-dev.json & qopn=$!
    $RUN --config=configs/squad1.py:minilm --cell "model.head=none model.pos_embedding=false" \
      --parallel=${SEEDS:-3} --metrics=exact_match,f1 --workdir=$W/probe10-d$d-window -- $COMMON \
      --config.data.doc_stride=64 --config.data.train_file=$P/squad-train.json \
      --config.data.eval_file=$P/squad-dev.json & window=$!
    wait $qopn; local a=$?; wait $window; return $(( a || $? )) ;;
  *) echo "unknown measurement $what" >&2; return 2 ;;
esac
}
status=0
measure || status=$?
if [ "$cmd" = run ]; then
  records keep || echo "ablations.sh: the finished runs were not kept (above); the results stay in $W" >&2
  out=${OUT:-$W}
  find $W -name 'ablation.*' -o -name eval_results.json -o -name DONE.json -o -name log.txt \
    -o -name config.json -o -name environment.json -o -name metrics.jsonl \
    -o -name predictions.json | tar -czf "$out/$what.tgz" -T -
  echo "results: $out/$what.tgz"
fi
exit $status
