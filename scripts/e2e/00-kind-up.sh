#!/usr/bin/env bash
# Creates the kind cluster (scripts/e2e/kind.yaml) unless it exists, and points kubectl at it.
source "$(dirname "$0")/lib.sh"
need docker "kind runs Kubernetes nodes as containers"
need kubectl "https://kubernetes.io/docs/tasks/tools/"
step "kind cluster ${KIND_CLUSTER}"
if kind_ get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER"; then
    info "already exists"
else
    kind_ create cluster --name "$KIND_CLUSTER" --config "$ROOT/scripts/e2e/kind.yaml" --wait 180s
fi
kubectl config use-context "kind-${KIND_CLUSTER}" >/dev/null
kubectl wait --for=condition=Ready nodes --all --timeout=180s >/dev/null
ok "$(kubectl get nodes --no-headers | wc -l) nodes ready, Kubernetes $(kubectl version -o json | sed -n 's/.*"gitVersion": "\(v[^"]*\)".*/\1/p' | tail -1)"
