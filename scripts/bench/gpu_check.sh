#!/usr/bin/env bash
# Measure a GPU for mt in one go, in about 8 minutes (issue 63; docs/performance.md says what to send back):
#   1. the step matrix: mt (eager, compiled, compiled + CUDA graphs), nn.Transformer and Marian,
#      transformer-base bf16 at 12.5k- and 50k-token batches of WMT-like lengths, MFU against the
#      matmul peak measured in the same run, a kernel profile per step   (bench_model.py --device)
#   2. `mt train --data $DATA --budget 3m` on the card                    (the whole trainer)
#   3. the loop against its own bare step on that run's data              (bench_loop.py)
#   4. `mt evaluate` of the trained model on test_2016_flickr
# and writes OUT/gpu_check.json (everything) and OUT/gpu_check.md (one table).
#
#   bash scripts/bench/gpu_check.sh [OUT]            # OUT defaults to gpu_check_out
#
# Environment: PYTHON (default python), DATA (default data/multi30k: `mt data fetch multi30k`),
# DEVICE (default cuda). GPU_CHECK_TINY=1 is the test suite's override: CPU, the tiny config,
# a few steps and an 8 s budget, so every stage and the report run anywhere in about a minute.
set -euo pipefail
OUT=${1:-gpu_check_out}
PY=${PYTHON:-python}
DATA=${DATA:-data/multi30k}
DEVICE=${DEVICE:-cuda}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if [[ "${GPU_CHECK_TINY:-0}" == 1 ]]; then
  # (one batch shape: the compiled row compiles once, ~10 s with aot_eager on a CPU, not once per shape;
  # no confidence fit after training: a beam decode of all 1,014 val lines that no stage reports)
  DEVICE=cpu
  BENCH=(--config configs/tiny.yaml --size config --lengths wmt --max-tokens 300 --precision fp32 --modes eager compiled
         --backend aot_eager --max-shapes 1 --steps 2 --warmup 0 --rounds 1 --threads 1 --no-reference --no-sampler)
  BUDGET=8s
  TRAIN_SET=(--set tokenizer.vocab_size=400 --set data.train_limit=600 --set train.threads=1 --set train.valid_max_sentences=20
             --set model.d_model=32 --set model.d_ff=64 --set model.heads=2 --set model.encoder_layers=1 --set model.decoder_layers=1
             --set train.average_last=0 --set train.fit_alpha=false --set train.fit_confidence=false)
  LOOP=(--updates 6 --every 2 --repeats 1 --threads 1 --precision fp32)
  EVAL=(--beam 1 --src "$OUT/test50.en" --ref "$OUT/test50.de")  # the first 50 lines, greedy
  LIMITS=(300 300 300 300)
else
  BENCH=(--size base --lengths wmt --max-tokens 12500 50000 --precision bf16 --modes eager compiled graphs
         --max-shapes 2 --steps 8 --warmup 3 --rounds 2 --no-sampler)
  BUDGET=3m
  TRAIN_SET=(--set train.fit_alpha=false)  # the alpha fit (beam search on 1,500 lines) would not fit the 8 minutes
  LOOP=(--updates 200 --every 50 --repeats 1 --threads 0 --precision bf16)
  EVAL=(--split test_2016_flickr)
  LIMITS=(180 215 45 40)  # seconds per stage, 8 minutes in all (estimates: a stage cut short reports "failed (124)")
fi
status() { echo "$1" > "$OUT/$2.status"; }
run_stage() {  # name, time limit (s), command...: its output in OUT/name.txt, its exit status in OUT/name.status
  local name=$1 limit=$2; shift 2
  echo "== $name ($(date +%T), at most ${limit}s)"
  if timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1; then status ok "$name"; else status "failed ($?)" "$name"; fi
  tail -n 3 "$OUT/$name.txt"
}
if [[ "${GPU_CHECK_TINY:-0}" == 1 ]]; then
  for lang in en de; do (zcat -f "$DATA/test_2016_flickr.$lang"* || true) | head -n 50 > "$OUT/test50.$lang"; done
fi
(command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
  || echo "no nvidia-smi") > "$OUT/device.txt" 2>&1
run_stage bench "${LIMITS[0]}" "$PY" "$HERE/bench_model.py" --device "$DEVICE" "${BENCH[@]}" --json "$OUT/bench.json"
run_stage train "${LIMITS[1]}" "$PY" -m mt train --data "$DATA" --src-lang en --tgt-lang de --budget "$BUDGET" \
  --set run_root="$OUT/runs" --set name=gpu_check --set train.device="$DEVICE" "${TRAIN_SET[@]}"
run_stage loop "${LIMITS[2]}" "$PY" "$HERE/bench_loop.py" --run "$OUT/runs/gpu_check" --data "$DATA" "${LOOP[@]}" \
  --out "$OUT/loop.json"
run_stage evaluate "${LIMITS[3]}" "$PY" -m mt evaluate -c "$OUT/runs/gpu_check/checkpoints/best.pt" \
  --device "$DEVICE" --out-dir "$OUT/eval" "${EVAL[@]}"
"$PY" "$HERE/gpu_report.py" "$OUT"
