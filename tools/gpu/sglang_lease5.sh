#!/usr/bin/env bash
# Lease 5's measurement for issue 32 (research/plans/sglang_lease5.md), run on the device in the call that carries
# the last SGLang piece, after `source .gpu/install_sglang.sh`; results go under $OUT as they come.
#
#   bash tools/gpu/sglang_lease5.sh [SECONDS]     # SECONDS: what this call may still spend (default 540)
#
# 1. SGLang's passes on RSI/Batching-v0's many_small closed loop (256 users), decode_log_interval 1, for SGLang's
#    defaults, lease 4's c2 and the H100 plan's pick c1 (the configuration sim and real rank oppositely): one engine
#    start each (~100 s), while at least 110 s are left; rows in $OUT/passes.jsonl (research/sglang_fit/passes.py
#    reads them beside the sim's).
# 2. On an H100, with at least 130 s left: the H100 plan's c3, the one lease 4 left out (rows in $OUT/real.jsonl,
#    copied as the promotion writes them). On an H200 nothing more: the H200 plan was searched on the chip's vLLM
#    coefficients, which miss SGLang's many_small there by 22 % (research/plans/sglang_lease5.md).
set -u
budget=${1:-540}
start=$SECONDS
out=${OUT:?set OUT to the folder whose files come back}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$name" in
  *H200*) card=h200 ;;
  *H100*) card=h100-sxm ;;
  *) echo "sglang_lease5: unknown card: $name" >&2; exit 2 ;;
esac
echo "card: $name -> $card" | tee "$out/card.txt"
work=$(mktemp -d)
python3 - "$work/many_small.yaml" <<'EOF'
import json, sys, yaml
doc = json.load(open("configs/eval/batching_sglang_h100.candidates.json"))
spec = next(w for w in doc["workloads"] if w["name"] == "many_small")
open(sys.argv[1], "w").write(yaml.safe_dump(spec))
EOF
passes() {  # $1: a label; the rest: --set FLAG=VALUE ...
  local label=$1; shift
  if [ $((budget - (SECONDS - start))) -lt 110 ]; then
    echo "passes $label skipped: $((budget - (SECONDS - start))) s left" | tee -a "$out/progress.txt"
    return
  fi
  timeout 200 python3 -m rsi_env.real.sglang_driver --model llama-3.1-8b --hardware "$card" --slo-from-workload \
    --workload "$work/many_small.yaml" --server-arg decode_log_interval=1 --out "$out/passes.jsonl" "$@" \
    > "$out/passes-$label.log" 2>&1
  echo "passes $label: exit $? at $((SECONDS - start)) s" | tee -a "$out/progress.txt"
}
passes defaults
passes c2 --set max_running_requests=128 --set chunked_prefill_size=-1 --set cuda_graph_max_bs=512
passes c1 --set max_running_requests=512 --set chunked_prefill_size=-1 --set max_prefill_tokens=32768 \
  --set schedule_conservativeness=0.7 --set cuda_graph_max_bs=512
# 3. Whatever card: the top of SGLang's mem_fraction_static ladder, which the sim never refuses (a start that fails at
#    CUDA-graph capture, or a prefill that runs out of memory, comes back in SGLang's words in the log).
passes mfs095 --set mem_fraction_static=0.95
left=$((budget - (SECONDS - start) - 20))
if [ "$card" != h100-sxm ] || [ "$left" -lt 130 ]; then
  echo "no promotion: $card, $left s left" | tee -a "$out/progress.txt"
  exit 0
fi
( while sleep 10; do cp "$work/ev/real.jsonl" "$out/real.jsonl" 2>/dev/null; done ) &
copier=$!
python3 -m rsi_env.evaluate.promote --plan configs/eval/batching_sglang_h100.yaml --only c3 --hardware h100-sxm \
  --gpus 0 --out "$work/ev" --deadline-s "$left" > "$out/promote.log" 2>&1
echo "promote c3: exit $? at $((SECONDS - start)) s" | tee -a "$out/progress.txt"
kill "$copier" 2>/dev/null
cp "$work/ev/real.jsonl" "$out/real.jsonl" 2>/dev/null
exit 0
