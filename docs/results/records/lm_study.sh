#!/usr/bin/env bash
# The #45 study (docs/results/lm.md, "Plan") on any machine, in two verbs:
#   lm_study.sh start   restore the runs kept here (lm-study/), install the plan's code (f59592b) apart, and train
#                       the runs not kept, one worker per cell, one thread each, in the background (--resume)
#   lm_study.sh lane C  (what start runs, once per cell C)
#   lm_study.sh status  each run's progress: epochs trained (its last step's fraction too), last validation perplexity,
#                       whether it averages, and whether it finished
#   lm_study.sh stop    stop the lanes and their trainings as Ctrl-C does (each writes its resume file first), for a
#                       machine about to go; `start` later resumes them where they stopped
#   lm_study.sh keep    measure the finished runs with the study's read command and copy each, without its
#                       weights, resume file and vocabulary, into lm-study/ here, to be committed
# STUDY (default /work/lm-study) holds the install, the runs and the logs; DATA (default ../shared/data from the
# repository) the shared data. A machine replaced later takes only the runs still training with it.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
STUDY=${STUDY:-/work/lm-study}
DATA=${DATA:-$(cd "$REPO/../shared/data" && pwd)}
RUNS=$STUDY/runs/ptb
finished() { grep -qs '"status": "finished"' "$1/results.json"; }  # a run that ended by its stopping rule
PLAN=(--config ptb-cpu --epochs 30 --asgd-start-epoch 15 --patience 3 --threads 1)

lane() {  # one cell's seeds in order: a kept or finished run is skipped, a started one resumed
  local cell=$1 seed out
  for seed in 141 142 143; do
    out=$RUNS/$cell-seed$seed
    if finished "$out"; then continue; fi
    if [ -d "$out" ]; then
      "$STUDY/venv/bin/onlstm" lm train --out "$out" --data-dir "$DATA/ptb" --resume --threads 1 --no-progress || return
    else
      "$STUDY/venv/bin/onlstm" lm train "${PLAN[@]}" --cell "$cell" --seed "$seed" --data-dir "$DATA/ptb" \
        --out "$out" --no-progress || return
    fi
  done
}

case ${1:-} in
  start)
    mkdir -p "$RUNS" "$STUDY/logs"
    for kept in "$HERE"/lm-study/*-seed* "$HERE"/lm-study/evals; do
      [ -e "$kept" ] && [ ! -e "$RUNS/$(basename "$kept")" ] && cp -r "$kept" "$RUNS/"
    done
    if [ ! -x "$STUDY/venv/bin/onlstm" ]; then
      git -C "$REPO" worktree add --detach "$STUDY/code" f59592b
      python3 -m venv "$STUDY/venv"
      "$STUDY/venv/bin/pip" install --quiet torch==2.13.0 "$STUDY/code[experiments]"
    fi
    for cell in onlstm lstm; do
      STUDY=$STUDY DATA=$DATA setsid nohup "$HERE/lm_study.sh" lane "$cell" >> "$STUDY/logs/lane-$cell.log" 2>&1 < /dev/null &
    done
    ;;
  lane) lane "$2" ;;
  stop)  # the lanes first, so that none starts the next seed; a paused training (a timing window) is continued
    pkill -f 'lm_study.s[h] lane' || true
    pkill -CONT -f 'onlstm l[m] train' || true
    pkill -INT -f 'onlstm l[m] train' || true
    for _ in $(seq 300); do pgrep -f 'onlstm l[m] train' > /dev/null || break; sleep 1; done  # resume files written
    ;;
  keep)  # Marvin & Linzen's suite generated whole (the plan's amendment of 3 December), then the study's read
    [ -f "$STUDY/marvin-linzen/marvin_linzen.tsv" ] || "$REPO/.venv/bin/onlstm" data marvin-linzen --out "$STUDY/marvin-linzen"
    "$REPO/.venv/bin/onlstm" lm compare --config ptb-cpu --data-dir "$DATA/ptb" --out "$RUNS" --cells onlstm lstm \
      --seeds 141 142 143 --epochs 30 --asgd-start-epoch 15 --patience 3 --threads 1 --finished-only \
      --treebank "$DATA/treebank" --syneval-data "$STUDY/marvin-linzen/marvin_linzen.tsv" \
      --suites "$DATA/syntaxgym/suites" --eval-threads 1 > "$STUDY/logs/read.log" 2>&1
    for run in "$RUNS"/*-seed*; do
      finished "$run" || continue
      name=$(basename "$run")
      mkdir -p "$HERE/lm-study/$name" "$HERE/lm-study/evals/$name"
      (cd "$run" && cp config.json results.json log.csv "$HERE/lm-study/$name/")
      cp "$RUNS/evals/$name"/*.json "$HERE/lm-study/evals/$name/"
      echo "kept $name"
    done
    ;;
  status)
    for run in "$RUNS"/*-seed*; do
      [ -d "$run" ] || continue
      last=$(tail -n 1 "$run/log.csv" 2>/dev/null | awk -F, '$1 ~ /^[0-9]+$/ {print "epoch " $1 ", valid " $6 ", averaging " $8}')
      step=$(tail -n 1 "$run/steps.csv" 2>/dev/null | awk -F, '$2 ~ /^[0-9.]+$/ {print "at " $2 " epochs"}')
      done_=$(finished "$run" && echo ", finished" || true)
      echo "$(basename "$run"): ${last:-no epoch yet}; ${step:-no step yet}$done_"
    done
    ;;
  *) echo "usage: $0 start|status|stop|keep" >&2; exit 2 ;;
esac
