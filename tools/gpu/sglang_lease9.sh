#!/usr/bin/env bash
# SGLang leases 8-18 for issue 32 (research/plans/sglang_lease8.md, ..., sglang_lease18.md), run on
# the device after `source .gpu/install_sglang.sh`; results go under $OUT as they come, in at most 8 files (the
# device returns no more).
#
#   bash tools/gpu/sglang_lease9.sh SECONDS STEP...
#
# SECONDS: what this call may still spend. STEP, in the order given, each one engine start, only while 110 s are left:
#   h4 h5 h6 h7   held-out configurations on Batching-v0's two workloads (closed loop, 256 users) -> rows.jsonl
#   e1 e2 e3 e4   lease 12's held-out configurations, passes outside any CUDA graph (the same) -> rows.jsonl
#   s1 s2 s3      lease 14's held-out configurations (the same) -> rows.jsonl
#   spm spm64     lease 14: the defaults on the catalog's shared_prefix_many and rag_chat (open loops), and
#                 max_running_requests 64 on shared_prefix_many -> rows.jsonl
#   p32 p96 p160  lease 14: short_long with every decode pass logged, cuda_graph_max_bs 32, 96 or 160 -> rows.jsonl
#   mN            lease 16: many_small with every decode pass logged, cuda_graph_max_bs N (the collector frozen)
#                 -> rows.jsonl
#   t tN          lease 17: many_small with the collector frozen and no pass log, SGLang's defaults (t) or
#                 cuda_graph_max_bs N: each request's own time stamps (the driver keeps them) -> rows.jsonl
#   n nN          lease 18: t and tN with SGLang's overlap scheduler off (disable_overlap_schedule) -> rows.jsonl
#   g1 g2 g3      lease 15's training configurations: cuda_graph_max_bs 32 with max_running_requests 64, 160 and
#                 SGLang's default, on both workloads (decode above the largest graph at three batch sizes) -> rows.jsonl
#   x1            lease 15's held-out configuration (the same) -> rows.jsonl
#   passes        the defaults on many_small logging every decode pass (decode_log_interval 1) -> rows.jsonl
#   MODE:NAME     the configuration NAME (defaults, c1, c2, ...) of PLAN's candidates (CANDIDATES, env, names another
#                 candidates file) on both workloads, the driver's garbage collector MODE (live or frozen:
#                 `rsi_env.real.gc_pauses`) -> rows.jsonl
#   passes-frozen the passes step with the collector frozen -> rows.jsonl
#   rN            repeat N of the plan PLAN (env, default batching_sglang_h100_b): its defaults, c1 and c2 promoted
#                 -> rN/real.jsonl; PROMOTE_PLAN (env) promotes that plan file instead, ONLY (env) names its
#                 configurations (lease 11: research/sglang_fit/frozen_search/batching_sglang_h100_d.yaml,
#                 defaults,c1,c2,c3)
# SERVER_ARGS (env): SGLang server arguments added to every start, e.g. "attention_backend=triton
# sampling_backend=pytorch" where the FlashAttention-3 pieces were not carried (rows not comparable with fa3's).
# Every start's log is appended to logs.txt under a header line; progress.txt says what ran and when.
set -u
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"  # rsi_env from this tree, in every process promote starts
budget=${1:?seconds}; shift
start=$SECONDS
out=${OUT:?set OUT to the folder whose files come back}
plan=${PLAN:-batching_sglang_h100_b}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$name" in
  *H200*) card=h200 ;;
  *H100*) card=h100-sxm ;;
  *) echo "sglang_lease9: unknown card: $name" >&2; exit 2 ;;
esac
echo "card: $name -> $card" >> "$out/progress.txt"
work=$(mktemp -d)
python3 - "$work" "${CANDIDATES:-configs/eval/$plan.candidates.json}" <<'PY'
import json, sys, yaml
doc = json.load(open(sys.argv[2]))
for w in doc["workloads"]:
    open(f"{sys.argv[1]}/{w['name']}.yaml", "w").write(yaml.safe_dump(w))
for c in [doc["defaults"], *doc["candidates"]]:  # one --set line per flag, for MODE:NAME
    open(f"{sys.argv[1]}/{c['name']}.sets", "w").write("".join(f"--set\n{k}={json.dumps(v)}\n"
                                                               for k, v in c["flags"].items()))
PY
extra=()
for a in ${SERVER_ARGS:-}; do extra+=(--server-arg "$a"); done
echo "server args: ${SERVER_ARGS:-none}" >> "$out/progress.txt"
left() { echo $((budget - (SECONDS - start))); }
log() { echo "$1: $2 at $((SECONDS - start)) s" >> "$out/progress.txt"; }
drive() {  # $1: a label; the rest: driver arguments
  local label=$1; shift
  if [ "$(left)" -lt 110 ]; then log "$label" "skipped ($(left) s left)"; return; fi
  echo "===== $label" >> "$out/logs.txt"
  timeout $(( $(left) - 5 )) python3 -m rsi_env.real.sglang_driver --model llama-3.1-8b --hardware "$card" \
    --slo-from-workload --out "$out/rows.jsonl" "${extra[@]}" "$@" >> "$out/logs.txt" 2>&1
  log "$label" "exit $?"
}
both=(--workload "$work/short_long.yaml" --workload "$work/many_small.yaml")
for step in "$@"; do
  case "$step" in
    h4) drive h4 "${both[@]}" --set max_running_requests=192 --set chunked_prefill_size=4096 ;;
    h5) drive h5 "${both[@]}" --set schedule_conservativeness=0.3 --set cuda_graph_max_bs=160 ;;
    h6) drive h6 "${both[@]}" --set chunked_prefill_size=2048 --set max_prefill_tokens=4096 ;;
    h7) drive h7 "${both[@]}" --set page_size=16 --set schedule_policy=lpm ;;
    e1) drive e1 "${both[@]}" --set cuda_graph_max_bs=96 ;;
    e2) drive e2 "${both[@]}" --set max_running_requests=96 --set cuda_graph_max_bs=48 --set chunked_prefill_size=2048 ;;
    e3) drive e3 "${both[@]}" --set chunked_prefill_size=-1 --set max_running_requests=192 ;;
    e4) drive e4 "${both[@]}" --set cuda_graph_max_bs=200 --set chunked_prefill_size=4096 \
          --set schedule_conservativeness=0.8 ;;
    s1) drive s1 "${both[@]}" --set max_running_requests=48 --set chunked_prefill_size=8192 ;;
    s2) drive s2 "${both[@]}" --set max_running_requests=80 --set schedule_conservativeness=0.5 ;;
    s3) drive s3 "${both[@]}" --set max_running_requests=160 --set chunked_prefill_size=2048 ;;
    g1) drive g1 "${both[@]}" --set cuda_graph_max_bs=32 --set max_running_requests=64 ;;
    g2) drive g2 "${both[@]}" --set cuda_graph_max_bs=32 --set max_running_requests=160 ;;
    g3) drive g3 "${both[@]}" --set cuda_graph_max_bs=32 ;;
    x1) drive x1 "${both[@]}" --set cuda_graph_max_bs=64 --set max_running_requests=128 --set chunked_prefill_size=4096 ;;
    spm) drive spm --workload rsi_env/catalog/workloads/shared_prefix_many.yaml \
           --workload rsi_env/catalog/workloads/rag_chat.yaml ;;
    spm64) drive spm64 --workload rsi_env/catalog/workloads/shared_prefix_many.yaml --set max_running_requests=64 ;;
    p32|p96|p160) drive "$step" --workload "$work/short_long.yaml" --set cuda_graph_max_bs="${step#p}" \
                    --server-arg decode_log_interval=1 --gc frozen ;;
    m[0-9]*) drive "$step" --workload "$work/many_small.yaml" --set cuda_graph_max_bs="${step#m}" \
               --server-arg decode_log_interval=1 --gc frozen ;;
    t) drive t --workload "$work/many_small.yaml" --gc frozen ;;
    t[0-9]*) drive "$step" --workload "$work/many_small.yaml" --set cuda_graph_max_bs="${step#t}" --gc frozen ;;
    n) drive n --workload "$work/many_small.yaml" --gc frozen --server-arg disable_overlap_schedule=true ;;
    n[0-9]*) drive "$step" --workload "$work/many_small.yaml" --set cuda_graph_max_bs="${step#n}" --gc frozen \
               --server-arg disable_overlap_schedule=true ;;
    passes) drive passes --workload "$work/many_small.yaml" --server-arg decode_log_interval=1 --gc live ;;
    passes-frozen) drive "$step" --workload "$work/many_small.yaml" --server-arg decode_log_interval=1 --gc frozen ;;
    live:*|frozen:*)
      cfg=${step#*:}
      if [ ! -f "$work/$cfg.sets" ]; then log "$step" "no configuration $cfg in $plan"; continue; fi
      mapfile -t sets < "$work/$cfg.sets"
      drive "$step" "${both[@]}" "${sets[@]}" --gc "${step%%:*}" ;;
    r[0-9]*)
      if [ "$(left)" -lt 260 ]; then log "$step" "skipped ($(left) s left)"; continue; fi
      echo "===== $step" >> "$out/logs.txt"
      python3 -m rsi_env.evaluate.promote --plan "${PROMOTE_PLAN:-configs/eval/$plan.yaml}" \
        --only "${ONLY:-defaults,c1,c2}" --gpus 0 \
        --hardware "$card" --deadline-s $(( $(left) - 10 )) --out "$out/$step" >> "$out/logs.txt" 2>&1
      log "$step" "exit $?" ;;
    *) log "$step" "unknown step" ;;
  esac
done
exit 0
