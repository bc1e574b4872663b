# shellcheck shell=bash
# Shared by the e2e steps (sourced, not run). Each step can also be run by hand, in order:
#   scripts/e2e/00-kind-up.sh … scripts/e2e/70-bad-input.sh, scripts/e2e/99-kind-down.sh
# Two drivers run them: run-all.sh (Docker and kind as found, e.g. in the GitHub workflow) and
# local (a machine without a registry: builds Docker's and kind's pieces itself).
# Settings (environment):
#   KIND_CLUSTER   kind cluster name                      (evenkeel-e2e)
#   KIND_CONFIG    kind cluster config                     (scripts/e2e/kind.yaml)
#   KIND_NODE_IMAGE  kind node image                       (kind's default)
#   E2E_IMAGE      image built and loaded into kind        (evenkeel:e2e)
#   OPERATOR_NS    namespace of the operator's release     (evenkeel-system)
#   E2E_NAMESPACE  namespace of the KafkaCluster and topic (kafka)
#   E2E_TIMEOUT    seconds to wait for each state          (600)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
KIND_CLUSTER="${KIND_CLUSTER:-evenkeel-e2e}"
E2E_IMAGE="${E2E_IMAGE:-evenkeel:e2e}"
OPERATOR_NS="${OPERATOR_NS:-evenkeel-system}"
NS="${E2E_NAMESPACE:-kafka}"
E2E_TIMEOUT="${E2E_TIMEOUT:-600}"
KIND_VERSION="${KIND_VERSION:-v0.30.0}"
KIND_CONFIG="${KIND_CONFIG:-$ROOT/scripts/e2e/kind.yaml}"
KIND_NODE_IMAGE="${KIND_NODE_IMAGE:-}"
# The KafkaCluster and KafkaTopic of examples/, and the chart's release name.
CLUSTER=my-cluster
export TOPIC=orders RELEASE=evenkeel
BOOTSTRAP="${E2E_BOOTSTRAP:-${CLUSTER}-kafka-bootstrap.${NS}.svc:9092}"
BROKER_SELECTOR="app.kubernetes.io/name=evenkeel,app.kubernetes.io/component=broker,kafka.evenkeel.dev/cluster=${CLUSTER}"

# The steps, in order: those that make the cluster and load the image, then those that test.
# shellcheck disable=SC2034 # used by run-all.sh and local
E2E_CLUSTER_STEPS=(00-kind-up.sh 10-build-image.sh)
# shellcheck disable=SC2034
E2E_TEST_STEPS=(20-install.sh 30-cluster.sh 40-produce-consume.sh 41-secure.sh 42-users.sh 45-faults.sh 50-scale.sh 55-rebalancer.sh
    65-rolls-under-load.sh 70-bad-input.sh)

step() { printf '\n==> %s\n' "$*"; }
info() { printf '    %s\n' "$*"; }
ok() { printf '    ok: %s\n' "$*"; }
die() {
    printf 'FAIL: %s\n' "$*" >&2
    exit 1
}
need() { command -v "$1" >/dev/null || die "$1 is not installed ($2)"; }

# helm from PATH, else scripts/helm (built once from the Go module proxy).
helm_() {
    if command -v helm >/dev/null; then helm "$@"; else "$ROOT/scripts/helm" "$@"; fi
}

# kind from PATH, else built once with go install and cached like helm.
kind_() {
    if command -v kind >/dev/null; then
        kind "$@"
        return
    fi
    local bin="${HOME}/.cache/evenkeel/bin/kind-${KIND_VERSION}"
    if [[ ! -x "$bin" ]]; then
        need go "to build kind ${KIND_VERSION}; or install kind yourself"
        info "building kind ${KIND_VERSION} with go install (once)"
        mkdir -p "$(dirname "$bin")"
        local tmp
        tmp="$(mktemp -d)"
        GOBIN="$tmp" CGO_ENABLED=0 go install "sigs.k8s.io/kind@${KIND_VERSION}"
        mv "$tmp/kind" "$bin"
        rm -rf "$tmp"
    fi
    "$bin" "$@"
}

k() { kubectl -n "$NS" "$@"; }

# One field of the KafkaCluster, by JSONPath ('' when absent).
kc_field() { k get kafkacluster "$CLUSTER" -o jsonpath="$1" 2>/dev/null || true; }

# Waits until the KafkaCluster has seen its latest spec (status.observedGeneration), reports
# Ready=True, and has $1 ready brokers. Prints progress when the reason changes.
wait_cluster_ready() {
    local want="$1" deadline=$((SECONDS + E2E_TIMEOUT)) last=""
    while ((SECONDS < deadline)); do
        local gen obs ready reason msg brokers
        gen="$(kc_field '{.metadata.generation}')"
        obs="$(kc_field '{.status.observedGeneration}')"
        ready="$(kc_field '{.status.conditions[?(@.type=="Ready")].status}')"
        reason="$(kc_field '{.status.conditions[?(@.type=="Ready")].reason}')"
        msg="$(kc_field '{.status.conditions[?(@.type=="Ready")].message}')"
        brokers="$(kc_field '{.status.readyBrokers}')"
        if [[ "$reason: $msg" != "$last" ]]; then
            info "[$(date +%T)] Ready=${ready:-?} ${reason:-} ${msg:-} (readyBrokers ${brokers:-0})"
            last="$reason: $msg"
        fi
        if [[ -n "$gen" && "$obs" == "$gen" && "$ready" == "True" && "$brokers" == "$want" ]]; then
            return 0
        fi
        sleep 3
    done
    die "KafkaCluster ${CLUSTER} not Ready with ${want} brokers after ${E2E_TIMEOUT}s (last: ${last})"
}

# "name|uid|deleting|ready" for each broker pod.
broker_pods() {
    k get pods -l "$BROKER_SELECTOR" -o jsonpath='{range .items[*]}{.metadata.name}|{.metadata.uid}|{.metadata.deletionTimestamp}|{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}'
}

# A broker pod's metric (a sample without labels) from its /metrics, through the API server's
# pod proxy; empty when the pod cannot be reached.
broker_metric() { # POD METRIC
    kubectl get --raw "/api/v1/namespaces/${NS}/pods/$1:9404/proxy/metrics" 2>/dev/null |
        awk -v m="$2" '$1 == m { print $2; exit }' || true
}

# The broker pods by name, in order.
broker_pod_names() { broker_pods | cut -d'|' -f1 | grep . | sort; }

# Waits until every broker pod answers /metrics with 0 under-replicated partitions, that is every
# replica of every partition it leads is in the ISR. $1: what is waited for (for the messages).
wait_all_in_isr() {
    local what="$1" deadline=$((SECONDS + E2E_TIMEOUT)) pod pods n summary urp
    while ((SECONDS < deadline)); do
        summary="" n=0
        pods="$(broker_pod_names)"
        for pod in $pods; do
            urp="$(broker_metric "$pod" kafka_server_replicamanager_underreplicatedpartitions)"
            summary+="${pod##*-}:${urp:-?} "
            [[ "$urp" == 0 ]] && n=$((n + 1))
        done
        if ((n > 0 && n == $(wc -w <<<"$pods"))); then
            ok "${what}: no under-replicated partition on any broker"
            return 0
        fi
        sleep 2
    done
    die "${what}: under-replicated partitions by broker after ${E2E_TIMEOUT}s: ${summary}"
}

# The broker id leading the most partitions, by the brokers' own leader counts.
busiest_leader() {
    local pod best="" most=-1 n
    for pod in $(broker_pod_names); do
        n="$(broker_metric "$pod" kafka_server_replicamanager_leadercount)"
        if [[ -n "$n" ]] && ((${n%.*} > most)); then
            most=${n%.*}
            best=${pod##*-}
        fi
    done
    echo "$best"
}

# A client pod of the e2e image, on the control-plane node (so stopping a worker never stops the
# client), created in the background: client_create POD ARGS...
client_create() {
    local pod="$1"
    shift
    k delete pod "$pod" --ignore-not-found --wait=true >/dev/null
    k run "$pod" --image="$E2E_IMAGE" --image-pull-policy=IfNotPresent --restart=Never \
        --overrides="{\"spec\":{\"nodeSelector\":{\"kubernetes.io/hostname\":\"${KIND_CLUSTER}-control-plane\"}}}" \
        -- "$@" >/dev/null
}

# client_create, then waits until the pod runs: client_start POD ARGS...
client_start() {
    client_create "$@"
    k wait --for=jsonpath='{.status.phase}'=Running "pod/$1" --timeout=120s >/dev/null ||
        die "the client pod $1 did not start"
}

# Waits up to $2 seconds for pod $1 to end; prints its last phase (Succeeded, Failed, or the
# phase it still had).
pod_wait_ended() { # POD SECONDS
    local phase="" deadline=$((SECONDS + $2))
    while ((SECONDS < deadline)); do
        phase="$(k get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null || true)"
        [[ "$phase" == Succeeded || "$phase" == Failed ]] && break
        sleep 2
    done
    echo "$phase"
}

# Runs a client pod to its end and prints its log (stdout and stderr); succeeds when the pod
# did. The log is read once the pod has ended, not attached to (`kubectl run -i` can return
# before it has shown any output of a pod that ends quickly): client_run SECONDS POD ARGS...
client_run() {
    local limit="$1" pod="$2" phase
    shift
    client_create "$@"
    phase="$(pod_wait_ended "$pod" "$limit")"
    k logs "$pod" 2>&1 || true
    k delete pod "$pod" --wait=false >/dev/null 2>&1 || true
    [[ "$phase" == Succeeded || "$phase" == Failed ]] || echo "(cut off after ${limit} s, the pod still ${phase:-unknown})"
    [[ "$phase" == Succeeded ]]
}

# An idempotent acks=all producer in pod $1: at most RECORDS at RATE/s to TOPIC (6 partitions,
# RF 3); producer_stop ends it once the faults it runs under are over.
producer_start() { # POD TOPIC RECORDS RATE
    step "producer: $3 records at $4/s to $2 (idempotent, acks=all), in pod $1"
    client_start "$1" perf produce --bootstrap "$BOOTSTRAP" --topic "$2" --partitions 6 \
        --num-records "$3" --throughput "$4" --record-size 200 \
        --producer-props acks=all enable.idempotence=true message.timeout.ms=300000
    ok "running"
}

# Fails unless the producer of pod $1 still runs: a fault must happen under load. $2: the fault.
producer_running() { # POD WHAT
    local phase
    phase="$(k get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null || true)"
    [[ "$phase" == Running ]] ||
        die "the producer is ${phase:-gone} before $2: raise its record count so the fault runs under load"
}

# Stops the producer of pod $1 once its faults are over: the pod is deleted, so the producer
# gets SIGTERM, stops sending, waits for the answers to what it sent and prints its figures,
# followed here as it writes them. Sets ACKED to the records it was told were written; fails
# if any record was not.
producer_stop() { # POD
    local pod="$1" log follower deadline=$((SECONDS + 30))
    step "stop the producer (SIGTERM: it sends no more, waits for its answers, reports)"
    log="$(mktemp)"
    timeout $((E2E_TIMEOUT + 300)) kubectl -n "$NS" logs -f "$pod" >"$log" 2>&1 &
    follower=$!
    # It prints a progress line every 5 s: once one is here, the stream is attached.
    until grep -q "records sent" "$log"; do
        if ((SECONDS >= deadline)); then
            kill "$follower" 2>/dev/null || true
            cat "$log"
            rm -f "$log"
            die "no progress line from the producer in pod ${pod}"
        fi
        sleep 1
    done
    k delete pod "$pod" --grace-period=300 --wait=false >/dev/null
    wait "$follower" || true
    ACKED="$(sed -n 's/^\([0-9]*\) records sent,.* ms avg latency.*/\1/p' "$log" | tail -1)"
    if [[ -z "$ACKED" ]] || grep -q "records failed" "$log"; then
        sed 's/^/    /' "$log"
        rm -f "$log"
        die "the producer stopped without a count, or with records that were not acknowledged"
    fi
    tail -3 "$log" | sed 's/^/    /'
    rm -f "$log"
    ok "${ACKED} records acknowledged"
}

# Reads TOPIC from the beginning and prints acked / consumed / lost; fails unless exactly the
# acked records are there (the reader asks for one more, and stops 10 s after the last).
read_back() { # TOPIC ACKED WHAT
    local out consumed lost
    step "read them back"
    out="$(client_run 600 e2e-reader perf consume --bootstrap "$BOOTSTRAP" --topic "$1" \
        --messages "$(($2 + 1))")" || die "consumer failed: ${out}"
    consumed="$(printf '%s\n' "$out" | tail -1 | awk -F', *' '{print $3}')"
    lost=$(($2 - ${consumed:-0}))
    info "acked $2, consumed ${consumed:-0}, lost $((lost > 0 ? lost : 0))"
    ((lost <= 0)) || die "${lost} acknowledged records were not read back"
    ((lost == 0)) || die "$((-lost)) more records than were acknowledged: duplicates"
    ok "nothing acknowledged was lost, nothing duplicated: $3"
}

# Creates namespace $1, after waiting for an earlier one of that name to finish going.
ensure_namespace() { # NAME
    if [[ "$(kubectl get namespace "$1" -o jsonpath='{.status.phase}' 2>/dev/null || true)" == Terminating ]]; then
        info "namespace $1 is being deleted; waiting"
        kubectl wait --for=delete "namespace/$1" --timeout="${E2E_TIMEOUT}s" >/dev/null
    fi
    kubectl create namespace "$1" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
}

# Runs the given step scripts of scripts/e2e in order, with the time each took. At the first that
# fails: prints diagnostics (dump.sh), names the step and returns 1.
run_steps() {
    local dir="$ROOT/scripts/e2e" s t start=$SECONDS
    for s in "$@"; do
        t=$SECONDS
        if ! "$dir/$s"; then
            echo "e2e: ${s} failed after $((SECONDS - start)) s" >&2
            "$dir/dump.sh" || true
            echo "e2e: ${s} failed after $((SECONDS - start)) s" >&2
            return 1
        fi
        echo "    (${s}: $((SECONDS - t)) s)"
    done
    echo "e2e: ${#@} steps passed in $((SECONDS - start)) s"
}
