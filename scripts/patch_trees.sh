#!/usr/bin/env bash
# Source trees of experiments, made on the development machine (from the repository root) before a device call:
# for each NAME=PATCH[+PATCH...], ab_NAME/ holds `git archive REV src tests examples` (REV: HEAD unless set) with those
# patches applied in order; a tree whose patches do not all apply is not left behind. The trees are untracked and
# not ignored, so they travel with the next device call (the device needs no git); remove them after it
# (rm -rf ab_*). Then: scripts/patch_trial.sh (their GPU tests and sanitizers) and scripts/tree_ab.sh (their
# timings, alternated with the checkout's src).
#   D=docs/results/cpu-2026-12-04-2230
#   scripts/patch_trees.sh replica=docs/results/h200-2026-12-04-2115/replica_flush_not_run.patch \
#     bulk=$D/bulk_flush_not_run.patch+$D/bulk_flush_32bit_not_run.patch
set -eu
rev=${REV:-HEAD}
for spec in "$@"; do
  dir=ab_${spec%%=*}
  rm -rf "$dir" "$dir.tmp" && mkdir -p "$dir.tmp"
  git archive "$rev" src tests examples | tar -x -C "$dir.tmp"
  IFS=+ read -ra patches <<< "${spec#*=}"
  for patch in "${patches[@]}"; do
    git apply --directory="$dir.tmp" "$patch" || { rm -rf "$dir.tmp"; echo "$dir: $patch does not apply" >&2; exit 1; }
  done
  mv "$dir.tmp" "$dir"
  echo "$dir: $rev + ${spec#*=}"
done
