#!/usr/bin/env bash
# Bad input on the real cluster: each is refused or reported clearly, and changes nothing else.
#   1. spec.config sets a key the operator owns (node.id): Ready=False InvalidSpec, the ConfigMap,
#      StatefulSet and pods unchanged;
#   2. spec.image names an image that does not exist: the roll stops at the first pod, the cluster
#      says why (the pull error), the other brokers keep serving (a produce with acks=all and
#      min.insync.replicas 2 succeeds); the old image back, the cluster heals;
#   3. a KafkaCluster with 1 broker and a KafkaTopic of replication factor 3: the topic is refused
#      with its reason, no topic is made.
# (A partition decrease is refused by admission in 30-cluster.sh.)
source "$(dirname "$0")/lib.sh"
cm_version() { k get configmap "${CLUSTER}-kafka-config" -o jsonpath='{.metadata.resourceVersion}'; }
sts_generation() { k get statefulset "${CLUSTER}-kafka" -o jsonpath='{.metadata.generation}'; }
pod_uids() { broker_pods | cut -d'|' -f1,2 | sort | tr '\n' ' '; }
ready() { kc_field '{.status.conditions[?(@.type=="Ready")].status}/{.status.conditions[?(@.type=="Ready")].reason}'; }
wait_for() { # WHAT SECONDS COMMAND...: until COMMAND succeeds
    local what="$1" limit="$2" deadline=$((SECONDS + $2))
    shift 2
    until "$@"; do
        ((SECONDS < deadline)) || die "${what}: not within ${limit} s"
        sleep 2
    done
}

# Whatever fails, the cluster gets its spec back, so a rerun or a later step starts from it.
trap 'k patch kafkacluster "$CLUSTER" --type merge -p "{\"spec\":{\"image\":null,\"config\":{\"node.id\":null}}}" >/dev/null 2>&1 || true' EXIT

step "spec.config sets node.id (the operator owns it)"
wait_cluster_ready 3
cm="$(cm_version)" gen="$(sts_generation)" uids="$(pod_uids)"
if out="$(k patch kafkacluster "$CLUSTER" --type merge -p '{"spec":{"config":{"node.id":"7"}}}' 2>&1)"; then
    invalid() { [[ "$(ready)" == False/InvalidSpec ]]; }
    wait_for "Ready=False InvalidSpec" 60 invalid
    ok "Ready=False InvalidSpec: $(kc_field '{.status.conditions[?(@.type=="Ready")].message}')"
    sleep 10 # the next passes of the operator must not apply anything either
    [[ "$(cm_version)" == "$cm" && "$(sts_generation)" == "$gen" && "$(pod_uids)" == "$uids" ]] ||
        die "the ConfigMap, the StatefulSet or the pods changed under an invalid spec"
    ok "the ConfigMap, the StatefulSet and the pods are unchanged"
else
    ok "refused by admission: ${out}"
fi
k patch kafkacluster "$CLUSTER" --type merge -p '{"spec":{"config":{"node.id":null}}}' >/dev/null
wait_cluster_ready 3
[[ "$(pod_uids)" == "$uids" ]] || die "the brokers restarted after the key was removed"
ok "the key removed: Ready again, nothing restarted"

step "spec.image names an image that does not exist"
k patch kafkacluster "$CLUSTER" --type merge -p '{"spec":{"image":"evenkeel:does-not-exist"}}' >/dev/null
says_pull_error() { grep -qE 'ImagePullBackOff|ErrImagePull|ErrImageNeverPull' <<<"$(kc_field '{.status.conditions[*].message}')"; }
wait_for "the cluster reports the pull error" "$E2E_TIMEOUT" says_pull_error
ok "$(kc_field '{.status.conditions[?(@.type=="Reconciling")].reason}'): $(kc_field '{.status.conditions[?(@.type=="Reconciling")].message}')"
serving="$(broker_pods | awk -F'|' '$4 == "True"' | wc -l)"
((serving == 2)) || die "${serving} brokers serve while one pod cannot pull its image (expected 2)"
out="$(client_run 300 e2e-bad-image-producer perf produce --bootstrap "$BOOTSTRAP" --topic "$TOPIC" \
    --num-records 1000 --record-size 100 --producer-props acks=all message.timeout.ms=60000)" || die "the 2 brokers left did not serve: ${out}"
grep -q '^1000 records sent' <<<"$out" || die "the producer did not send 1000 records: ${out}"
ok "2 of 3 brokers keep serving: 1000 records acked to ${TOPIC}"
k patch kafkacluster "$CLUSTER" --type merge -p '{"spec":{"image":null}}' >/dev/null
wait_cluster_ready 3
wait_all_in_isr "the old image back"

step "a KafkaCluster of 1 broker and a KafkaTopic of replication factor 3"
small="${NS}-small"
ensure_namespace "$small"
kubectl -n "$small" apply -f - <<YAML
apiVersion: kafka.evenkeel.dev/v1alpha1
kind: KafkaCluster
metadata: {name: small}
spec:
  replicas: 1
  storage: {size: 1Gi}
  config: {offsets.topic.replication.factor: "1", min.insync.replicas: "1"}
---
apiVersion: kafka.evenkeel.dev/v1alpha1
kind: KafkaTopic
metadata:
  name: wide
spec: {clusterRef: small, partitions: 3, replicas: 3}
YAML
topic_ready() { kubectl -n "$small" get kafkatopic wide -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}/{.status.conditions[?(@.type=="Ready")].message}' 2>/dev/null; }
refused() { [[ "$(topic_ready)" == False/* && "$(topic_ready)" == *eplication* ]]; }
wait_for "KafkaTopic wide refused for its replication factor" "$E2E_TIMEOUT" refused
ok "KafkaTopic wide: Ready=$(topic_ready)"
topic_id="$(kubectl -n "$small" get kafkatopic wide -o jsonpath='{.status.topicId}' || true)"
[[ -z "$topic_id" ]] || die "KafkaTopic wide has a topic id (${topic_id}): a topic was made"
ok "no topic was made"
kubectl delete namespace "$small" --wait=false >/dev/null
