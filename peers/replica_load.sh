#!/usr/bin/env bash
# The largest graph of layout:xla:random at its published size (a `graphcost bench replica`
# graph: 43,615 nodes, 100,040 configs, 13.8 GiB of configs as float32), read by each
# side's own loader on one core, each under /usr/bin/time -v:
#   graphcost: one epoch of `graphcost train` (configs read lazily through the read cache);
#   1st place: their data/data_compression.py, unchanged, on a tree holding this graph;
#   2nd place: their src/data.py `repack_one_npz`, which their dataset runs on each file.
# Each winner runs under an address-space limit (LIMIT bytes, 21 GB by default) so that a
# loader that needs more than the machine fails with MemoryError instead of the kernel's
# OOM killer. Usage: peers/replica_load.sh WORK   (about 16 minutes; WORK needs 20 GB free)
set -euo pipefail
WORK=$(mkdir -p "$1" && cd "$1" && pwd); PEERS=${PEERS:-/tmp/peers}; CORE=${CORE:-1}; LIMIT=${LIMIT:-21000000000}
HERE=$(cd "$(dirname "$0")" && pwd); PY=$HERE/../.venv/bin/python
mkdir -p $WORK/first/npz_all/npz/layout/xla/random/train $WORK/second
$PY - "$WORK/root" <<'EOF'
import sys
from graphcost.data.replica import chosen, collection_shapes, write_replica
largest = [s for s in chosen(collection_shapes("layout:xla:random"), 1) if s.split == "train"]
write_replica(sys.argv[1], "layout:xla:random", largest)
EOF
GRAPH=$WORK/root/npz/layout/xla/random/train/train_0000.npz
ln -sfn $GRAPH $WORK/first/npz_all/npz/layout/xla/random/train/train_0000.npz
run() {  # NAME COMMAND…: the command's wall time, peak RSS and exit status
  local name=$1; shift
  set +e; /usr/bin/time -v -o $WORK/$name.time "$@" > $WORK/$name.log 2>&1; local rc=$?; set -e
  echo "$name: exit $rc, $(grep -E 'Elapsed|Maximum resident' $WORK/$name.time | tr -s ' \t\n' ' ')"
}
run graphcost taskset -c $CORE $HERE/../.venv/bin/graphcost train $(dirname $(dirname $GRAPH)) \
  --out $WORK/graphcost-run --overwrite --epochs 1
(cd $WORK/first && run first prlimit --as=$LIMIT taskset -c $CORE $PEERS/venv/bin/python \
  $PEERS/first/data/data_compression.py)
run second prlimit --as=$LIMIT taskset -c $CORE env PYTHONPATH=$PEERS/second \
  $PEERS/venv/bin/python -c "from src.data import repack_one_npz
repack_one_npz('$GRAPH', '$WORK/second/train_0000.npz', False, True)"
