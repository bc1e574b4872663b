#!/usr/bin/env bash
# Produces and consumes 100,000 records (E2E_RECORDS) from a client pod running the same image
# (`evenkeel perf produce|consume`, librdkafka inside), through the bootstrap Service: the
# brokers are one cluster, so any of them can answer Metadata. E2E_BOOTSTRAP overrides it.
# Then the producer proxy's Service answers REST Proxy v2 POSTs (`evenkeel perf proxy`), and
# every record it acknowledged is read back.
source "$(dirname "$0")/lib.sh"
bootstrap="$BOOTSTRAP"
records="${E2E_RECORDS:-100000}"
topic="e2e-$(date +%s)"

step "produce ${records} records to ${topic} via ${bootstrap} (acks=all)"
out="$(client_run 300 e2e-producer perf produce --bootstrap "$bootstrap" --topic "$topic" --partitions 3 \
    --num-records "$records" --record-size 200 --producer-props acks=all enable.idempotence=true \
    message.timeout.ms=120000)" || die "producer failed: ${out}"
printf '%s\n' "$out" | tail -2 | sed 's/^/    /'
grep -q "^${records} records sent" <<<"$out" || die "producer did not send ${records} records"
ok "${records} records sent"

step "consume them back"
out="$(client_run 300 e2e-consumer perf consume --bootstrap "$bootstrap" --topic "$topic" --messages "$records")" \
    || die "consumer failed: ${out}"
printf '%s\n' "$out" | tail -2 | sed 's/^/    /'
got="$(printf '%s\n' "$out" | tail -1 | awk -F', *' '{print $3}')"
[[ "$got" == "$records" ]] || die "consumed ${got:-nothing}, expected ${records}"
ok "${got} records consumed"

proxy="$(kc_field '{.status.proxy.url}')"
[[ -n "$proxy" || -z "$(kc_field '{.spec.proxy.replicas}')" ]] ||
    die "spec.proxy is set but status.proxy.url is empty"
if [[ -n "$proxy" ]]; then
    step "the producer proxy (${proxy}): REST Proxy v2 POSTs, read back"
    proxy="${proxy#http://}"
    out="$(client_run 300 e2e-proxy perf proxy --proxy "${proxy%/}" --bootstrap "$bootstrap" \
        --topic "e2e-proxy-$(date +%s)" --partitions 3 --replication-factor 3 --num-records 2000 \
        --clients 2 --api v2 --batch 50 --record-size 100)" || die "proxy load failed: ${out}"
    printf '%s\n' "$out" | tail -4 | sed 's/^/    /'
    ok "the proxy Service answered, and what it acknowledged was read back"
fi
