#!/usr/bin/env bash
# Creates the kind cluster ($KIND_CONFIG, by default scripts/e2e/kind.yaml; $KIND_NODE_IMAGE if
# set) unless a working one exists, and points kubectl at it.
source "$(dirname "$0")/lib.sh"
need docker "kind runs Kubernetes nodes as containers"
need kubectl "https://kubernetes.io/docs/tasks/tools/"
step "kind cluster ${KIND_CLUSTER}"
create() {
    local image=() start=$SECONDS
    [[ -n "$KIND_NODE_IMAGE" ]] && image=(--image "$KIND_NODE_IMAGE")
    kind_ create cluster --name "$KIND_CLUSTER" --config "$KIND_CONFIG" "${image[@]}" --wait 180s
    info "created in $((SECONDS - start)) s"
}
if kind_ get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER"; then
    info "already exists"
    # Its context may be missing from this KUBECONFIG, and its node containers may not have
    # survived a restart of Docker: then it is made again.
    kind_ export kubeconfig --name "$KIND_CLUSTER" >/dev/null 2>&1 || true
    if ! kubectl --context "kind-${KIND_CLUSTER}" get nodes --request-timeout=20s >/dev/null 2>&1; then
        info "its API server does not answer: deleting it and creating it again"
        kind_ delete cluster --name "$KIND_CLUSTER"
        create
    fi
else
    create
fi
kubectl config use-context "kind-${KIND_CLUSTER}" >/dev/null
kubectl wait --for=condition=Ready nodes --all --timeout=180s >/dev/null
ok "$(kubectl get nodes --no-headers | wc -l) nodes ready, Kubernetes $(kubectl version -o json | sed -n 's/.*"gitVersion": "\(v[^"]*\)".*/\1/p' | tail -1)"
