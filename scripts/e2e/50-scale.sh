#!/usr/bin/env bash
# Scales the KafkaCluster from 3 to 4 brokers and waits until the fourth (a broker-only node that
# follows the quorum of pods 0-2) is ready and listed in the status. The existing brokers do not
# roll: the voters and the config hash stay.
source "$(dirname "$0")/lib.sh"
step "scale ${CLUSTER}: 3 -> 4 brokers"
k patch kafkacluster "$CLUSTER" --type merge -p '{"spec":{"replicas":4}}'
wait_cluster_ready 4
[[ "$(k get statefulset "${CLUSTER}-kafka" -o jsonpath='{.spec.replicas}')" == 4 ]] \
    || die "StatefulSet ${CLUSTER}-kafka does not have 4 replicas"
ids="$(kc_field '{range .status.brokers[*]}{.id}:{.state} {end}')"
[[ "$ids" == "0:Ready 1:Ready 2:Ready 3:Ready " ]] || die "status.brokers is '${ids}', expected brokers 0-3 Ready"
ok "4 brokers ready: ${ids}"
k get kafkacluster "$CLUSTER" -o wide
