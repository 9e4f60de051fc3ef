#!/usr/bin/env bash
# Experiments' GPU trials in one device call: for each tree named (ab_NAME from scripts/patch_trees.sh: src and
# tests with the experiment's patches), its GPU tests (its own tests/, whose conftest puts its src first) and
# compute-sanitizer over one lab, run on its src. Logs in $OUT: NAME-tests.log, NAME-check.log, summary.txt; exit 1
# if any trial failed or a tree is missing.
#   scripts/patch_trial.sh ab_bulk ab_replica
#   TESTS="test_histogram_gpu.py -k wraps" LAB=histogram scripts/patch_trial.sh ab_bulk
# Timing A/B of the same trees: scripts/tree_ab.sh with TREES="src ab_bulk/src ...".
set -u
OUT=${OUT:-$PWD/gpu-results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
t() { timeout --signal=INT --kill-after=10 "${STEP_TIMEOUT:-280}" "$@"; }
failed=0
for tree in "$@"; do
  name=$(basename "$tree")
  if [ ! -d "$tree/src/cuadv" ]; then  # else an installed cuadv would be checked under this name
    echo "$name: no tree (scripts/patch_trees.sh makes it)" | tee -a "$OUT/summary.txt"
    failed=1
    continue
  fi
  read -ra tests <<< "${TESTS:-test_histogram_gpu.py}"  # a file of the tree's tests/, then pytest's options
  tests[0]=$tree/tests/${tests[0]}
  t python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider "${tests[@]}" > "$OUT/$name-tests.log" 2>&1
  rc_tests=$?
  PYTHONPATH=$tree/src t python3 -m cuadv check --lab "${LAB:-histogram}" > "$OUT/$name-check.log" 2>&1
  rc_check=$?
  echo "$name: tests exit $rc_tests ($(tail -n 1 "$OUT/$name-tests.log")), check exit $rc_check" \
    | tee -a "$OUT/summary.txt"
  [ "$rc_tests" -eq 0 ] && [ "$rc_check" -eq 0 ] || failed=1
done
exit $failed
