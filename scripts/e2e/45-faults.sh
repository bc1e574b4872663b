#!/usr/bin/env bash
# Faults with an idempotent acks=all producer running throughout (in a pod on the control-plane
# node), then every acknowledged record read back: prints acked / consumed / lost (lost must be 0).
#   1. the broker pod leading the most partitions is force-deleted (--grace-period=0 --force):
#      the others take over its leaders; the pod returns on its own PVC and rejoins the ISR;
#   2. a kind worker's container that runs a broker is stopped (`docker stop`, as a machine
#      that loses power) until Kubernetes marks the node NotReady (about a minute), held down
#      E2E_NODE_DOWN more seconds (0), and started again: the node returns, its broker restarts
#      and rejoins the ISR.
# E2E_DOCKER: the command that stops and starts kind's node containers (docker).
source "$(dirname "$0")/lib.sh"
docker_="${E2E_DOCKER:-docker}"
rate="${E2E_FAULT_RATE:-400}"
# At most (the producer is stopped once the faults are over, 150-200 s on kind here).
records=$((rate * ${E2E_FAULT_SECONDS:-480}))
topic="e2e-faults-$(date +%s)"
pod=e2e-fault-producer

wait_all_in_isr "before the faults"
producer_start "$pod" "$topic" "$records" "$rate"

# The leaders the brokers other than $1 report, in all.
leaders_elsewhere() {
    local p n total=0
    for p in $(broker_pod_names); do
        [[ "$p" == "$1" ]] && continue
        n="$(broker_metric "$p" kafka_server_replicamanager_leadercount)"
        total=$((total + ${n:-0}))
    done
    echo "$total"
}

# Waits until the brokers' leader counts add up to the partitions in the metadata image, none of
# them leaderless (a move in flight counts a partition twice or not at all while the brokers
# apply it, and the sidecar may be moving leaders back to a broker that returned); prints that
# partition count. A broker that kept leading a partition another leads never settles.
settled_partitions() {
    local deadline=$((SECONDS + E2E_TIMEOUT)) first partitions offline leaders
    while :; do
        first="$(broker_pod_names | head -n1)"
        partitions="$(broker_metric "$first" kafka_controller_kafkacontroller_globalpartitioncount)"
        offline="$(broker_metric "$first" kafka_controller_kafkacontroller_offlinepartitionscount)"
        leaders="$(leaders_elsewhere none)"
        if [[ -n "$partitions" && "$offline" == 0 ]] && ((leaders == partitions)); then
            echo "$partitions"
            return
        fi
        ((SECONDS < deadline)) ||
            die "the brokers lead ${leaders} partitions in all, the image holds ${partitions:-?} (${offline:-?} leaderless), ${E2E_TIMEOUT}s on"
        sleep 1
    done
}

# Waits until the brokers other than pod $1 lead all $2 partitions; $3 says what happened to it.
wait_leaders_moved() { # POD PARTITIONS WHAT
    local deadline=$((SECONDS + E2E_TIMEOUT)) t=$SECONDS
    until (($(leaders_elsewhere "$1") >= $2)); do
        ((SECONDS < deadline)) || die "the other brokers lead $(leaders_elsewhere "$1") of $2 partitions ${E2E_TIMEOUT}s after $3"
        sleep 1
    done
    ok "the other brokers lead all $2 partitions $((SECONDS - t)) s after $3"
}

step "force-delete the broker pod that leads the most partitions"
wait_all_in_isr "with the producer running"
producer_running "$pod" "the force-delete"
partitions="$(settled_partitions)"
busiest="$(busiest_leader)"
[[ -n "$busiest" ]] || die "no broker answered with its leader count"
victim="${CLUSTER}-kafka-${busiest}"
uid="$(k get pod "$victim" -o jsonpath='{.metadata.uid}')"
volume="$(k get pvc "data-${victim}" -o jsonpath='{.spec.volumeName}')"
info "${victim} leads $(broker_metric "$victim" kafka_server_replicamanager_leadercount) of ${partitions} partitions; its PVC data-${victim} is on ${volume}"
t=$SECONDS
k delete pod "$victim" --grace-period=0 --force >/dev/null 2>&1
wait_leaders_moved "$victim" "$partitions" "${victim} went"
k wait --for=condition=Ready "pod/${victim}" --timeout="${E2E_TIMEOUT}s" >/dev/null ||
    die "${victim} did not come back"
[[ "$(k get pod "$victim" -o jsonpath='{.metadata.uid}')" != "$uid" ]] || die "${victim} is the same pod"
[[ "$(k get pvc "data-${victim}" -o jsonpath='{.spec.volumeName}')" == "$volume" ]] ||
    die "${victim} came back on another volume"
ok "${victim} is back, a new pod on the same volume, $((SECONDS - t)) s after the delete"
wait_all_in_isr "after the force-delete"
restarts="$(k get pod "$victim" -o jsonpath='{.status.containerStatuses[?(@.name=="broker")].restartCount}')"
info "${victim}'s broker container restarted ${restarts:-0} times on its way back"

step "stop a kind node that runs a broker (docker stop), then start it again"
victim="" node=""
for p in $(broker_pod_names); do
    n="$(k get pod "$p" -o jsonpath='{.spec.nodeName}')"
    if [[ "$n" != "${KIND_CLUSTER}-control-plane" ]]; then
        victim="$p" node="$n"
        break
    fi
done
[[ -n "$node" ]] || die "no broker runs on a worker node"
info "${victim} runs on ${node}"
producer_running "$pod" "the node stop"
partitions="$(settled_partitions)"
t=$SECONDS
# Whatever fails from here, the node is started again (a later step or run needs it).
trap '"$docker_" start "$node" >/dev/null 2>&1 || true' EXIT
"$docker_" stop "$node" >/dev/null
wait_leaders_moved "$victim" "$partitions" "${node} stopped"
deadline=$((SECONDS + E2E_TIMEOUT))
until [[ "$(kubectl get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' || true)" != True ]]; do
    ((SECONDS < deadline)) || die "${node} still Ready ${E2E_TIMEOUT}s after it stopped"
    sleep 2
done
ok "${node} NotReady $((SECONDS - t)) s after it stopped"
sleep "${E2E_NODE_DOWN:-0}"
"$docker_" start "$node" >/dev/null
trap - EXIT
t=$SECONDS
kubectl wait --for=condition=Ready "node/${node}" --timeout="${E2E_TIMEOUT}s" >/dev/null ||
    die "${node} did not return"
ok "${node} Ready again $((SECONDS - t)) s after it started"
k wait --for=condition=Ready "pod/${victim}" --timeout="${E2E_TIMEOUT}s" >/dev/null ||
    die "${victim} did not come back after ${node} returned"
ok "${victim} ready again $((SECONDS - t)) s after ${node} started"
wait_all_in_isr "after the node returned"

producer_stop "$pod"
read_back "$topic" "$ACKED" "a force-deleted leader and a stopped node"
