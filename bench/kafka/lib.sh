# Shared by bench/kafka/broker and bench/kafka/tool (sourced, not run).
# Sets KAFKA_HOME_DIR and KAFKA_CP, installing Kafka first when needed.
kafka_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kafka_setup() {
  KAFKA_HOME_DIR="$("$kafka_here/install")" || exit 1
  KAFKA_CP="$KAFKA_HOME_DIR/libs/*"
  command -v java >/dev/null 2>&1 || { echo "bench/kafka: java not found" >&2; exit 1; }
}
# JVM flags of Kafka's kafka-run-class.sh, with a small heap for a 2-core machine.
kafka_jvm_flags() {
  local heap="$1"
  echo "$heap -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -XX:ActiveProcessorCount=2 -Djava.awt.headless=true"
}
