#!/bin/bash
# The 2nd place on one fold: second_fold.sh FOLD_DIR WORK_DIR [ITERATIONS]; SEARCH=default|random
# picks the collection, CORE the core.
set -e
DATA=$1; WORK=$2; ITERS=${3:-540}; PEERS=${PEERS:-/tmp/peers}; SEARCH=${SEARCH:-default}; HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf $WORK; mkdir -p $WORK; cd $WORK
PYTHONPATH=$PEERS/second /usr/bin/time -v -o $WORK/time.txt taskset -c ${CORE:-1} $PEERS/venv/bin/python \
  $HERE/run_second.py --data-root $DATA --collection layout-xla-$SEARCH --max-iterations $ITERS \
  --scores-json $WORK/scores.json
