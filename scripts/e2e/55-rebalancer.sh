#!/usr/bin/env bash
# The leadership rebalancer sidecar (spec.rebalancer) on seed 003's shape: `evenkeel perf skew
# --external-rebalancer` makes a topic whose preferred leader is broker 0 for 90 % of its
# partitions and puts wide fetchers and a producer on it; the sidecar beside the active
# controller must even leadership out (within the threshold's band) on its own, report an Event
# LeadershipRebalanced and status.rebalance on the KafkaCluster.
source "$(dirname "$0")/lib.sh"
[[ "$(kc_field '{.spec.rebalancer.enabled}')" == true ]] || die "spec.rebalancer.enabled is not true"
metrics=""
for pod in $(broker_pod_names); do
    metrics+="${metrics:+,}${pod##*-}=http://${pod}.${CLUSTER}-kafka-brokers.${NS}.svc:9404/metrics"
done
before="$(kc_field '{.status.rebalance.lastActionTime}')"

step "seed 003's shape: broker 0 first in 90 % of 60 partitions, wide fetchers and a producer"
out="$(client_run 900 e2e-skew perf skew --external-rebalancer --bootstrap "$BOOTSTRAP" \
    --metrics "$metrics" --topic "e2e-skew-$(date +%s)" --partitions 60 --share 0.9 --fetchers 2 \
    --rate 200 --seconds 10 --record-size 200)" || die "perf skew failed: ${out}"
printf '%s\n' "$out" | grep -E 'balanced after|^skewed|^balanced|^skew to|^ +[0-9]+ ' | sed 's/^/    /'
ok "the sidecar evened leadership out"

step "the sidecar's report on the KafkaCluster"
deadline=$((SECONDS + 60))
until [[ "$(kc_field '{.status.rebalance.lastActionTime}')" != "$before" ]]; do
    ((SECONDS < deadline)) || die "status.rebalance was not updated (lastActionTime ${before:-none})"
    sleep 2
done
action="$(kc_field '{.status.rebalance.lastAction}')"
moves="$(kc_field '{.status.rebalance.moves}')"
[[ "$action" == LeadershipRebalanced && "${moves:-0}" -gt 0 ]] ||
    die "status.rebalance: lastAction ${action:-none}, moves ${moves:-none}"
ok "status.rebalance: ${action}, ${moves} moves, skew $(kc_field '{.status.rebalance.skewBefore}') -> $(kc_field '{.status.rebalance.skewAfter}')"
events="$(k get events.events.k8s.io --field-selector "regarding.name=${CLUSTER},reason=LeadershipRebalanced" \
    -o jsonpath='{range .items[*]}{.reportingController}: {.note}{"\n"}{end}')"
[[ -n "$events" ]] || die "no Event LeadershipRebalanced on KafkaCluster ${CLUSTER}"
printf '%s\n' "$events" | tail -n 2 | sed 's/^/    /'
ok "Event LeadershipRebalanced"
