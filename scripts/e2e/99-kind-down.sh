#!/usr/bin/env bash
# Deletes the kind cluster.
source "$(dirname "$0")/lib.sh"
step "delete kind cluster ${KIND_CLUSTER}"
kind_ delete cluster --name "$KIND_CLUSTER"
ok "deleted"
