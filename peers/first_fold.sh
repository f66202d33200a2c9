#!/bin/bash
# The 1st place on one fold: first_fold.sh FOLD_DIR OUT_DIR [EPOCHS]; SEARCH=default|random
# picks the collection, CORE the core, TRAIN_SEED their Trainer's seed (42 by default, as
# theirs), FIRST_ARGS more of their arguments (a later one wins). Their train_xla_default.sh,
# with the changes listed in peers/README.md, run in a copy of their folder (it writes its
# predictions there), so that runs can go side by side.
set -e
DATA=$1; OUT=$2; EPOCHS=${3:-20}; PEERS=${PEERS:-/tmp/peers}; SEARCH=${SEARCH:-default}; HERE=$(cd "$(dirname "$0")" && pwd)
if [ "$SEARCH" = random ]; then CROSS_ATTN=false; else CROSS_ATTN=true; fi  # their train_xla_random.sh
WORK=$(mktemp -d); trap 'rm -rf $WORK' EXIT
cp -r $PEERS/first/. $WORK; cd $WORK
/usr/bin/time -v -o $OUT.time taskset -c ${CORE:-1} $PEERS/venv/bin/python $HERE/run_first.py \
 --data_folder=$DATA/npz_all/npz --do_train=true --do_eval=true --do_predict=true \
 --per_device_train_batch_size=1 --per_device_eval_batch_size=1 --learning_rate=1e-3 \
 --warmup_ratio=0.05 --lr_scheduler_type=cosine --save_strategy=epoch --evaluation_strategy=epoch \
 --logging_strategy=epoch --save_total_limit=2 --load_best_model_at_end=True --optim=adamw_torch \
 --weight_decay=1e-5 --num_train_epochs=$EPOCHS --metric_for_best_model=eval_kendalltau \
 --greater_is_better=True --dataloader_num_workers=0 --max_grad_norm=1.0 --data_type=layout \
 --source=xla_pruned --search=$SEARCH --overwrite_output_dir=True --output_dir=$OUT --report_to=none \
 --hidden_channels=256,256 --dropout=0.2 --gat_dropout=0.2 --op_embedding_dim=16 --max_configs=24 \
 --max_configs_eval=128 --select_close_runtimes=false --use_cross_attn=$CROSS_ATTN --use_compressed \
 --use_cpu=true --seed=${TRAIN_SEED:-42} $FIRST_ARGS
# their per-config scores of the test graphs, config order, ';'-joined, as JSON {file: scores}
$PEERS/venv/bin/python -c "
import json, sys, pandas as pd
df = pd.read_csv(sys.argv[1])
json.dump({r.ID.split(':')[-1] + '.npz': [float(x) for x in r.probs.split(';')]
           for r in df.itertuples()}, open(sys.argv[2], 'w'))
" "outputs_probs/layout:xla_pruned:$SEARCH:pred_probs.csv" $OUT/scores.json
