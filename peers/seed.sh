#!/bin/bash
# Every fold of one seed, both winners, both layout collections: seed.sh SEED [CORE].
# Builds seed SEED's five folds (graphcost crossval --seed SEED), packs them with the 1st
# place's data_compression.py, then runs first_fold.sh and second_fold.sh on each, into
# $PEERS/seed$SEED/{first,second}/{default,random}/foldN (scores.json in each). FOLDS
# picks the folds and their order ("1 2 3 4 5"). A run is claimed before it starts, so a
# second instance of the same seed (other FOLDS order, other core) shares the work; a
# finished run is skipped. A claimed run that was stopped: remove its .claimed folder.
set -e
SEED=$1; export CORE=${2:-1}; PEERS=${PEERS:-/tmp/peers}; HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$PEERS/seed$SEED
claim() { mkdir -p "$(dirname "$1")"; [ ! -f "$1/scores.json" ] && mkdir "$1.claimed" 2>/dev/null; }
for f in ${FOLDS:-1 2 3 4 5}; do
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
    if claim $OUT; then
      TRAIN_SEED=$((42 + SEED)) $HERE/first_fold.sh $DATA $OUT 20 > $OUT.log 2>&1
    fi
    OUT=$ROOT/second/$search/fold$f
    if claim $OUT; then $HERE/second_fold.sh $DATA $OUT 540 > $OUT.log 2>&1; fi
    echo "$(date +%T) seed $SEED fold $f $search done"
  done
done
