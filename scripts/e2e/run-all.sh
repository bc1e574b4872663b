#!/usr/bin/env bash
# The whole e2e on a fresh kind cluster: create it, build and load the image, install the chart,
# apply the examples, produce and consume, scale 3 -> 4, roll a config change, delete the cluster.
# E2E_KEEP=1 keeps the kind cluster afterwards (to look around); diagnostics print on failure.
set -euo pipefail
dir="$(cd "$(dirname "$0")" && pwd)"
steps=(00-kind-up.sh 10-build-image.sh 20-install.sh 30-cluster.sh 40-produce-consume.sh 50-scale.sh 60-config-roll.sh)
start=$SECONDS
for s in "${steps[@]}"; do
    t=$SECONDS
    if ! "$dir/$s"; then
        echo "e2e: ${s} failed after $((SECONDS - start)) s" >&2
        "$dir/dump.sh" || true
        [[ "${E2E_KEEP:-0}" == 1 ]] || "$dir/99-kind-down.sh" || true
        exit 1
    fi
    echo "    (${s}: $((SECONDS - t)) s)"
done
[[ "${E2E_KEEP:-0}" == 1 ]] || "$dir/99-kind-down.sh"
echo "e2e: all steps passed in $((SECONDS - start)) s"
