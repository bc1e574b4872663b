#!/usr/bin/env bash
# Config rolls in a row (E2E_ROLLS, default 5) with an idempotent acks=all producer running in a
# client pod the whole time; each roll must finish without a manual step (60-config-roll.sh's
# checks: every broker replaced, at most one down at a time, Ready again). During the last roll
# the operator pod holding the Lease is deleted: another replica takes the Lease and finishes
# the roll. On a secured cluster the first roll is a replacement of the cluster CA's key instead
# (E2E_ROLL_CAUSE=cluster-ca-key: three rolls, the brokers replicating over mutual TLS with that
# CA throughout), and with 3 rolls or more the second is a renewal of the cluster CA
# (E2E_ROLL_CAUSE=cluster-ca). Then every record the producer was told was written is read
# back: prints acked / consumed / lost (lost must be 0).
source "$(dirname "$0")/lib.sh"
rolls="${E2E_ROLLS:-5}"
rate="${E2E_ROLL_RATE:-500}"
# Enough records to outlast the rolls (20-55 s each on kind here, 60 s allowed, and 20 s for the
# steps between them); the producer is stopped once they are done. With 45 s a roll, two rolls
# of 54 and 50 s outlasted the producer, and the check below refused a fault without load.
secured=0
k get secret "${CLUSTER}-cluster-ca-cert" >/dev/null 2>&1 && secured=1
# A key replacement is three rolls.
records=$((rate * (60 * (rolls + 2 * secured) + 20)))
topic="e2e-rolls-$(date +%s)"
pod=e2e-roll-producer

producer_start "$pod" "$topic" "$records" "$rate"
start=$SECONDS
for i in $(seq 1 "$rolls"); do
    cause=config
    ((i == 1 && secured && rolls > 1)) && cause=cluster-ca-key
    ((i == 2 && secured && rolls >= 3)) && cause=cluster-ca
    step "roll ${i} of ${rolls} (${cause})$( ((i == rolls)) && echo ', the operator holding the Lease deleted mid-roll')"
    t=$SECONDS
    failover=0
    ((i == rolls)) && failover=1
    producer_running "$pod" "roll ${i}"
    E2E_ROLL_CAUSE=$cause E2E_OPERATOR_FAILOVER=$failover "$ROOT/scripts/e2e/60-config-roll.sh" ||
        die "roll ${i} did not finish on its own"
    producer_running "$pod" "the end of roll ${i}"
    info "roll ${i}: $((SECONDS - t)) s, the producer still running"
done
ok "${rolls} rolls in $((SECONDS - start)) s"

producer_stop "$pod"
read_back "$topic" "$ACKED" "${rolls} rolls$( ((secured)) && echo " (the first a CA key replacement, itself three rolls)"), one with an operator failover"
