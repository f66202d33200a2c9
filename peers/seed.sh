#!/bin/bash
# Every fold of one seed, both winners, both layout collections: seed.sh SEED [CORE].
# Builds seed SEED's five folds (graphcost crossval --seed SEED), packs them with the 1st
# place's data_compression.py, then runs first_fold.sh and second_fold.sh on each, into
# $PEERS/seed$SEED/{first,second}/{default,random}/foldN (scores.json in each). Resumes:
# a run whose scores.json exists is skipped.
set -e
SEED=$1; export CORE=${2:-1}; PEERS=${PEERS:-/tmp/peers}; HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$PEERS/seed$SEED
for f in 1 2 3 4 5; do
  DATA=$ROOT/data/fold$f
  if [ ! -f $DATA/fold.json ]; then
    rm -rf $DATA
    $HERE/../.venv/bin/python $HERE/make_fold.py --fold $f --seed $SEED --out $DATA > /dev/null
  fi
  (cd $DATA && taskset -c $CORE $PEERS/venv/bin/python $PEERS/first/data/data_compression.py \
     > compress.log 2>&1)
  for search in default random; do
    export SEARCH=$search
    OUT=$ROOT/first/$search/fold$f
    if [ ! -f $OUT/scores.json ]; then
      mkdir -p $(dirname $OUT)
      TRAIN_SEED=$((42 + SEED)) $HERE/first_fold.sh $DATA $OUT 20 > $OUT.log 2>&1
    fi
    OUT=$ROOT/second/$search/fold$f
    mkdir -p $(dirname $OUT)
    [ -f $OUT/scores.json ] || $HERE/second_fold.sh $DATA $OUT 540 > $OUT.log 2>&1
    echo "$(date +%T) seed $SEED fold $f $search done"
  done
done
