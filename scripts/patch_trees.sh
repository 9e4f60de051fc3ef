#!/usr/bin/env bash
# Source trees for an A/B of experiments (scripts/tree_ab.sh), made on the development machine before a device
# call: for each NAME=PATCH[+PATCH...], ab_NAME/src is `git archive REV src` (REV: HEAD unless set) with those
# patches' changes under src/ applied in order (their tests stay out: the tests run from the checkout). The trees
# are untracked and not ignored, so they travel with the next device call; remove them after it (rm -rf ab_*).
#   D=docs/results/cpu-2026-12-04-2230
#   scripts/patch_trees.sh replica=docs/results/h200-2026-12-04-2115/replica_flush_not_run.patch \
#     bulk=$D/bulk_flush_not_run.patch+$D/bulk_flush_32bit_not_run.patch
set -eu
rev=${REV:-HEAD}
for spec in "$@"; do
  name=${spec%%=*}
  dir=ab_$name
  rm -rf "$dir" && mkdir -p "$dir"
  git archive "$rev" src | tar -x -C "$dir"
  IFS=+ read -ra patches <<< "${spec#*=}"
  for patch in "${patches[@]}"; do git apply --directory="$dir" --include="$dir/src/*" "$patch"; done
  echo "$dir/src: $rev + ${spec#*=}"
done
