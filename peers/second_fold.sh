#!/bin/bash
# The 2nd place on one fold of layout:cpu:default: second_fold.sh FOLD_DIR WORK_DIR [ITERATIONS]
set -e
DATA=$1; WORK=$2; ITERS=${3:-540}; PEERS=${PEERS:-/tmp/peers}; HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf $WORK; mkdir -p $WORK; cd $WORK
PYTHONPATH=$PEERS/second /usr/bin/time -v -o $WORK/time.txt taskset -c 1 $PEERS/venv/bin/python \
  $HERE/run_second.py --data-root $DATA --collection layout-xla-default --max-iterations $ITERS \
  --scores-json $WORK/scores.json
