#!/usr/bin/env bash
# An experiment's GPU trial in one device call: for each patch named, apply it to this tree's src (the device
# machine works on a copy of the checkout), run GPU tests and compute-sanitizer over one lab, then take the patch
# out again (also when a step fails or times out). Logs in $OUT: NAME-tests.log, NAME-check.log, summary.txt.
#   scripts/patch_trial.sh docs/results/cpu-2026-12-04-2230/bulk_flush_not_run.patch
#   TESTS="tests/test_histogram_gpu.py -k wraps" LAB=histogram scripts/patch_trial.sh A.patch B.patch
# Timing A/B of the same patches: patched trees beside the checkout and scripts/tree_ab.sh (its header says how).
set -u
OUT=${OUT:-$PWD/gpu-results}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
t() { timeout --signal=INT --kill-after=10 "${STEP_TIMEOUT:-280}" "$@"; }
applied=
trap '[ -n "$applied" ] && git apply -R "$applied"' EXIT
for patch in "$@"; do
  name=$(basename "$patch" .patch)
  if ! git apply "$patch"; then
    echo "$name: does not apply to this tree" | tee -a "$OUT/summary.txt"
    continue
  fi
  applied=$patch
  t python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider ${TESTS:-tests/test_histogram_gpu.py} > "$OUT/$name-tests.log" 2>&1
  tests=$?
  t python3 -m cuadv check --lab "${LAB:-histogram}" > "$OUT/$name-check.log" 2>&1
  check=$?
  git apply -R "$patch" && applied=
  echo "$name: tests exit $tests ($(tail -n 1 "$OUT/$name-tests.log")), check exit $check" | tee -a "$OUT/summary.txt"
done
