#!/bin/bash
# The 2nd place's tile model on one options fold:
# second_tile_fold.sh FOLD_DIR WORK_DIR [ITERATIONS [ITERS_PER_VAL]].
# FOLD_DIR is made by `make_fold.py --collection options`; CORE picks the core (0 by
# default). Their src/main.py --collection tile-xla through run_second.py, validating every
# ITERS_PER_VAL iterations (80 and 10 by default, what ran here with SECOND_ARGS="--batch-size
# 10"; theirs: 400,000 and 10,000); the best model on the early-stopping families writes
# WORK_DIR/scores.json.
set -e
DATA=$1; WORK=$2; ITERS=${3:-80}; EVERY=${4:-10}; PEERS=${PEERS:-/tmp/peers}
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf $WORK; mkdir -p $WORK; cd $WORK
PYTHONPATH=$PEERS/second /usr/bin/time -v -o $WORK/time.txt taskset -c ${CORE:-0} $PEERS/venv/bin/python \
  $HERE/run_second.py --data-root $DATA --collection tile-xla --max-iterations $ITERS \
  --iters-per-val $EVERY --scores-json $WORK/scores.json $SECOND_ARGS
