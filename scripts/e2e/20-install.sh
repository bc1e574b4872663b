#!/usr/bin/env bash
# Installs the chart with the e2e image (examples/values-kind.yaml: two operator replicas, so the
# Lease is exercised) and waits for the operator.
source "$(dirname "$0")/lib.sh"
step "helm upgrade --install ${RELEASE} charts/evenkeel -n ${OPERATOR_NS}"
helm_ upgrade --install "$RELEASE" "$ROOT/charts/evenkeel" \
    --namespace "$OPERATOR_NS" --create-namespace \
    -f "$ROOT/examples/values-kind.yaml" \
    --set image.repository="${E2E_IMAGE%:*}" --set image.tag="${E2E_IMAGE##*:}" \
    --wait --timeout 5m
for crd in kafkaclusters.kafka.evenkeel.dev kafkatopics.kafka.evenkeel.dev; do
    kubectl wait --for=condition=Established "crd/${crd}" --timeout=60s >/dev/null
done
ok "CRDs established"
kubectl -n "$OPERATOR_NS" rollout status "deployment/${RELEASE}" --timeout=300s
step "leader election"
deadline=$((SECONDS + 120))
holder=""
while ((SECONDS < deadline)); do
    holder="$(kubectl -n "$OPERATOR_NS" get lease evenkeel-operator -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)"
    [[ -n "$holder" ]] && break
    sleep 2
done
[[ -n "$holder" ]] || die "no operator holds Lease ${OPERATOR_NS}/evenkeel-operator"
ok "Lease evenkeel-operator held by ${holder}"
step "RBAC: what the operator may and may not do"
sa="system:serviceaccount:${OPERATOR_NS}:${RELEASE}"
can() { kubectl auth can-i --as "$sa" "$@" 2>/dev/null || true; }
for a in "list kafkaclusters.kafka.evenkeel.dev -A" "patch kafkatopics.kafka.evenkeel.dev --subresource=status -n ${NS}" \
    "patch statefulsets.apps -n ${NS}" "delete pods -n ${NS}" "create events.events.k8s.io -n ${NS}" \
    "update leases.coordination.k8s.io/evenkeel-operator -n ${OPERATOR_NS}" \
    "create serviceaccounts -n ${NS}" "delete serviceaccounts -n ${NS}" \
    "create roles.rbac.authorization.k8s.io -n ${NS}" "delete roles.rbac.authorization.k8s.io -n ${NS}" \
    "create rolebindings.rbac.authorization.k8s.io -n ${NS}" "delete rolebindings.rbac.authorization.k8s.io -n ${NS}" \
    "create events -n ${NS}" "patch kafkaclusters.kafka.evenkeel.dev --subresource=status -n ${NS}" \
    "get secrets -n ${NS}" "create secrets -n ${NS}" "patch secrets -n ${NS}" \
    "create networkpolicies.networking.k8s.io -n ${NS}" "delete networkpolicies.networking.k8s.io -n ${NS}"; do
    # shellcheck disable=SC2086 # split into kubectl's arguments
    [[ "$(can $a)" == yes ]] || die "the operator's ServiceAccount cannot: ${a}"
done
for a in "list secrets -n ${NS}" "delete secrets -n ${NS}" "delete statefulsets.apps -n ${NS}" "create pods -n ${NS}" \
    "delete kafkaclusters.kafka.evenkeel.dev -n ${NS}" \
    "escalate roles.rbac.authorization.k8s.io -n ${NS}" "bind roles.rbac.authorization.k8s.io -n ${NS}" \
    "create clusterroles.rbac.authorization.k8s.io" "create clusterrolebindings.rbac.authorization.k8s.io"; do
    # shellcheck disable=SC2086
    [[ "$(can $a)" == no ]] || die "the operator's ServiceAccount may, but should not: ${a}"
done
ok "least privilege as expected"
