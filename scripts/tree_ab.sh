#!/usr/bin/env bash
# Two trees in one machine start: a command run alternately with ab_old/src (a git archive of the older commit,
# made beside the checkout) and src, ROUNDS times each (default 2), so the machine's own speed falls on both.
# Each tree compiles its own kernels (the compile cache keys hold cuadv's headers). The command must run on both
# trees (a probe script that needs a newer API than ab_old has fails on its rounds).
#   mkdir -p ab_old && git archive REV src | tar -x -C ab_old && scripts/tree_ab.sh python3 -m cuadv bench spmv
set -u
for round in $(seq 1 "${ROUNDS:-2}"); do
  for tree in ab_old/src src; do
    echo "== round $round: $tree"
    PYTHONPATH=$tree "$@"
  done
done
