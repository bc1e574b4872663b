#!/usr/bin/env bash
# The whole e2e on a fresh kind cluster: create it, build and load the image, install the chart,
# apply the examples (secured), produce and consume, two KafkaUsers, faults under load,
# scale 3 -> 4 -> 3, the rebalancer, rolls with an operator failover, bad input; then delete the
# cluster.
# E2E_KEEP=1 keeps the kind cluster afterwards (to look around); diagnostics print on failure.
# The steps are those of lib.sh (E2E_CLUSTER_STEPS, E2E_TEST_STEPS), shared with scripts/e2e/local.
source "$(dirname "$0")/lib.sh"
start=$SECONDS
if ! run_steps "${E2E_CLUSTER_STEPS[@]}" "${E2E_TEST_STEPS[@]}"; then
    [[ "${E2E_KEEP:-0}" == 1 ]] || "$ROOT/scripts/e2e/99-kind-down.sh" || true
    exit 1
fi
[[ "${E2E_KEEP:-0}" == 1 ]] || "$ROOT/scripts/e2e/99-kind-down.sh"
echo "e2e: all steps passed in $((SECONDS - start)) s"
