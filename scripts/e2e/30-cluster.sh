#!/usr/bin/env bash
# Applies examples/kafkacluster.yaml and examples/kafkatopic.yaml and waits for them.
source "$(dirname "$0")/lib.sh"
step "namespace ${NS}"
kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
ok "ready"

step "KafkaCluster ${CLUSTER} (examples/kafkacluster.yaml, 3 brokers)"
k apply -f "$ROOT/examples/kafkacluster.yaml"
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
leaders="$(kc_field '{range .status.brokers[*]}{.leaders} {end}')"
total=0; for n in $leaders; do total=$((total + n)); done
(( total >= 6 )) || die "status.brokers[*].leaders is '${leaders}': the brokers do not share one image of the 6 partitions"
ok "one cluster: leaders per broker ${leaders}"
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
