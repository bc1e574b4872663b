#!/usr/bin/env bash
# Secures the running e2e cluster (E2E_SECURE_PATCH: a mutual-TLS and a SCRAM listener over TLS
# beside the plain one, and the StandardAuthorizer with User:ANONYMOUS, the plain listener's
# clients, as a super user) with an idempotent acks=all producer writing on the plain listener
# the whole time. The operator takes five steps, each a rolling restart that starts only once
# the last has ended: the internal listener and a spare mutual-TLS controller listener added
# (status.securityStage internal), the brokers replicating on the one and dialling the other
# (inter-broker), the spec's listeners and authorizer with the controller port turned mutual
# TLS (secured), the controller port dialled again, the spare removed. Checks the stages come in
# that order with at most one broker down at a time, that the PLAINTEXT controller listener was
# fenced by the operator's NetworkPolicy while it was there and ends mutual TLS (a plain
# connection to it fails), then reads every record the producer was told was written back:
# acked / consumed / lost (lost must be 0).
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
# At most: five rolls (125-138 s in all on kind here, 20-55 s for one config roll in
# 65-rolls-under-load) and up to 10 s between the steps; stopped once they are done.
records=$((rate * (5 * 60 + 60)))
topic="e2e-secure-$(date +%s)"
pod=e2e-secure-producer
producer_start "$pod" "$topic" "$records" "$rate"

step "secure ${CLUSTER} while it runs: ${patch//[[:space:]]/}"
k patch kafkacluster "$CLUSTER" --type merge -p "$patch" >/dev/null
start=$SECONDS
stages="" last="" max_down=0 fenced="" deadline=$((SECONDS + E2E_TIMEOUT))
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
    [[ -z "$fenced" ]] && k get networkpolicy "${CLUSTER}-kafka-controller" >/dev/null 2>&1 && fenced="at ${stage}"
    # Secured, the controller listener moved (mutual TLS, no spare), Ready, and every pod on the
    # StatefulSet's last template: the last roll is done.
    sts="$(k get statefulset "${CLUSTER}-kafka" -o jsonpath='{.metadata.generation} {.status.observedGeneration} {.status.updatedReplicas} {.metadata.annotations.kafka\.evenkeel\.dev/controller-tls} {.metadata.annotations.kafka\.evenkeel\.dev/controller-spare}')"
    [[ "$stage" == secured ]] && [[ "$(kc_field '{.status.conditions[?(@.type=="Ready")].status}')" == True ]] &&
        [[ "$(kc_field '{.status.observedGeneration}')" == "$(kc_field '{.metadata.generation}')" ]] &&
        read -r gen seen updated tls spare <<<"$sts" && [[ "$gen" == "$seen" && "$updated" == 3 ]] &&
        [[ "$tls" == true && -z "$spare" ]] && break
    sleep 2
done
[[ "$stage" == secured && "$tls" == true && -z "$spare" ]] ||
    die "the cluster is at securityStage ${stage:-none}, controller listener TLS ${tls:-?}, spare ${spare:-none} after ${E2E_TIMEOUT} s (went ${stages})"
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

# The controller listener ends mutual TLS, as a cluster created secured has it: the fence is
# gone, and a plain connection (TCP and ApiVersions) from a client pod to broker 0's 9093 fails
# while one to its 9092 does not.
step "the controller listener is mutual TLS, no longer PLAINTEXT behind a NetworkPolicy"
[[ -n "$fenced" ]] || die "the PLAINTEXT controller listener was never fenced by a NetworkPolicy"
! k get networkpolicy "${CLUSTER}-kafka-controller" >/dev/null 2>&1 ||
    die "the NetworkPolicy ${CLUSTER}-kafka-controller is left behind"
grep -q '^listener.security.protocol.map=.*CONTROLLER:SSL$' <<<"$props" || die "the controller listener is not SSL: $(grep '^listener.security' <<<"$props")"
grep -q '^controller.listener.names=CONTROLLER$' <<<"$props" || die "a spare controller listener is left: $(grep '^controller.listener' <<<"$props")"
broker0="${CLUSTER}-kafka-0.${CLUSTER}-kafka-brokers.${NS}.svc"
reach() { client_run 60 "e2e-reach-$1" perf auth --bootstrap "${broker0}:$1" \
    --command-config /dev/null --concurrency 1 --seconds 1; }
if out="$(reach 9093 2>&1)"; then
    die "a plain client reached the controller listener: $(tail -2 <<<"$out")"
fi
out="$(reach 9092 2>&1)" || die "a client pod cannot reach the plain listener: $(tail -2 <<<"$out")"
ok "fenced while PLAINTEXT (NetworkPolicy seen ${fenced}), then moved: 9093 refuses a plain client, 9092 serves it"
k get events --field-selector "involvedObject.name=${CLUSTER},reason=Securing" 2>/dev/null | sed 's/^/    /' | tail -4

producer_stop "$pod"
read_back "$topic" "$ACKED" "the cluster secured in five rolls while the producer wrote"
