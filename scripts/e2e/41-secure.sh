#!/usr/bin/env bash
# Secures the running e2e cluster (E2E_SECURE_PATCH: a mutual-TLS and a SCRAM listener over TLS
# beside the plain one, and the StandardAuthorizer with User:ANONYMOUS, the plain listener's
# clients, as a super user) with an idempotent acks=all producer writing on the plain listener
# the whole time. The operator takes three steps, each a rolling restart that starts only once
# the last has ended: the internal listener added (status.securityStage internal), the brokers
# replicating on it (inter-broker), then the spec's listeners and authorizer (secured). Checks the
# steps come in that order with at most one broker down at a time, and that the PLAINTEXT
# controller listener is fenced by the operator's NetworkPolicy, then reads every record the
# producer was told was written back: acked / consumed / lost (lost must be 0).
source "$(dirname "$0")/lib.sh"
patch='{"spec":{"listeners":[{"name":"plain","port":9092},
    {"name":"mtls","port":9094,"tls":true,"authentication":{"type":"tls"}},
    {"name":"scram","port":9095,"tls":true,"authentication":{"type":"scram-sha-512"}}],
  "authorization":{"type":"simple","superUsers":["ANONYMOUS"]}}}'
patch="${E2E_SECURE_PATCH-$patch}"
if [[ -z "$patch" || "$(kc_field '{.status.securityStage}')" != unsecured ]]; then
    step "securing the running cluster: skipped (E2E_SECURE_PATCH is empty, or the cluster is secured)"
    exit 0
fi
rate=250
# Three rolls (41-77 s in all on kind here, 20-55 s for one config roll in 65-rolls-under-load),
# and up to 10 s between the steps.
records=$((rate * (3 * 40 + 20)))
topic="e2e-secure-$(date +%s)"
pod=e2e-secure-producer
producer_start "$pod" "$topic" "$records" "$rate"

step "secure ${CLUSTER} while it runs: ${patch//[[:space:]]/}"
k patch kafkacluster "$CLUSTER" --type merge -p "$patch" >/dev/null
start=$SECONDS
stages="" last="" max_down=0 deadline=$((SECONDS + E2E_TIMEOUT))
while ((SECONDS < deadline)); do
    stage="$(kc_field '{.status.securityStage}')"
    if [[ "$stage" != "${stages##* }" ]]; then
        stages="${stages:+$stages }${stage}"
        info "[$(date +%T)] securityStage ${stage} ($((SECONDS - start)) s)"
    fi
    msg="$(kc_field '{.status.conditions[?(@.type=="Reconciling")].message}')"
    [[ "$msg" != "$last" ]] && info "[$(date +%T)] ${msg:-reconciled}" && last="$msg"
    # A pod deleted and not made again yet is down too.
    down="$(broker_pods | awk -F'|' 'NF { n++; if ($4 != "True") d++ } END { print d + (3 - n) }')"
    ((down > max_down)) && max_down=$down
    # Secured, Ready, and every pod on the StatefulSet's last template: the last roll is done.
    sts="$(k get statefulset "${CLUSTER}-kafka" -o jsonpath='{.metadata.generation} {.status.observedGeneration} {.status.updatedReplicas}')"
    [[ "$stage" == secured ]] && [[ "$(kc_field '{.status.conditions[?(@.type=="Ready")].status}')" == True ]] &&
        [[ "$(kc_field '{.status.observedGeneration}')" == "$(kc_field '{.metadata.generation}')" ]] &&
        read -r gen seen updated <<<"$sts" && [[ "$gen" == "$seen" && "$updated" == 3 ]] && break
    sleep 2
done
[[ "$stage" == secured ]] || die "the cluster is at securityStage ${stage:-none} after ${E2E_TIMEOUT} s (went ${stages})"
[[ "$stages" == "unsecured internal inter-broker secured" || "$stages" == "internal inter-broker secured" ]] ||
    die "the steps went ${stages}, not internal, inter-broker, secured"
((max_down <= 1)) || die "${max_down} brokers were down at once"
wait_cluster_ready 3
ok "secured in $((SECONDS - start)) s: ${stages}; at most ${max_down} broker down at once"
producer_running "$pod" "the end of the securing"
props="$(k get configmap "${CLUSTER}-kafka-config" -o jsonpath='{.data.server\.properties}')"
grep -q '^inter.broker.listener.name=REPLICATION$' <<<"$props" || die "the brokers do not replicate on the internal listener"
grep -q '^authorizer.class.name=' <<<"$props" || die "no authorizer in server.properties"
ok "the brokers replicate on the internal listener (mutual TLS) and run the StandardAuthorizer"

# The controller listener stays PLAINTEXT: the operator's NetworkPolicy lets only broker pods
# reach it. Where the network plugin enforces NetworkPolicies, a connection (TCP and
# ApiVersions) from a client pod to broker 0's 9093 must fail and one to its 9092 must not.
step "the PLAINTEXT controller listener is fenced (NetworkPolicy ${CLUSTER}-kafka-controller)"
k get networkpolicy "${CLUSTER}-kafka-controller" >/dev/null || die "the operator made no NetworkPolicy"
broker0="${CLUSTER}-kafka-0.${CLUSTER}-kafka-brokers.${NS}.svc"
reach() { client_run 60 "e2e-reach-$1" perf auth --bootstrap "${broker0}:$1" \
    --command-config /dev/null --concurrency 1 --seconds 1; }
if [[ "${E2E_NETWORK_POLICIES:-enforced}" != enforced ]]; then
    ok "the NetworkPolicy is there; connections not tried: this cluster's network plugin does not enforce NetworkPolicies (E2E_NETWORK_POLICIES=${E2E_NETWORK_POLICIES})"
else
    if out="$(reach 9093 2>&1)"; then
        die "a client pod reached the controller listener: $(tail -2 <<<"$out")"
    fi
    why="$(grep -o 'logging in to.*' <<<"$out" | head -1 || true)"
    out="$(reach 9092 2>&1)" || die "a client pod cannot reach the plain listener: $(tail -2 <<<"$out")"
    ok "9093 closed to a client pod (${why:-no connection}), 9092 open"
fi
k get events --field-selector "involvedObject.name=${CLUSTER},reason=Securing" 2>/dev/null | sed 's/^/    /' | tail -4

producer_finish "$pod" "$records"
read_back "$topic" "$ACKED" "the cluster secured in three rolls while the producer wrote"
