#!/usr/bin/env bash
# Prints what helps to understand a failed e2e: resources, their status, events, operator logs.
source "$(dirname "$0")/lib.sh"
set +e
step "diagnostics"
kubectl get nodes -o wide
kubectl -n "$OPERATOR_NS" get all,lease
k get kafkacluster,kafkatopic -o wide
k get kafkacluster,kafkatopic -o yaml
k get statefulset,pods,pvc,svc,configmap,pdb -o wide
k describe pods -l "$BROKER_SELECTOR"
kubectl get events -A --sort-by=.lastTimestamp | tail -n 80
for pod in $(kubectl -n "$OPERATOR_NS" get pods -l app.kubernetes.io/component=operator -o name); do
    echo "--- logs ${pod}"
    kubectl -n "$OPERATOR_NS" logs "$pod" --tail=300
done
for pod in $(k get pods -l "$BROKER_SELECTOR" -o name); do
    echo "--- logs ${pod} (broker)"
    k logs "$pod" -c broker --tail=100
    k logs "$pod" -c broker --previous --tail=50 2>/dev/null
done
exit 0
