#!/usr/bin/env bash
# Scales the KafkaCluster 3 -> 4 with rebalanceOnScale: the fourth broker (broker-only, following
# the quorum of pods 0-2) joins without rolling the others and replicas move onto it. Then 4 -> 3:
# without rebalanceOnScale the scale-down is refused (ScaleDownBlocked: broker 3 holds replicas,
# the StatefulSet keeps 4 pods); with it, broker 3 is drained first and only then removed.
source "$(dirname "$0")/lib.sh"
sts_replicas() { k get statefulset "${CLUSTER}-kafka" -o jsonpath='{.spec.replicas}'; }
ready_reason() { kc_field '{.status.conditions[?(@.type=="Ready")].reason}'; }
new="${CLUSTER}-kafka-3"

step "scale ${CLUSTER}: 3 -> 4 brokers, rebalanceOnScale"
hash="$(kc_field '{.status.configHash}')"
k patch kafkacluster "$CLUSTER" --type merge -p '{"spec":{"replicas":4,"rebalanceOnScale":true}}'
wait_cluster_ready 4
[[ "$(sts_replicas)" == 4 ]] || die "StatefulSet ${CLUSTER}-kafka does not have 4 replicas"
ids="$(kc_field '{range .status.brokers[*]}{.id}:{.state} {end}')"
[[ "$ids" == "0:Ready 1:Ready 2:Ready 3:Ready " ]] || die "status.brokers is '${ids}', expected brokers 0-3 Ready"
[[ "$(kc_field '{.status.configHash}')" == "$hash" ]] || die "the config hash changed: the brokers would roll"
ok "4 brokers ready, the config hash unchanged: ${ids}"
deadline=$((SECONDS + E2E_TIMEOUT))
held=""
# Replicas land on broker 3 as the moves start; Reconciling (Rebalancing) ends when they are done.
until [[ -n "$held" && "$held" != 0 && "$(kc_field '{.status.conditions[?(@.type=="Reconciling")].status}')" != True ]]; do
    ((SECONDS < deadline)) || die "broker 3 holds ${held:-no} replicas ${E2E_TIMEOUT}s after it joined"
    held="$(broker_metric "$new" kafka_server_replicamanager_partitioncount)"
    sleep 3
done
ok "replicas moved onto broker 3: it holds ${held}"
wait_all_in_isr "after the moves"
k get kafkacluster "$CLUSTER" -o wide

step "scale 4 -> 3 without rebalanceOnScale: refused while broker 3 holds replicas"
k patch kafkacluster "$CLUSTER" --type merge -p '{"spec":{"replicas":3,"rebalanceOnScale":false}}'
deadline=$((SECONDS + 120))
until [[ "$(ready_reason)" == ScaleDownBlocked ]]; do
    ((SECONDS < deadline)) || die "no ScaleDownBlocked 120 s after the scale-down (Ready reason: $(ready_reason))"
    sleep 2
done
ok "ScaleDownBlocked: $(kc_field '{.status.conditions[?(@.type=="Ready")].message}')"
[[ "$(sts_replicas)" == 4 ]] || die "the StatefulSet shrank to $(sts_replicas) while broker 3 held replicas"
k get pod "$new" >/dev/null || die "${new} is gone"
ok "the StatefulSet keeps 4 pods"

step "rebalanceOnScale: broker 3 is drained, then removed"
k patch kafkacluster "$CLUSTER" --type merge -p '{"spec":{"rebalanceOnScale":true}}'
wait_cluster_ready 3
[[ "$(sts_replicas)" == 3 ]] || die "StatefulSet ${CLUSTER}-kafka has $(sts_replicas) replicas, expected 3"
k wait --for=delete "pod/${new}" --timeout=120s >/dev/null || die "${new} is still there"
wait_all_in_isr "after the drain"
ok "drained and removed; brokers $(kc_field '{range .status.brokers[*]}{.id}:{.state} {end}')"
k get events --field-selector involvedObject.name="$CLUSTER" --sort-by=.lastTimestamp 2>/dev/null |
    grep -E 'Draining|Rebalancing|ScaleDown' | tail -n 6 | sed 's/^/    /' || true
