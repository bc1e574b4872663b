#!/usr/bin/env bash
# Changes spec.config and watches the safe rolling restart: every broker pod is replaced (new UID),
# and at no sample is more than one broker missing or not ready. Samples every second.
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
# A value the brokers do not have yet (rolls run several times in a row).
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
grep -qx "log.retention.hours=${value}" <<<"$(props)" \
    || die "ConfigMap ${CLUSTER}-kafka-config does not carry log.retention.hours=${value}"
ok "ConfigMap updated"

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
new_hash="$(kc_field '{.status.configHash}')"
[[ "$new_hash" != "$old_hash" ]] || die "status.configHash did not change (${old_hash})"
ok "configHash ${old_hash} -> ${new_hash}"
info "events:"
k get events --field-selector reason=RollingRestart --sort-by=.lastTimestamp 2>/dev/null | tail -n 8 | sed 's/^/    /' || true
