#!/usr/bin/env bash
# An experiment's GPU trial in one device call: for each trial named, apply its patch (or patches joined by "+",
# in that order) to this tree (the device machine works on a copy of the checkout), run GPU tests and
# compute-sanitizer over one lab, then take the patches out again (also when a step fails or times out).
# Logs in $OUT: NAME-tests.log, NAME-check.log (NAME: the patches' names joined by "__"), summary.txt.
#   scripts/patch_trial.sh docs/results/cpu-2026-12-04-2230/bulk_flush_not_run.patch
#   TESTS="tests/test_histogram_gpu.py -k wraps" LAB=histogram scripts/patch_trial.sh A.patch A.patch+B.patch
# Timing A/B of the same patches: scripts/patch_trees.sh, then scripts/tree_ab.sh.
set -u
OUT=${OUT:-$PWD/gpu-results}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
t() { timeout --signal=INT --kill-after=10 "${STEP_TIMEOUT:-280}" "$@"; }
applied=()  # the patches in, newest last
take_out() {
  for ((i = ${#applied[@]} - 1; i >= 0; i--)); do git apply -R "${applied[i]}"; done
  applied=()
}
trap take_out EXIT
for trial in "$@"; do
  name=
  IFS=+ read -ra patches <<< "$trial"
  for patch in "${patches[@]}"; do
    name=${name:+${name}__}$(basename "$patch" .patch)  # (no "+" in file names: they come back from the device)
    if git apply "$patch"; then applied+=("$patch"); else name=; break; fi
  done
  if [ -z "$name" ]; then
    take_out
    echo "$trial: does not apply to this tree" | tee -a "$OUT/summary.txt"
    continue
  fi
  t python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider ${TESTS:-tests/test_histogram_gpu.py} \
    > "$OUT/$name-tests.log" 2>&1
  tests=$?
  t python3 -m cuadv check --lab "${LAB:-histogram}" > "$OUT/$name-check.log" 2>&1
  check=$?
  take_out
  echo "$name: tests exit $tests ($(tail -n 1 "$OUT/$name-tests.log")), check exit $check" | tee -a "$OUT/summary.txt"
done
