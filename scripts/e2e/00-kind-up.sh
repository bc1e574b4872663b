#!/usr/bin/env bash
# Creates the kind cluster ($KIND_CONFIG, by default scripts/e2e/kind.yaml; $KIND_NODE_IMAGE if
# set) unless it exists, and points kubectl at it.
source "$(dirname "$0")/lib.sh"
need docker "kind runs Kubernetes nodes as containers"
need kubectl "https://kubernetes.io/docs/tasks/tools/"
step "kind cluster ${KIND_CLUSTER}"
if kind_ get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER"; then
    info "already exists"
else
    image=()
    [[ -n "$KIND_NODE_IMAGE" ]] && image=(--image "$KIND_NODE_IMAGE")
    start=$SECONDS
    kind_ create cluster --name "$KIND_CLUSTER" --config "$KIND_CONFIG" "${image[@]}" --wait 180s
    info "created in $((SECONDS - start)) s"
fi
kubectl config use-context "kind-${KIND_CLUSTER}" >/dev/null
kubectl wait --for=condition=Ready nodes --all --timeout=180s >/dev/null
ok "$(kubectl get nodes --no-headers | wc -l) nodes ready, Kubernetes $(kubectl version -o json | sed -n 's/.*"gitVersion": "\(v[^"]*\)".*/\1/p' | tail -1)"
