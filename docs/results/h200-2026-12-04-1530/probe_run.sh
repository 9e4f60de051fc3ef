#!/usr/bin/env bash
# scratch: session 34's first device call (not committed)
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CUADV_CACHE_DIR=/tmp/cuadv-cache
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; git log -1 --format=%h; } > $OUT/env.txt 2>&1
# A. sanitizer on main's tma path (session 33's carry-over)
{
el warm; timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_tma_api_gpu.py 2>&1 | tail -3
for tool in memcheck racecheck synccheck; do
  el $tool; timeout 100 compute-sanitizer --tool $tool --report-api-errors no python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_tma_api_gpu.py -k "keeps_its_checked or prepared_ops or bad_user" 2>&1 | tail -4
done
el check; timeout 150 python3 -m cuadv check --lab tma 2>&1 | tail -15
el done
} > $OUT/tma_sanitizer.log 2>&1
# B. SpMV cache hints: main (src) and 4 variants, rounds outer
for round in 1 2; do
  for tree in src ab_v1/src ab_v2/src ab_v3/src ab_v4/src; do
    left=$(( ${BUDGET:-560} - ($(date +%s) - T0) )); [ $left -lt 40 ] && break 2
    el "round $round $tree"
    PYTHONPATH=$PWD/$tree timeout $left python3 scripts/spmv_sweep.py --matrix R-MAT power-law --policy steal fixed_work 2>&1 | grep -v Warning | grep -v "sparse_csr_tensor"
  done
done > $OUT/spmv_hints.log 2>&1
el end >> $OUT/spmv_hints.log
