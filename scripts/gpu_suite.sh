#!/usr/bin/env bash
# The one GPU call: GPU tests, compute-sanitizer over every lab, the main job (and optional benches),
# with every log in $OUT. Runs from the repository root without installing anything.
#
#   scripts/gpu_suite.sh                 tests, check, run (--quick)
#   scripts/gpu_suite.sh tests bench:scheduling run-full
#   PYTEST_ARGS="-k clusters" CHECK_ARGS="--lab vecscale" RUN_ARGS="--only vecscale" scripts/gpu_suite.sh tests
#   BENCH_ARGS=--peer scripts/gpu_suite.sh bench:domains     (on a machine with 2 GPUs)
#
# Steps: build (fills the compile cache in parallel) | tests | check | run | run-full | examples | sweep | profile | bench:LAB
# $OUT ends with at most 8 files: env.txt, build.log, pytest.log, check.log, run.log, bench.log or examples.log,
# report.tar.gz (reports, benches, profiles), summary.txt.
set -u
OUT=${OUT:-$PWD/gpu-results}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export CUADV_CACHE_DIR=${CUADV_CACHE_DIR:-/tmp/cuadv-cache}
STEPS=${*:-build tests check run}
STEP_TIMEOUT=${STEP_TIMEOUT:-300}  # seconds per step: one hung step must not lose the others' results
t() { timeout --signal=INT --kill-after=10 "$STEP_TIMEOUT" "$@"; }
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
# Reports, benches and profiles are written outside $OUT and packed into report.tar.gz after every step, so a call
# cut off at the device's limit still brings back every finished step's files (and never more than 8 files).
REPORT_PARENT=$(mktemp -d)
REPORT=$REPORT_PARENT/report
trap 'rm -rf "$REPORT_PARENT"' EXIT

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv
  nvidia-smi topo -m  # how the GPUs are linked (NVLink or PCIe), for multi-GPU runs
  python3 -c "import sys, cuda.core, cuda.bindings, numpy; print(sys.version); print('cuda.core', cuda.core.__version__, 'cuda.bindings', cuda.bindings.__version__, 'numpy', numpy.__version__)"
  python3 -c "import cupy; print('cupy', cupy.__version__)"
  python3 -m cuadv caps
} > "$OUT/env.txt" 2>&1

note() { echo "$*" | tee -a "$SUMMARY"; }

for step in $STEPS; do
  start=$(date +%s)
  case $step in
    build)
      # this GPU's target, and the two the build check of `cuadv run` compiles (so that check finds them cached)
      dev=$(python3 -c 'from cuadv.device import current_device as d; print(d().caps.arch)')
      archs=$(printf '%s\n' "$dev" sm_90a sm_100a | sort -u | sed 's/^/--arch /' | tr '\n' ' ')
      t python3 -m cuadv build $archs --jobs 12 > "$OUT/build.log" 2>&1
      note "build: exit $? in $(( $(date +%s) - start )) s" ;;
    tests)
      t python3 -m pytest -m gpu -q -rs -p no:cacheprovider ${PYTEST_ARGS:-} > "$OUT/pytest.log" 2>&1
      note "tests: exit $? ($(tail -n 1 "$OUT/pytest.log")) in $(( $(date +%s) - start )) s" ;;
    check)
      t python3 -m cuadv check --log "$OUT/check-detail.log" ${CHECK_ARGS:-} > "$OUT/check.log" 2>&1
      rc=$?
      tail -c 200000 "$OUT/check-detail.log" >> "$OUT/check.log" 2>/dev/null; rm -f "$OUT/check-detail.log"
      note "check: exit $rc in $(( $(date +%s) - start )) s" ;;
    run|run-full)
      flag=--quick; [ "$step" = run-full ] && flag=
      t python3 -m cuadv run $flag --out "$REPORT" ${RUN_ARGS:-} > "$OUT/run.log" 2>&1
      note "$step: exit $? in $(( $(date +%s) - start )) s" ;;
    examples)
      for ex in examples/*.py; do
        echo "== $ex"; t python3 "$ex"; echo "== $ex: exit $?"
      done > "$OUT/examples.log" 2>&1
      note "examples: $(grep -c ': exit 0$' "$OUT/examples.log") of $(ls examples/*.py | wc -l) exit 0 in $(( $(date +%s) - start )) s" ;;
    sweep)
      # how the shared histogram is fed (register loads or TMA rings), 1 GiB per case, every result checked
      mkdir -p "$REPORT"
      t python3 scripts/hist_feed_sweep.py ${SWEEP_MIB:-1024} ${SWEEP_ARGS:-} > "$REPORT/hist_feed_sweep.log" 2>&1
      note "sweep: exit $? ($(grep -c WRONG "$REPORT/hist_feed_sweep.log") wrong results) in $(( $(date +%s) - start )) s" ;;
    profile)
      # Nsight Compute over the workloads whose targets are missed (scripts/profile_cases.py); the report
      # and a summary of the counters that say why go into the report folder (ncu locks the clocks to base).
      mkdir -p "$REPORT/profile"
      t ncu --profile-from-start off --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
        --section WarpStateStats --section SchedulerStats -f -o "$REPORT/profile/cases" \
        python3 scripts/profile_cases.py ${PROFILE_GROUPS:-hist spmv vecscale} > "$REPORT/profile/ncu.log" 2>&1
      rc=$?
      python3 scripts/profile_cases.py --summary "$REPORT/profile/cases.ncu-rep" "$REPORT/profile/ncu.log" \
        > "$REPORT/profile/summary.txt" 2>&1
      ncu -i "$REPORT/profile/cases.ncu-rep" --csv --page raw | gzip > "$REPORT/profile/raw.csv.gz"
      rm -f "$REPORT/profile/cases.ncu-rep"  # tens of MB: the raw counters above keep what it holds
      note "profile: exit $rc in $(( $(date +%s) - start )) s" ;;
    bench:*)
      t python3 -m cuadv bench "${step#bench:}" ${BENCH_ARGS:-} --out "$REPORT/bench-${step#bench:}" >> "$OUT/bench.log" 2>&1
      note "$step: exit $? in $(( $(date +%s) - start )) s" ;;
    *) note "unknown step $step" ;;
  esac
  if [ -d "$REPORT" ]; then tar -czf "$OUT/report.tar.gz.part" -C "$REPORT_PARENT" report && mv "$OUT/report.tar.gz.part" "$OUT/report.tar.gz"; fi
done
cat "$SUMMARY"
