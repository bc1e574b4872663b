#!/usr/bin/env bash
# Users of the secured e2e cluster on real nodes. Two KafkaUsers: alice (SCRAM-SHA-512) may create,
# write and describe topics named e2e-users*; carol (a certificate from the clients CA) may create
# and describe them, not write. alice's producer (ours, with Java's keys: the Secret's
# sasl.jaas.config and the cluster CA) writes on the SCRAM listener and every record is
# acknowledged; carol's logs in on the mutual-TLS listener with her certificate, finds alice's
# topic, and its writes are refused by the authorizer (TOPIC_AUTHORIZATION_FAILED on Produce). The operator gave the rebalancer sidecar and the proxy their ACLs (AclsChanged).
# Then the producer proxy gets basic auth (spec.proxy.authentication): alice's HTTP login writes as
# her, a wrong password gets 401, and basic auth is turned off again.
source "$(dirname "$0")/lib.sh"
topic="e2e-users-$(date +%s)"
SEP=$'\x1f'
bootstrap_on() { echo "${CLUSTER}-kafka-bootstrap.${NS}.svc:$1"; }

if [[ -z "$(kc_field '{.spec.authorization.type}')" ]]; then
    step "KafkaUsers: skipped, the cluster has no spec.authorization (E2E_CLUSTER_PATCH)"
    exit 0
fi

# A KafkaUser of the e2e cluster: kafka_user NAME AUTHENTICATION OPERATIONS...
kafka_user() {
    local name="$1" auth="$2" ops
    shift 2
    ops="$(printf '"%s",' "$@")"
    k apply -f - <<EOF >/dev/null
{"apiVersion": "kafka.evenkeel.dev/v1alpha1", "kind": "KafkaUser",
 "metadata": {"name": "${name}"},
 "spec": {"clusterRef": "${CLUSTER}", "authentication": {"type": "${auth}"},
   "authorization": {"type": "simple", "acls": [
     {"resource": {"type": "topic", "name": "e2e-users", "patternType": "prefix"},
      "operations": [${ops%,}]}]}}}
EOF
}

wait_user_ready() { # NAME
    local deadline=$((SECONDS + E2E_TIMEOUT)) status=""
    while ((SECONDS < deadline)); do
        status="$(k get kafkauser "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)"
        [[ "$status" == True ]] && return 0
        sleep 2
    done
    die "KafkaUser $1 not Ready after ${E2E_TIMEOUT}s: $(k get kafkauser "$1" -o jsonpath='{.status.conditions}')"
}

secret_entry() { # SECRET KEY
    k get secret "$1" -o "jsonpath={.data.${2//./\\.}}" | base64 -d
}

# Runs `evenkeel perf produce --client evenkeel` in a pod to its end, with the cluster CA mounted
# at /ca and PROPS as --producer-props (key=value items separated by $SEP: a PEM value spans
# lines); prints its log and succeeds when the pod did: user_produce POD PORT PROPS
user_produce() {
    local pod="$1" port="$2" props="$3" manifest phase
    manifest="$(POD="$pod" IMAGE="$E2E_IMAGE" NODE="${KIND_CLUSTER}-control-plane" CA="${CLUSTER}-cluster-ca-cert" \
        BOOTSTRAP="$(bootstrap_on "$port")" TOPIC="$topic" PROPS="$props" python3 -c '
import json, os
e = os.environ
args = ["perf", "produce", "--client", "evenkeel", "--bootstrap", e["BOOTSTRAP"], "--topic", e["TOPIC"],
        "--partitions", "3", "--num-records", "2000", "--record-size", "100", "--producer-props", "acks=all"]
args += e["PROPS"].split("\x1f")
print(json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": e["POD"]},
  "spec": {"restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": e["NODE"]},
    "containers": [{"name": "client", "image": e["IMAGE"], "imagePullPolicy": "IfNotPresent", "args": args,
      "volumeMounts": [{"name": "ca", "mountPath": "/ca", "readOnly": True}]}],
    "volumes": [{"name": "ca", "secret": {"secretName": e["CA"]}}]}}))')"
    k delete pod "$pod" --ignore-not-found --wait=true >/dev/null
    k apply -f - <<<"$manifest" >/dev/null
    phase="$(pod_wait_ended "$pod" 300)"
    k logs "$pod" 2>&1 | tail -n 5 || true
    k delete pod "$pod" --wait=false >/dev/null 2>&1 || true
    [[ "$phase" == Succeeded ]]
}

step "KafkaUsers alice (scram-sha-512: Create, Write, Describe on e2e-users*) and carol (tls: Create, Describe)"
kafka_user alice scram-sha-512 Create Write Describe
kafka_user carol tls Create Describe
wait_user_ready alice
wait_user_ready carol
ok "both Ready, Secrets alice and carol made"

step "alice writes ${topic} on the SCRAM listener (SASL_SSL, port 9095)"
jaas="$(secret_entry alice sasl.jaas.config)"
[[ -n "$jaas" ]] || die "Secret alice has no sasl.jaas.config"
props="$(printf "%s${SEP}" security.protocol=SASL_SSL sasl.mechanism=SCRAM-SHA-512 "sasl.jaas.config=${jaas}" \
    ssl.truststore.type=PEM ssl.truststore.location=/ca/ca.crt)"
out="$(user_produce e2e-alice 9095 "${props%"$SEP"}")" || die "alice's producer failed: ${out}"
printf '%s\n' "$out" | tail -2 | sed 's/^/    /'
grep -q "^2000 records sent" <<<"$out" || die "alice's producer did not send 2000 records: ${out}"
ok "2000 records acknowledged"

step "carol, with her certificate on the mutual-TLS listener (SSL, port 9094), may not write"
# Not idempotent: InitProducerId's cluster check would refuse her before any Produce.
props="$(printf "%s${SEP}" enable.idempotence=false security.protocol=SSL ssl.keystore.type=PEM \
    "ssl.keystore.certificate.chain=$(secret_entry carol user.crt)" "ssl.keystore.key=$(secret_entry carol user.key)" \
    ssl.truststore.type=PEM ssl.truststore.location=/ca/ca.crt)"
if out="$(user_produce e2e-carol 9094 "${props%"$SEP"}")"; then
    die "carol wrote to ${topic} without Write: ${out}"
fi
printf '%s\n' "$out" | tail -2 | sed 's/^/    /'
grep -q "records failed; the first: .*TOPIC_AUTHORIZATION_FAILED" <<<"$out" ||
    die "carol was refused, but not her writes by the authorizer: ${out}"
ok "her writes refused by the authorizer: she logged in and found the topic, her principal may not write"

step "the rebalancer sidecar's and the proxy's ACLs (the operator's AclsChanged events)"
events="$(k get events.events.k8s.io --field-selector "regarding.name=${CLUSTER},reason=AclsChanged" \
    -o jsonpath='{range .items[*]}{.note}{"\n"}{end}')"
printf '%s\n' "$events" | sed 's/^/    /'
for who in "CN=${CLUSTER}-rebalancer,O=evenkeel.dev" "CN=${CLUSTER}-proxy,O=evenkeel.dev"; do
    grep -q "User:${who}" <<<"$events" || die "no AclsChanged event for User:${who}"
done
ok "both got their ACLs"
step "the producer proxy with basic auth: each HTTP user writes as their KafkaUser"
k patch kafkacluster "$CLUSTER" --type merge -p '{"spec":{"proxy":{"authentication":{"type":"basic"}}}}' >/dev/null
wait_user_ready "${CLUSTER}-proxy"
wait_cluster_ready 3
proxy="$(kc_field '{.status.proxy.url}')"
proxy="${proxy#http://}"
proxy="${proxy%/}"
proxy_load() { # POD TOPIC RECORDS USER:PASSWORD
    client_run 300 "$1" perf proxy --proxy "$proxy" --bootstrap "$BOOTSTRAP" --topic "$2" --partitions 3 \
        --replication-factor 3 --num-records "$3" --clients 2 --api v2 --batch 50 --record-size 100 \
        --basic-auth "$4"
}
out="$(proxy_load e2e-proxy-alice "${topic}-proxy" 1000 "alice:$(secret_entry alice password)")" ||
    die "alice's records through the proxy failed: ${out}"
printf '%s\n' "$out" | tail -2 | sed 's/^/    /'
grep -q "read back: 1000 records, 0 missing" <<<"$out" || die "alice's records were not all read back: ${out}"
ok "1000 records written as alice (the proxy's pods rolled to log her in) and read back"
if out="$(proxy_load e2e-proxy-wrong "${topic}-wrong" 10 "alice:not-her-password")"; then
    die "the proxy let a wrong password through: ${out}"
fi
grep -q '"error_code":401' <<<"$out" || die "a wrong password was refused, but not with 401: ${out}"
ok "a wrong password: 401"
k patch kafkacluster "$CLUSTER" --type json -p '[{"op":"remove","path":"/spec/proxy/authentication"}]' >/dev/null
wait_cluster_ready 3
deadline=$((SECONDS + 60))
while k get kafkauser "${CLUSTER}-proxy" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "KafkaUser ${CLUSTER}-proxy outlived basic auth by 60 s"
    sleep 2
done
ok "basic auth off again: the proxy's KafkaUser removed"

k delete kafkauser alice carol --wait=true >/dev/null
ok "KafkaUsers deleted"
