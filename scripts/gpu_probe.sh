#!/usr/bin/env bash
# A lent GPU, end to end in < 9 min: gpu_check on the machine's own python3 and CUDA torch (no install, no
# network; the repo on PYTHONPATH), everything under $OUT in <= 8 files. Assumes: python3 with torch (CUDA),
# numpy, pandas, (triton); the repo copied (tracked files). CPU here:
#   OUT=/tmp/p GPU_PROBE_DEVICE=cpu GPU_PROBE_SMALL=1 bash scripts/gpu_probe.sh
set -u
: "${OUT:?set OUT to the output directory}"
PY=${PYTHON:-python3}
cd "$(dirname "$0")/.." || exit 1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$OUT/gc"
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -3
  $PY -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda",
torch.version.cuda, "gpu", torch.cuda.is_available())' 2>&1
  $PY -c 'import triton; print("triton", triton.__version__)' 2>&1 | tail -1
} >"$OUT/env.txt"
cat "$OUT/env.txt"
# 480 s for the check itself; what finished by then is on disk (a CSV per section)
timeout "${GPU_PROBE_TIMEOUT:-480}" $PY -m mrp_repro.gpu_check --out "$OUT/gc" \
  --device "${GPU_PROBE_DEVICE:-cuda}" ${GPU_PROBE_SMALL:+--small} \
  ${GPU_PROBE_SECTIONS:+--sections "$GPU_PROBE_SECTIONS"} >"$OUT/gpu_check.log" 2>&1
rc=$?
tail -40 "$OUT/gpu_check.log"
for f in gpu_check.csv gpu_check.md; do [ -f "$OUT/gc/$f" ] && cp "$OUT/gc/$f" "$OUT/"; done
tar -C "$OUT" -czf "$OUT/sections.tar.gz" gc && rm -rf "$OUT/gc"
echo "gpu_probe: gpu_check exit $rc; files: $(ls "$OUT" | tr '\n' ' ')"
exit $rc
