#!/usr/bin/env bash
# Host time per launch of two trees in one machine start: the probe run alternately with ab_old/src (a git archive
# of the older commit, made beside the checkout) and src, twice each, so the machine's own host speed falls on both.
#   git archive REV src | tar -x -C ab_old && scripts/host_ab.sh > ab.log
set -u
for round in 1 2; do
  for tree in ab_old/src src; do
    echo "== round $round: $tree"
    PYTHONPATH=$tree python3 scripts/host_launch_profile.py --host-only --calls 1000 --top 0 2>/dev/null | grep "host us"
  done
done
