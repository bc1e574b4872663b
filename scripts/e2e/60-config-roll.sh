#!/usr/bin/env bash
# Changes spec.config and watches the safe rolling restart: every broker pod is replaced (new UID),
# and at no sample is more than one broker missing or not ready. Samples every second.
# E2E_ROLL_CAUSE=cluster-ca: the roll comes from renewing the cluster CA instead (its Secret
# annotated kafka.evenkeel.dev/force-renew): a new CA certificate with the same key and the next
# generation, which the pods then carry, and which the listeners' status shows.
# E2E_ROLL_CAUSE=cluster-ca-key: the cluster CA's key is replaced (its Secret annotated
# kafka.evenkeel.dev/force-replace): three rolls the operator starts one after the other (both
# certificates trusted; the new key signs; only the new certificate trusted). Each roll must
# end with every broker made from the new template (it carries the CA generation) and ready,
# with at most one broker not ready at any sample.
# E2E_OPERATOR_FAILOVER=1: once the first broker is replaced, the operator pod holding the Lease
# is deleted; another replica (the standby, or the one the Deployment starts) must take the
# Lease and finish the roll.
source "$(dirname "$0")/lib.sh"
want="$(kc_field '{.spec.replicas}')"
declare -A before=()
while IFS='|' read -r name uid _ _; do
    [[ -n "$name" ]] && before[$name]="$uid"
done < <(broker_pods)
((${#before[@]} == want)) || die "expected ${want} broker pods before the roll, found ${#before[@]}"

props() { k get configmap "${CLUSTER}-kafka-config" -o jsonpath='{.data.server\.properties}'; }
ca_secret="${CLUSTER}-cluster-ca-cert"
ca_cert() { k get secret "$ca_secret" -o jsonpath='{.data.ca\.crt}' | base64 -d; }
ca_generation() { k get secret "$ca_secret" -o jsonpath='{.metadata.annotations.kafka\.evenkeel\.dev/ca-cert-generation}'; }
cause="${E2E_ROLL_CAUSE:-config}"

change_config() {
    # A value the brokers do not have yet (rolls run several times in a row).
    local current value
    current="$(props | sed -n 's/^log.retention.hours=//p')"
    value="$((RANDOM % 100 + 100))"
    [[ "$value" != "$current" ]] || value=$((value + 1))
    step "change spec.config: log.retention.hours=${value}"
    old_hash="$(kc_field '{.status.configHash}')"
    k patch kafkacluster "$CLUSTER" --type merge -p "{\"spec\":{\"config\":{\"log.retention.hours\":\"${value}\"}}}"
    for _ in $(seq 1 20); do
        grep -qx "log.retention.hours=${value}" <<<"$(props)" && break
        sleep 3
    done
    grep -qx "log.retention.hours=${value}" <<<"$(props)" ||
        die "ConfigMap ${CLUSTER}-kafka-config does not carry log.retention.hours=${value}"
    ok "ConfigMap updated"
}

renew_cluster_ca() {
    step "renew the cluster CA (annotate ${ca_secret} kafka.evenkeel.dev/force-renew=true)"
    old_cert="$(ca_cert)"
    [[ -n "$old_cert" ]] || die "no ${ca_secret}: the cluster is not secured"
    old_generation="$(ca_generation)"
    k annotate secret "$ca_secret" kafka.evenkeel.dev/force-renew=true >/dev/null
    local deadline=$((SECONDS + E2E_TIMEOUT))
    until [[ "$(ca_generation)" == "$((${old_generation:-0} + 1))" ]]; do
        ((SECONDS < deadline)) || die "${ca_secret} not renewed ${E2E_TIMEOUT}s after the annotation"
        sleep 2
    done
    new_cert="$(ca_cert)"
    [[ "$new_cert" != "$old_cert" ]] || die "${ca_secret}'s certificate did not change"
    [[ -z "$(k get secret "$ca_secret" -o jsonpath='{.metadata.annotations.kafka\.evenkeel\.dev/force-renew}')" ]] ||
        die "the force-renew annotation is still on ${ca_secret}"
    ok "a new CA certificate, generation ${old_generation:-0} -> $(ca_generation)"
}

ca_step() { k get secret "$ca_secret" -o jsonpath='{.metadata.annotations.kafka\.evenkeel\.dev/ca-key-replacement}'; }
ca_certs() { ca_cert | grep -c 'BEGIN CERTIFICATE'; }

# Waits until the cluster CA's Secret records generation $1 and replacement step $2 (empty: the
# replacement is over).
wait_ca_at() { # GENERATION STEP
    local deadline=$((SECONDS + E2E_TIMEOUT))
    until [[ "$(ca_generation)" == "$1" && "$(ca_step)" == "$2" ]]; do
        ((SECONDS < deadline)) ||
            die "${ca_secret} is at generation '$(ca_generation)', step '$(ca_step)'; expected $1, '$2'"
        sleep 2
    done
}

# Watches the roll to cluster CA generation $1: done once every broker pod carries it and is
# ready (a pod carries the generation of the template it was made from); fails if two brokers
# are not ready at once.
watch_generation() { # GENERATION
    local deadline=$((SECONDS + E2E_TIMEOUT)) worst=0 ready at down name deleting cond carried
    local fields='{range .items[*]}{.metadata.name}|{.metadata.deletionTimestamp}|{.status.conditions[?(@.type=="Ready")].status}|{.metadata.annotations.kafka\.evenkeel\.dev/cluster-ca-cert-generation}{"\n"}{end}'
    while ((SECONDS < deadline)); do
        ready=0 at=0
        while IFS='|' read -r name deleting cond carried; do
            [[ -z "$name" || -n "$deleting" || "$cond" != True ]] && continue
            ready=$((ready + 1))
            [[ "$carried" == "$1" ]] && at=$((at + 1))
        done < <(k get pods -l "$BROKER_SELECTOR" -o jsonpath="$fields")
        down=$((want - ready))
        ((down > worst)) && worst=$down
        ((down > 1)) && die "${down} brokers not ready at once during the roll to generation $1"
        if ((at == want)); then
            ok "every broker runs CA generation $1; at most ${worst} not ready at once"
            return 0
        fi
        sleep 1
    done
    die "the brokers did not all reach CA generation $1 in ${E2E_TIMEOUT}s"
}

replace_cluster_ca_key() {
    step "replace the cluster CA's key (annotate ${ca_secret} kafka.evenkeel.dev/force-replace=true)"
    old_cert="$(ca_cert)"
    [[ -n "$old_cert" ]] || die "no ${ca_secret}: the cluster is not secured"
    local g="$(ca_generation)"
    g="${g:-0}"
    k annotate secret "$ca_secret" kafka.evenkeel.dev/force-replace=true >/dev/null
    wait_ca_at $((g + 1)) trust-new-key
    (($(ca_certs) == 2)) || die "${ca_secret} holds $(ca_certs) certificates in step 1, not 2"
    ok "step 1: the new certificate is trusted beside the old one (generation $((g + 1)))"
    watch_generation $((g + 1))
    wait_ca_at $((g + 2)) sign-with-new-key
    ok "step 2: the new key signs (generation $((g + 2)))"
    watch_generation $((g + 2))
    wait_ca_at $((g + 3)) ""
    new_cert="$(ca_cert)"
    (($(ca_certs) == 1)) || die "${ca_secret} holds $(ca_certs) certificates after the replacement"
    [[ "$new_cert" != "$old_cert" ]] || die "${ca_secret}'s certificate did not change"
    ok "step 3: only the new certificate is trusted (generation $((g + 3)))"
    watch_generation $((g + 3))
    wait_cluster_ready "$want"
    listed="$(kc_field '{.status.listeners[?(@.name=="mtls")].certificates[*]}')"
    [[ "$listed" == "$new_cert" ]] || die "status.listeners[mtls] does not name the new CA certificate alone"
    ok "the listeners' status names the new certificate alone"
    info "events:"
    k get events --field-selector reason=CaKeyReplaced 2>/dev/null | tail -n 3 | sed 's/^/    /' || true
}

case "$cause" in
config) change_config ;;
cluster-ca) renew_cluster_ca ;;
cluster-ca-key)
    replace_cluster_ca_key
    exit 0
    ;;
*) die "E2E_ROLL_CAUSE=${cause}: config, cluster-ca or cluster-ca-key" ;;
esac

step "watch the roll (at most one broker down at a time)"
failover="${E2E_OPERATOR_FAILOVER:-0}" deleted_holder=""
lease_holder() { kubectl -n "$OPERATOR_NS" get lease evenkeel-operator -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true; }
deadline=$((SECONDS + E2E_TIMEOUT))
worst=0 order=() last_line=""
declare -A replaced=()
while ((SECONDS < deadline)); do
    ready=0
    sample="$(broker_pods)"
    while IFS='|' read -r name uid deleting cond; do
        [[ -z "$name" ]] && continue
        [[ -z "$deleting" && "$cond" == True ]] && ready=$((ready + 1))
        if [[ -n "${before[$name]:-}" && "$uid" != "${before[$name]}" && -z "${replaced[$name]:-}" ]]; then
            replaced[$name]=1
            order+=("$name")
            info "[$(date +%T)] ${name} replaced (${#replaced[@]}/${want})"
        fi
    done <<<"$sample"
    if [[ "$failover" == 1 && -z "$deleted_holder" ]] && ((${#replaced[@]} >= 1 && ${#replaced[@]} < want)); then
        deleted_holder="$(lease_holder)"
        [[ -n "$deleted_holder" ]] || die "no operator holds the Lease mid-roll"
        kubectl -n "$OPERATOR_NS" delete pod "$deleted_holder" --wait=false >/dev/null ||
            die "could not delete the operator pod ${deleted_holder}"
        info "[$(date +%T)] deleted the operator pod holding the Lease: ${deleted_holder}"
    fi
    down=$((want - ready))
    ((down > worst)) && worst=$down
    ((down > 1)) && die "${down} brokers not ready at once during the roll: $(tr '\n' ' ' <<<"$sample")"
    line="$(kc_field '{.status.conditions[?(@.type=="Reconciling")].reason}'): $(kc_field '{.status.conditions[?(@.type=="Reconciling")].message}')"
    [[ "$line" != "$last_line" ]] && info "[$(date +%T)] Reconciling ${line}" && last_line="$line"
    if ((${#replaced[@]} == want)) && ((down == 0)); then
        ready_cond="$(kc_field '{.status.conditions[?(@.type=="Ready")].status}')"
        [[ "$ready_cond" == True ]] && break
    fi
    sleep 1
done
((${#replaced[@]} == want)) || die "only ${#replaced[@]} of ${want} brokers were restarted in ${E2E_TIMEOUT}s"
ok "every broker restarted, in order: ${order[*]}; at most ${worst} not ready at once"
wait_cluster_ready "$want"
if [[ -n "$deleted_holder" ]]; then
    holder="$(lease_holder)"
    [[ -n "$holder" && "$holder" != "$deleted_holder" ]] ||
        die "the Lease is held by '${holder}' after ${deleted_holder} was deleted"
    ok "the Lease moved from ${deleted_holder} to ${holder}, which finished the roll"
fi
if [[ "$cause" == config ]]; then
    new_hash="$(kc_field '{.status.configHash}')"
    [[ "$new_hash" != "$old_hash" ]] || die "status.configHash did not change (${old_hash})"
    ok "configHash ${old_hash} -> ${new_hash}"
else
    generation="$(ca_generation)"
    for pod in $(broker_pods | cut -d'|' -f1 | grep .); do
        carried="$(k get pod "$pod" -o jsonpath='{.metadata.annotations.kafka\.evenkeel\.dev/cluster-ca-cert-generation}')"
        [[ "$carried" == "$generation" ]] || die "${pod} carries cluster CA generation '${carried}', not ${generation}"
    done
    listed="$(kc_field '{.status.listeners[?(@.name=="mtls")].certificates[0]}')"
    [[ "$listed" == "$new_cert" ]] || die "status.listeners[mtls] does not name the new CA certificate"
    ok "every broker pod carries CA generation ${generation}; the listeners' status names the new certificate"
fi
info "events:"
k get events --field-selector reason=RollingRestart --sort-by=.lastTimestamp 2>/dev/null | tail -n 8 | sed 's/^/    /' || true
