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
#   lm_study.sh grid S  issue #50's systematicity grid on split S (B or C; docs/results/logic.md, "The systematicity
#                       rerun"), with its plan's code (7b2b5d5) installed apart: what a lane runs once its cell's
#                       three language-model runs have finished (the ON-LSTM lane then B, the LSTM lane C); `keep`
#                       keeps its finished runs too (lm-study/sysB, sysC), and `start` restores them; with more
#                       arguments (`grid B --seeds 1113 --cells onlstm`) a part of it, in that order
#   lm_study.sh help S  split S's grid from its far end (what a lane runs after its own grid): the lane done first
#                       trains the other's last runs, so the two end together
# STUDY (default /work/lm-study) holds the installs, the runs and the logs; DATA (default ../shared/data from the
# repository) the shared data. A machine replaced later takes only the runs still training with it.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
STUDY=${STUDY:-/work/lm-study}
DATA=${DATA:-$(cd "$REPO/../shared/data" && pwd)}
RUNS=$STUDY/runs/ptb
finished() { grep -qs '"status": "finished"' "$1/results.json"; }  # a run that ended by its stopping rule
ended() { grep -Eqs '"status": "(finished|stopped)"' "$1/results.json"; }  # a logic run: its rule or its budget
PLAN=(--config ptb-cpu --epochs 30 --asgd-start-epoch 15 --patience 3 --threads 1)
GRID=(--config paper --cells onlstm lstm-std --seeds 1111 1112 1113 --epochs 20 --jobs 1 --threads 1 --no-progress)
declare -A SPLIT=([onlstm]=B [lstm]=C)  # the grid each lane runs after its language-model runs
declare -A OTHER=([onlstm]=C [lstm]=B)  # the grid it then helps with from the far end

install() {  # install DIR COMMIT: the code of COMMIT in its own environment under $STUDY/DIR (another commit's replaced)
  [ "$(cat "$STUDY/$1/commit" 2>/dev/null)" = "$2" ] && [ -x "$STUDY/$1/venv/bin/onlstm" ] && return
  git -C "$REPO" worktree remove --force "$STUDY/$1/code" 2>/dev/null || true
  rm -rf "$STUDY/$1/code" "$STUDY/$1/venv" "$STUDY/$1/commit"
  git -C "$REPO" worktree add --detach "$STUDY/$1/code" "$2"
  python3 -m venv "$STUDY/$1/venv"
  "$STUDY/$1/venv/bin/pip" install --quiet torch==2.13.0 "$STUDY/$1/code[experiments]" && echo "$2" > "$STUDY/$1/commit"
}

grid() {  # the #50 grid on split $1: its held-out data, then logic compare (reuses finished runs, resumes others);
  # more arguments replace the grid's order (a later --cells or --seeds wins)
  local bin=$STUDY/sys/venv/bin/onlstm data=$STUDY/sys/data$1
  [ -f "$data/.onlstm-output.json" ] || "$bin" logic holdout --data "$DATA/logic-train" --split "$1" --out "$data"
  "$bin" logic compare "${GRID[@]}" --data "$data" --out "$STUDY/runs/sys$1" "${@:2}"
}

help_other() {  # a lane whose grid is done takes the other split's runs from the far end (last seed, LSTM first)
  # until the two meet: the one that reaches a run the other is training stops there with the lock's one line
  # (exit 2), nothing lost, and the other goes on; a run either finished is reused
  grid "$1" --seeds 1113 1112 1111 --cells lstm-std onlstm || echo "lane ends here: the other lane trains the rest"
}

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
  for seed in 141 142 143; do finished "$RUNS/$cell-seed$seed" || return 0; done  # the grid only after all three
  install sys 7b2b5d5 && grid "${SPLIT[$cell]}" && help_other "${OTHER[$cell]}"
}

case ${1:-} in
  start)
    mkdir -p "$RUNS" "$STUDY/logs"
    for kept in "$HERE"/lm-study/*-seed* "$HERE"/lm-study/evals; do
      [ -e "$kept" ] && [ ! -e "$RUNS/$(basename "$kept")" ] && cp -r "$kept" "$RUNS/"
    done
    for kept in "$HERE"/lm-study/sys[BC]; do  # the #50 grid's kept runs and their scores, beside any run here
      [ -d "$kept" ] && mkdir -p "$STUDY/runs/$(basename "$kept")" && cp -rn "$kept"/. "$STUDY/runs/$(basename "$kept")/"
    done
    if [ ! -x "$STUDY/venv/bin/onlstm" ]; then  # the plan's code (f59592b) where earlier sessions installed it
      git -C "$REPO" worktree add --detach "$STUDY/code" f59592b
      python3 -m venv "$STUDY/venv"
      "$STUDY/venv/bin/pip" install --quiet torch==2.13.0 "$STUDY/code[experiments]"
    fi
    for cell in onlstm lstm; do
      STUDY=$STUDY DATA=$DATA setsid nohup "$HERE/lm_study.sh" lane "$cell" >> "$STUDY/logs/lane-$cell.log" 2>&1 < /dev/null &
    done
    ;;
  lane) lane "$2" ;;
  grid) install sys 7b2b5d5 && grid "${@:2}" ;;  # more arguments: a part of the grid, in their order
  help) install sys 7b2b5d5 && help_other "$2" ;;
  stop)  # the lanes first, so that none starts the next seed; a paused training (a timing window) is continued
    pkill -f 'lm_study.s[h] (lane|grid|help)' || true
    pkill -CONT -f 'onlstm (l[m]|logi[c]) (train|compare)' || true
    pkill -INT -f 'onlstm (l[m]|logi[c]) (train|compare)' || true
    for _ in $(seq 300); do pgrep -f 'onlstm (l[m]|logi[c]) (train|compare)' > /dev/null || break; sleep 1; done  # resume files
    ;;
  keep)  # Marvin & Linzen's suite generated whole (the plan's amendment of 3 December), then the study's read
    mkdir -p "$STUDY/logs"
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
    for S in B C; do  # the #50 grid's ended runs: scored by the study's read command, kept without their weights
      [ -d "$STUDY/runs/sys$S" ] || continue
      "$REPO/.venv/bin/onlstm" logic compare "${GRID[@]}" --data "$STUDY/sys/data$S" --out "$STUDY/runs/sys$S" \
        --finished-only > "$STUDY/logs/read-sys$S.log" 2>&1
      for run in "$STUDY/runs/sys$S"/*-seed*; do
        ended "$run" && [ -d "$STUDY/runs/sys$S/evals/$(basename "$run")" ] || continue
        mkdir -p "$HERE/lm-study/sys$S/$(basename "$run")" "$HERE/lm-study/sys$S/evals"
        find "$run" -maxdepth 1 -type f ! -name '*.safetensors' ! -name '*.lock' -exec cp {} "$HERE/lm-study/sys$S/$(basename "$run")/" \;
        cp -r "$STUDY/runs/sys$S/evals/$(basename "$run")" "$HERE/lm-study/sys$S/evals/"
        echo "kept sys$S/$(basename "$run")"
      done
      # the grid's table, published once every run of the split is scored (tests/logic/test_sys_records.py)
      [ -f "$STUDY/runs/sys$S/table.md" ] && ! grep -q 'not scored' "$STUDY/runs/sys$S/table.md" && cp "$STUDY/runs/sys$S/table.md" "$HERE/lm-study/sys$S.md" || true
    done
    ;;
  status)
    for run in "$RUNS"/*-seed*; do
      [ -d "$run" ] || continue
      # a file read only where it exists: a failed tail would end the script (pipefail); keep copies no steps.csv
      last=$([ -f "$run/log.csv" ] && tail -n 1 "$run/log.csv" | awk -F, '$1 ~ /^[0-9]+$/ {print "epoch " $1 ", valid " $6 ", averaging " $8}' || true)
      step="no step yet" && finished "$run" && step="kept without its step log"
      [ -f "$run/steps.csv" ] && step=$(tail -n 1 "$run/steps.csv" | awk -F, '$2 ~ /^[0-9.]+$/ {print "at " $2 " epochs"}')
      done_=$(finished "$run" && echo ", finished" || true)
      echo "$(basename "$run"): ${last:-no epoch yet}; ${step:-no step yet}$done_"
    done
    for run in "$STUDY"/runs/sys*/*-seed*; do  # the #50 grid's runs: their status as their results say
      [ -d "$run" ] || continue
      state=$(grep -o '"status": "[a-z_]*"' "$run/results.json" 2>/dev/null || echo "no result yet")
      [ -f "$run/steps.csv" ] && state="$state; at $(tail -n 1 "$run/steps.csv" | cut -d, -f2) of 20 epochs"
      echo "$(basename "$(dirname "$run")")/$(basename "$run"): $state"
    done
    ;;
  *) echo "usage: $0 start|status|stop|keep|grid B|C" >&2; exit 2 ;;
esac
