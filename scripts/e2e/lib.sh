# shellcheck shell=bash
# Shared by the e2e steps (sourced, not run). Each step can also be run by hand, in order:
#   scripts/e2e/00-kind-up.sh … scripts/e2e/60-config-roll.sh, scripts/e2e/99-kind-down.sh
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
BROKER_SELECTOR="app.kubernetes.io/name=evenkeel,app.kubernetes.io/component=broker,kafka.evenkeel.dev/cluster=${CLUSTER}"

# The steps, in order: those that make the cluster and load the image, then those that test.
# shellcheck disable=SC2034 # used by run-all.sh and local
E2E_CLUSTER_STEPS=(00-kind-up.sh 10-build-image.sh)
# shellcheck disable=SC2034
E2E_TEST_STEPS=(20-install.sh 30-cluster.sh 40-produce-consume.sh 50-scale.sh 60-config-roll.sh 65-rolls-under-load.sh)

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
