#!/usr/bin/env bash
# Applies examples/kafkacluster.yaml, with what the e2e adds (E2E_CLUSTER_PATCH: brokers spread over
# the nodes' zones, the leadership rebalancer and the producer proxy, on the plain listener), and
# examples/kafkatopic.yaml, and waits for them. Checks one broker per node and zone, each with
# its zone as broker.rack.
#
# The cluster starts unsecured: 41-secure.sh secures it while it runs (E2E_SECURE_PATCH: a SCRAM
# listener over TLS and a mutual-TLS one beside the plain one, and the StandardAuthorizer). From
# then on its brokers replicate, and the operator, the rebalancer sidecar and the proxy reach
# them, on the internal listener with certificates of their own. The plain listener's clients
# (User:ANONYMOUS) are made super users so that the other steps' clients need no login;
# 42-users.sh logs in on the secured listeners as KafkaUsers.
source "$(dirname "$0")/lib.sh"
step "namespace ${NS}"
ensure_namespace "$NS"
ok "ready"

# The rebalancer acts within seconds in the e2e (55-rebalancer.sh waits for it).
patch='{"spec":{"rack":{"topologyKey":"topology.kubernetes.io/zone"},
  "rebalancer":{"enabled":true,"intervalSeconds":10,"muteSeconds":20},"proxy":{"replicas":1},
  "listeners":[{"name":"plain","port":9092}]}}'
patch="${E2E_CLUSTER_PATCH:-$patch}"
step "KafkaCluster ${CLUSTER} (examples/kafkacluster.yaml, 3 brokers, and ${patch//[[:space:]]/})"
kubectl patch --local -f "$ROOT/examples/kafkacluster.yaml" --type merge -p "$patch" -o yaml |
    k apply -f -
wait_cluster_ready 3
for obj in "statefulset/${CLUSTER}-kafka" "configmap/${CLUSTER}-kafka-config" \
    "service/${CLUSTER}-kafka-brokers" "service/${CLUSTER}-kafka-bootstrap" \
    "poddisruptionbudget/${CLUSTER}-kafka"; do
    k get "$obj" >/dev/null || die "the operator made no ${obj}"
done
ok "StatefulSet, ConfigMap, headless and bootstrap Services, PodDisruptionBudget exist"
[[ "$(k get statefulset "${CLUSTER}-kafka" -o jsonpath='{.spec.updateStrategy.type}')" == OnDelete ]] \
    || die "the StatefulSet's updateStrategy is not OnDelete"
k get kafkacluster "$CLUSTER" -o wide

step "one broker per node, each with its node's zone as broker.rack"
declare -A zones=()
for pod in $(broker_pod_names); do
    node="$(k get pod "$pod" -o jsonpath='{.spec.nodeName}')"
    zone="$(kubectl get node "$node" -o jsonpath='{.metadata.labels.topology\.kubernetes\.io/zone}')"
    rack="$(k logs "$pod" -c broker | sed -n 's/.*registered with the controller.* rack=\([^ ]*\).*/\1/p' | tail -1 || true)"
    info "${pod}: node ${node}, zone ${zone:-none}, broker.rack ${rack:-not logged}"
    [[ -n "$zone" && "$rack" == "$zone" ]] || die "${pod} registered with rack '${rack}', its node's zone is '${zone}'"
    zones[$zone]=1
done
((${#zones[@]} == 3)) || die "the 3 brokers are in ${#zones[@]} zones: ${!zones[*]}"
ok "3 brokers in 3 zones: ${!zones[*]}"

step "KafkaTopic ${TOPIC} (examples/kafkatopic.yaml: 6 partitions, replicas 3)"
k apply -f "$ROOT/examples/kafkatopic.yaml"
deadline=$((SECONDS + E2E_TIMEOUT))
status="" reason="" msg=""
while ((SECONDS < deadline)); do
    status="$(k get kafkatopic "$TOPIC" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')"
    reason="$(k get kafkatopic "$TOPIC" -o jsonpath='{.status.conditions[?(@.type=="Ready")].reason}')"
    msg="$(k get kafkatopic "$TOPIC" -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}')"
    [[ "$status" == True ]] && break
    sleep 3
done
# The three brokers form one cluster, so a replication factor of 3 is placed on all of them.
[[ "$status" == True ]] \
    || die "KafkaTopic ${TOPIC} not Ready after ${E2E_TIMEOUT}s: ${status:-no status} ${reason} ${msg}"
ok "Ready: ${msg}"
# The cluster's status counts the leaders at its next pass (a topic's change starts one, which
# may read the brokers before they publish the new partitions): wait for it.
leaders_total() {
    leaders="$(kc_field '{range .status.brokers[*]}{.leaders} {end}')"
    total=0
    for n in $leaders; do total=$((total + n)); done
    ((total >= 6))
}
deadline=$((SECONDS + E2E_TIMEOUT))
until leaders_total; do
    ((SECONDS < deadline)) ||
        die "status.brokers[*].leaders is '${leaders}' ${E2E_TIMEOUT}s on: the brokers do not share one image of the 6 partitions"
    sleep 2
done
ok "one cluster: leaders per broker ${leaders} (replication factor 3 over 3 brokers: every partition in all 3 zones)"
grep -q 'kafka.evenkeel.dev/topic' <<<"$(k get kafkatopic "$TOPIC" -o jsonpath='{.metadata.finalizers}')" \
    || die "KafkaTopic ${TOPIC} has no finalizer kafka.evenkeel.dev/topic"
ok "finalizer kafka.evenkeel.dev/topic in place"

step "admission: partitions may only grow (CEL rule)"
if out="$(k patch kafkatopic "$TOPIC" --type merge -p '{"spec":{"partitions":3}}' 2>&1)"; then
    die "the API server accepted a partition decrease"
fi
grep -q "partitions may only grow" <<<"$out" || die "unexpected refusal: ${out}"
ok "refused: $(grep -o 'partitions may only grow[^"]*' <<<"$out" | head -1)"
k get kafkatopic -o wide
