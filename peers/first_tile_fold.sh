#!/bin/bash
# The 1st place's tile model on one options fold: first_tile_fold.sh FOLD_DIR OUT_DIR [STEPS].
# FOLD_DIR is made by `make_fold.py --collection options`. CORE picks the core (0 by
# default), TRAIN_SEED their Trainer's seed (42 by default), FIRST_ARGS more of their
# arguments (a later one wins). Their train_tile.sh (one of its five lines) with the
# changes listed in peers/README.md, run in a copy of their folder (it writes its
# predictions there), so that runs can go side by side.
set -e
DATA=$1; OUT=$2; STEPS=${3:-4000}; PEERS=${PEERS:-/tmp/peers}; HERE=$(cd "$(dirname "$0")" && pwd)
EVERY=$((STEPS / 20)); LOG=$(( STEPS / 200 > 1 ? STEPS / 200 : 1 ))  # theirs: 100,000 / 5,000 / 500
WORK=$(mktemp -d); trap 'rm -rf $WORK' EXIT
cp -r $PEERS/first/. $WORK; cd $WORK
/usr/bin/time -v -o $OUT.time taskset -c ${CORE:-0} $PEERS/venv/bin/python train_tile.py \
 --data_folder=$DATA/npz_all/npz --do_train=true --do_eval=true --do_predict=true \
 --per_device_train_batch_size=1 --per_device_eval_batch_size=1 --learning_rate=1e-3 \
 --warmup_ratio=0.05 --lr_scheduler_type=cosine --save_strategy=steps --save_steps=$EVERY \
 --eval_steps=$EVERY --evaluation_strategy=steps --logging_strategy=steps --logging_steps=$LOG \
 --save_total_limit=10 --load_best_model_at_end=True --optim=adamw_torch --weight_decay=1e-5 \
 --max_steps=$STEPS --metric_for_best_model=eval_score_tile_max --greater_is_better=True \
 --dataloader_num_workers=0 --max_grad_norm=1.0 --data_type=tile --source=xla \
 --output_dir=$OUT --overwrite_output_dir=True --report_to=none --hidden_channels=256,256 \
 --dropout=0.2 --gat_dropout=0.2 --op_embedding_dim=16 --use_cross_attn=true \
 --use_compressed=false --use_cpu=true --seed=${TRAIN_SEED:-42} $FIRST_ARGS
# their per-config logits of the test graphs (config order; lower = predicted faster)
$PEERS/venv/bin/python -c "
import ast, json, sys, pandas as pd
df = pd.read_csv(sys.argv[1])
json.dump({r.ID.split(':')[-1] + '.npz': [float(x) for x in ast.literal_eval(r.logits)]
           for r in df.itertuples()}, open(sys.argv[2], 'w'))
" "outputs_csv/tile:xla:submission.csv" $OUT/scores.json
