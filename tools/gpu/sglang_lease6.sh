#!/usr/bin/env bash
# Lease 6's measurement for issue 32 (research/plans/sglang_lease6.md), run on the device in the call that carries
# the last SGLang piece, after `source .gpu/install_sglang.sh`; results go under $OUT as they come.
#
#   bash tools/gpu/sglang_lease6.sh [SECONDS]     # SECONDS: what this call may still spend (default 560)
#
# SGLang's passes on RSI/Batching-v0's many_small closed loop (256 users), for SGLang's defaults, lease 4's c2 and the
# H100 plan's pick c1 (the configuration sim and real rank oppositely), each twice in a row: once logging every decode
# pass (decode_log_interval 1, what research/sglang_fit/passes.py reads beside the sim's) and once at SGLang's own
# interval (40), which says what logging every pass costs the engine and repeats the configuration's throughput and
# TPOT. One engine start each (~65 s, the first ~130 s), only while at least 110 s are left; rows in
# $OUT/passes.jsonl (interval 1) and $OUT/repeat.jsonl (interval 40), each start's log beside them.
set -u
budget=${1:-560}
start=$SECONDS
out=${OUT:?set OUT to the folder whose files come back}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$name" in
  *H200*) card=h200 ;;
  *H100*) card=h100-sxm ;;
  *) echo "sglang_lease6: unknown card: $name" >&2; exit 2 ;;
esac
echo "card: $name -> $card" | tee "$out/card.txt"
work=$(mktemp -d)
python3 - "$work/many_small.yaml" <<'EOF'
import json, sys, yaml
doc = json.load(open("configs/eval/batching_sglang_h100.candidates.json"))
spec = next(w for w in doc["workloads"] if w["name"] == "many_small")
open(sys.argv[1], "w").write(yaml.safe_dump(spec))
EOF
run() {  # $1: a label; $2: decode_log_interval; $3: the rows' file; the rest: --set FLAG=VALUE ...
  local label=$1 interval=$2 rows=$3; shift 3
  if [ $((budget - (SECONDS - start))) -lt 110 ]; then
    echo "$label skipped: $((budget - (SECONDS - start))) s left" | tee -a "$out/progress.txt"
    return
  fi
  timeout 200 python3 -m rsi_env.real.sglang_driver --model llama-3.1-8b --hardware "$card" --slo-from-workload \
    --workload "$work/many_small.yaml" --server-arg "decode_log_interval=$interval" --out "$out/$rows" "$@" \
    > "$out/$label.log" 2>&1
  echo "$label: exit $? at $((SECONDS - start)) s" | tee -a "$out/progress.txt"
}
pair() {  # $1: a label; the rest: --set FLAG=VALUE ...
  local label=$1; shift
  run "passes-$label" 1 passes.jsonl "$@"
  run "repeat-$label" 40 repeat.jsonl "$@"
}
pair defaults
pair c2 --set max_running_requests=128 --set chunked_prefill_size=-1 --set cuda_graph_max_bs=512
pair c1 --set max_running_requests=512 --set chunked_prefill_size=-1 --set max_prefill_tokens=32768 \
  --set schedule_conservativeness=0.7 --set cuda_graph_max_bs=512
exit 0
