#!/usr/bin/env bash
# Host time per launch of two trees in one machine start (scripts/tree_ab.sh): the probe run alternately with
# ab_old/src and src, twice each.
#   mkdir -p ab_old && git archive REV src | tar -x -C ab_old && scripts/host_ab.sh > ab.log
set -u
ROUNDS=2 "$(dirname "$0")/tree_ab.sh" sh -c 'python3 scripts/host_launch_profile.py --host-only --calls 1000 --top 0 2>/dev/null | grep "host us"'
