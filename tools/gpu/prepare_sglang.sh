#!/usr/bin/env bash
# Prepare SGLang 0.5.17 (the release pinned to torch 2.11.0, the H200 machine's own torch) for a GPU machine that
# reaches no package registry and takes at most 64 MiB a call: trimmed, xz-compressed, split into pieces of at most
# 61 MB. Run here from the project's root: `bash tools/gpu/prepare_sglang.sh [--fa3]`. Output: .gpu/s1 .gpu/s2 (ignored
# by git), with --fa3 also .gpu/f1 ... (FlashAttention-3, SGLang's default attention on Hopper), and
# .gpu/install_sglang.sh. On the GPU machine, carry one piece per call, back to back, and
# `source .gpu/install_sglang.sh` in each (see docs/sglang.md). Piece sizes in bytes: SGLANG_PIECE (default
# 61000000) and FA3_PIECE (default 61000000); a call carries the tracked tree too, so with the repository's ~5 MB (data/
# moved aside) 31100000 and 28000000 pair one SGLang piece with one FA3 piece per call: 4 calls in all.
#
# Left out, and why:
# - sgl_kernel/flash_ops.abi3.so (FlashAttention-3 for SGLang's default "fa3" attention backend on Hopper):
#   1,123 MB; only with --fa3, in pieces of its own (.gpu/fN). Without it the engine needs
#   attention_backend="triton" (SGLang's default stops: "Can not import FA3 in sgl_kernel").
# - sgl_kernel/sm100/common_ops.abi3.so (Blackwell), flashmla_ops (DeepSeek MLA), infllm_ops, spatial_ops.
# - sglang/multimodal_gen (diffusion), sglang/test, sglang/benchmark: not imported by the engine; the Rust HTTP
#   server, gRPC and multimodal extensions (sglang/srt/{server,grpc,multimodal}/_core.so): the offline Engine
#   serves no HTTP and no images.
# - The declared dependencies that a dense or MoE dummy-weight model never imports on Hopper (flash-attn-4,
#   tilelang, nvidia-cutlass-dsl, sgl-deep-gemm, quack-kernels, humming-kernels, helion, torchao, numba,
#   llguidance, outlines, datasets, modelscope, ...): found by recording every import of a running engine
#   (tools/gpu/import_log.py); see docs/sglang.md.
# - zstandard (the HTTP server's request decompression). flashinfer stays: fp8_utils imports it unguarded.
# - xgrammar is taken at 0.2.6 (1.2 MB) rather than SGLang's pin 0.2.1 (45 MB): at start SGLang imports only its
#   StructuralTag type; grammar-constrained decoding is not measured here.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(git rev-parse --show-toplevel)"
cd "$root"
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
work="${TMPDIR:-/tmp}/rsi-sglang-prep"
mkdir -p "$work/dl" "$work/deps"
fa3=0; [ "${1:-}" = "--fa3" ] && fa3=1
if [ ! -f "$work/sglang.tar.xz" ]; then
  pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_34_x86_64 --platform manylinux2014_x86_64 \
    sglang==0.5.17 sglang-kernel==0.4.5 -d "$work/dl"
  rm -rf "$work/x" && mkdir -p "$work/x"
  (cd "$work/x" && python3 -m zipfile -e "$work"/dl/sglang-0.5.17-*.whl . \
                && python3 -m zipfile -e "$work"/dl/sglang_kernel-0.4.5-*.whl .)
  rm -rf "$work/x/sglang/multimodal_gen" "$work/x/sglang/test" "$work/x/sglang/benchmark"
  rm -f "$work/x/sgl_kernel/flash_ops.abi3.so" "$work/x/sgl_kernel/flashmla_ops.abi3.so" \
        "$work/x/sgl_kernel"/infllm_ops.*.so "$work/x/sgl_kernel/spatial_ops.abi3.so"
  rm -rf "$work/x/sgl_kernel/sm100"
  rm -f "$work/x/sglang/srt/server"/_core.*.so "$work/x/sglang/srt/grpc"/_core.*.so "$work/x/sglang/srt/multimodal"/_core.*.so
  plats=""; for n in 17 24 26 27 28 31 34 35 38 39; do plats="$plats --platform manylinux_2_${n}_x86_64"; done
  pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $plats \
    --platform manylinux2014_x86_64 -d "$work/deps" -r "$here/sglang-deps.txt"
  mkdir -p "$work/x/wheels/force" && cp "$work"/deps/*.whl "$work/x/wheels/"
  for d in $(sed -n 's/^\([A-Za-z0-9_.-]*\)==.*# force.*/\1/p' "$here/sglang-deps.txt" | tr '-' '_'); do
    mv "$work/x/wheels/$d"-*.whl "$work/x/wheels/force/"
  done
  (cd "$work/x" && tar cf - .) | xz -T2 -6 > "$work/sglang.tar.xz"
fi
rm -rf .gpu/s[0-9]*
rm -f "$work"/part.*
split -b "${SGLANG_PIECE:-61000000}" -d "$work/sglang.tar.xz" "$work/part."
n=$(ls "$work"/part.* | wc -l)
i=0
for p in "$work"/part.*; do
  i=$((i + 1)); mkdir -p ".gpu/s$i"; mv "$p" ".gpu/s$i/sglang.tar.xz.$(basename "$p" | cut -d. -f2)"
  echo "$n" > ".gpu/s$i/pieces"
done
rm -rf .gpu/f[0-9]*
if [ "$fa3" = 1 ]; then
  if [ ! -f "$work/flash_ops.tar.xz" ]; then
    rm -rf "$work/fa3" && mkdir -p "$work/fa3"
    (cd "$work/fa3" && python3 -m zipfile -e "$work"/dl/sglang_kernel-0.4.5-*.whl . >/dev/null \
      && tar cf - sgl_kernel/flash_ops.abi3.so) | xz -T2 -6 > "$work/flash_ops.tar.xz"
    rm -rf "$work/fa3"
  fi
  rm -f "$work"/fpart.*
  split -b "${FA3_PIECE:-61000000}" -d "$work/flash_ops.tar.xz" "$work/fpart."
  n=$(ls "$work"/fpart.* | wc -l)
  i=0
  for p in "$work"/fpart.*; do
    i=$((i + 1)); mkdir -p ".gpu/f$i"; mv "$p" ".gpu/f$i/flash_ops.tar.xz.$(basename "$p" | cut -d. -f2)"
    echo "$n" > ".gpu/f$i/pieces"
  done
fi
cp "$here/install_sglang.sh" "$here/import_log.py" .gpu/
du -sh .gpu/s[0-9]* .gpu/f[0-9]* 2>/dev/null
