#!/usr/bin/env bash
# Lease 5's measurement for issue 32 (research/plans/sglang_lease5.md), run on the device in the call that carries
# the last SGLang piece, after `source .gpu/install_sglang.sh`; results go under $OUT as they come.
#
#   bash tools/gpu/sglang_lease5.sh [SECONDS]     # SECONDS: what this call may still spend (default 540)
#
# 1. SGLang's passes on RSI/Batching-v0's many_small closed loop (256 users), decode_log_interval 1, for SGLang's
#    defaults and lease 4's c2: one engine start each, rows in $OUT/passes.jsonl (research/sglang_fit/passes.py
#    reads them beside the sim's).
# 2. On an H200: the H200 plan's promotion (defaults, c1, c2); on an H100: the H100 plan's c3, the one lease 4 left
#    out. Rows in $OUT/real.jsonl, copied as the promotion writes them.
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
  timeout 200 python3 -m rsi_env.real.sglang_driver --model llama-3.1-8b --hardware "$card" --slo-from-workload \
    --workload "$work/many_small.yaml" --server-arg decode_log_interval=1 --out "$out/passes.jsonl" "$@" \
    > "$out/passes-$label.log" 2>&1
  echo "passes $label: exit $? at $((SECONDS - start)) s" | tee -a "$out/progress.txt"
}
passes defaults
passes c2 --set max_running_requests=128 --set chunked_prefill_size=-1 --set cuda_graph_max_bs=512
left=$((budget - (SECONDS - start) - 20))
if [ "$card" = h200 ]; then
  plan=configs/eval/batching_sglang_h200.yaml; only=defaults,c1,c2; extra=()
else
  plan=configs/eval/batching_sglang_h100.yaml; only=c3; extra=(--hardware h100-sxm)
fi
if [ "$left" -lt 120 ]; then
  echo "promotion skipped: $left s left" | tee -a "$out/progress.txt"
  exit 0
fi
( while sleep 10; do cp "$work/ev/real.jsonl" "$out/real.jsonl" 2>/dev/null; done ) &
copier=$!
python3 -m rsi_env.evaluate.promote --plan "$plan" --only "$only" --gpus 0 --out "$work/ev" --deadline-s "$left" \
  "${extra[@]}" > "$out/promote.log" 2>&1
echo "promote $plan ($only): exit $? at $((SECONDS - start)) s" | tee -a "$out/progress.txt"
kill "$copier" 2>/dev/null
cp "$work/ev/real.jsonl" "$out/real.jsonl" 2>/dev/null
exit 0
