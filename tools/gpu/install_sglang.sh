#!/usr/bin/env bash
# On the GPU machine: gather the SGLang pieces that have arrived (.gpu/s1, .gpu/s2, ...) into /tmp/sgl-parts; once
# every piece is there, unpack SGLang into /tmp/sgl-site and install the carried wheels whose distribution the
# image lacks; once every FlashAttention-3 piece (.gpu/f1, ..., made with --fa3) is there too, add its library.
# Source it: it exports PYTHONPATH. Made by tools/gpu/prepare_sglang.sh.
mkdir -p /tmp/sgl-parts
for d in .gpu/s[0-9]*; do [ -d "$d" ] && cp -n "$d"/* /tmp/sgl-parts/ 2>/dev/null; done
want=$(cat /tmp/sgl-parts/pieces 2>/dev/null || echo 0)
have=$(ls /tmp/sgl-parts/sglang.tar.xz.* 2>/dev/null | wc -l)
if [ ! -f /tmp/sgl-site/sglang/__init__.py ] && [ "$want" -gt 0 ] && [ "$have" -eq "$want" ]; then
  mkdir -p /tmp/sgl-site
  cat /tmp/sgl-parts/sglang.tar.xz.* | xz -dc | tar xf - -C /tmp/sgl-site
  missing=""
  for w in /tmp/sgl-site/wheels/*.whl; do
    dist=$(basename "$w" | cut -d- -f1)
    python3 -c "import importlib.metadata as m, sys; m.version(sys.argv[1])" "$dist" 2>/dev/null || missing="$missing $w"
  done
  missing="$missing $(ls /tmp/sgl-site/wheels/force/*.whl 2>/dev/null | tr '\n' ' ')"
  [ -n "$missing" ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/sgl-site $missing
  echo "installed into /tmp/sgl-site:$(for w in $missing; do printf ' %s' "$(basename "$w" | cut -d- -f1,2)"; done)"
  rm -rf /tmp/sgl-site/wheels
fi
mkdir -p /tmp/sgl-fa3-parts
for d in .gpu/f[0-9]*; do [ -d "$d" ] && cp -n "$d"/* /tmp/sgl-fa3-parts/ 2>/dev/null; done
fwant=$(cat /tmp/sgl-fa3-parts/pieces 2>/dev/null || echo 0)
fhave=$(ls /tmp/sgl-fa3-parts/flash_ops.tar.xz.* 2>/dev/null | wc -l)
if [ -f /tmp/sgl-site/sglang/__init__.py ] && [ ! -f /tmp/sgl-site/sgl_kernel/flash_ops.abi3.so ] \
   && [ "$fwant" -gt 0 ] && [ "$fhave" -eq "$fwant" ]; then
  cat /tmp/sgl-fa3-parts/flash_ops.tar.xz.* | xz -dc | tar xf - -C /tmp/sgl-site && echo "FlashAttention-3 added"
fi
[ "$fwant" -gt 0 ] && [ "$fhave" -lt "$fwant" ] && echo "FlashAttention-3: $fhave of $fwant pieces"
if [ -f /tmp/sgl-site/sglang/__init__.py ]; then
  export PYTHONPATH=/tmp/sgl-site${PYTHONPATH:+:$PYTHONPATH}
  echo "sglang ready: $(python3 -c 'import sglang; print(sglang.__version__)' 2>&1 | tail -1)"
else
  echo "sglang not ready yet: $have of $want pieces in /tmp/sgl-parts"
fi
