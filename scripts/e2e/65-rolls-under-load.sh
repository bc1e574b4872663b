#!/usr/bin/env bash
# Config rolls in a row (E2E_ROLLS, default 5) with an idempotent acks=all producer running in a
# client pod the whole time; each roll must finish without a manual step (60-config-roll.sh's
# checks: every broker replaced, at most one down at a time, Ready again). Then every record
# the producer was told was written is read back: prints acked / consumed / lost (lost must be 0).
source "$(dirname "$0")/lib.sh"
rolls="${E2E_ROLLS:-5}"
rate="${E2E_ROLL_RATE:-500}"
# Enough records to outlast the rolls (about 35 s each on kind here, 45 s allowed); the producer
# finishes afterwards.
records=$((rate * 45 * rolls))
topic="e2e-rolls-$(date +%s)"
bootstrap="${E2E_BOOTSTRAP:-${CLUSTER}-kafka-bootstrap.${NS}.svc:9092}"
pod=e2e-roll-producer

step "producer: ${records} records at ${rate}/s to ${topic} (idempotent, acks=all), in pod ${pod}"
k delete pod "$pod" --ignore-not-found --wait=true >/dev/null
k run "$pod" --image="$E2E_IMAGE" --image-pull-policy=IfNotPresent --restart=Never -- \
    perf produce --bootstrap "$bootstrap" --topic "$topic" --partitions 6 \
    --num-records "$records" --throughput "$rate" --record-size 200 \
    --producer-props acks=all enable.idempotence=true message.timeout.ms=300000 >/dev/null
k wait --for=jsonpath='{.status.phase}'=Running "pod/${pod}" --timeout=120s >/dev/null \
    || die "the producer pod did not start"
ok "running"

start=$SECONDS
for i in $(seq 1 "$rolls"); do
    step "roll ${i} of ${rolls}"
    t=$SECONDS
    "$ROOT/scripts/e2e/60-config-roll.sh" || die "roll ${i} did not finish on its own"
    phase="$(k get pod "$pod" -o jsonpath='{.status.phase}')"
    info "roll ${i}: $((SECONDS - t)) s; the producer is ${phase}"
    [[ "$phase" == Running ]] || info "note: the producer ended before roll ${i} did"
done
ok "${rolls} rolls in $((SECONDS - start)) s"

step "wait for the producer to finish"
deadline=$((SECONDS + records / rate + 600))
phase=""
while ((SECONDS < deadline)); do
    phase="$(k get pod "$pod" -o jsonpath='{.status.phase}')"
    [[ "$phase" == Succeeded || "$phase" == Failed ]] && break
    sleep 5
done
log="$(k logs "$pod" 2>&1 | tail -3)"
printf '%s\n' "$log" | sed 's/^/    /'
[[ "$phase" == Succeeded ]] || die "the producer ended ${phase:-nowhere}: some records were not acknowledged"
acked="$(sed -n 's/^\([0-9]*\) records sent,.*/\1/p' <<<"$log" | tail -1)"
[[ "$acked" == "$records" ]] || die "the producer reports ${acked:-no count} acknowledged of ${records}"
k delete pod "$pod" --wait=false >/dev/null

step "read them back"
k delete pod e2e-roll-consumer --ignore-not-found --wait=true >/dev/null
out="$(timeout 600 kubectl -n "$NS" run e2e-roll-consumer --image="$E2E_IMAGE" \
    --image-pull-policy=IfNotPresent --restart=Never --rm -i --quiet -- \
    perf consume --bootstrap "$bootstrap" --topic "$topic" --messages "$acked" 2>&1)" \
    || die "consumer failed: ${out}"
consumed="$(printf '%s\n' "$out" | tail -1 | awk -F', *' '{print $3}')"
lost=$((acked - ${consumed:-0}))
info "acked ${acked}, consumed ${consumed:-0}, lost ${lost}"
((lost == 0)) || die "${lost} acknowledged records were not read back"
ok "nothing acknowledged was lost over ${rolls} rolls"
