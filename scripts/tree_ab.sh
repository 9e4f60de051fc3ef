#!/usr/bin/env bash
# Source trees in one machine start: a command run alternately with each tree of TREES (default "ab_old/src src":
# a git archive of the older commit, made beside the checkout, and the checkout's own), ROUNDS times each (default
# 2), so the machine's own speed falls on all of them. Each tree compiles its own kernels (the compile cache keys
# hold cuadv's headers). The command must run on every tree (a probe script that needs a newer API than ab_old has
# fails on its rounds).
#   mkdir -p ab_old && git archive REV src | tar -x -C ab_old && scripts/tree_ab.sh python3 -m cuadv bench spmv
# Trees with experiments' patches (scripts/patch_trees.sh), and three trees:
#   scripts/patch_trees.sh x=X.patch y=Y.patch
#   TREES="src ab_x/src ab_y/src" scripts/tree_ab.sh python3 scripts/hist_peers_probe.py int32-uniform:65536
set -u
for round in $(seq 1 "${ROUNDS:-2}"); do
  for tree in ${TREES:-ab_old/src src}; do
    [ -d "$tree/cuadv" ] || { echo "no cuadv under $tree" >&2; exit 2; }  # else an installed cuadv would run
    echo "== round $round: $tree"
    PYTHONPATH=$tree "$@"
  done
done
