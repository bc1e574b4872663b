# Shared by bench/kafka/broker, bench/kafka/cluster and bench/kafka/tool (sourced, not run).
# Sets KAFKA_HOME_DIR and KAFKA_CP, installing Kafka first when needed.
# The functions that report an error call `fail`, which the sourcing script defines.
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

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
alive() { [[ -f "$1/pid" ]] && kill -0 "$(cat "$1/pid")" 2>/dev/null; }

free_port() {
  python3 - <<'PY' 2>/dev/null && return 0
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()
PY
  local p
  for _ in $(seq 200); do
    p=$(( 20000 + RANDOM % 20000 ))
    port_open "$p" || { echo "$p"; return 0; }
  done
  return 1
}

# A Kafka cluster id: 16 random bytes, URL-safe base64 without padding, not starting with '-'.
cluster_id() {
  local id
  while :; do
    id="$(head -c16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
    [[ "$id" != -* ]] && { echo "$id"; return; }
  done
}

# kafka_format <server.properties> <cluster id> <log file> [StorageTool format args...]
# Formats the log directory of that config (kafka-storage format); output to the log file.
kafka_format() {
  local props="$1" cid="$2" log="$3"; shift 3
  # shellcheck disable=SC2046
  java $(kafka_jvm_flags -Xmx256m) -Dlog4j2.configurationFile="$kafka_here/log4j2-tools.properties" \
    -cp "$KAFKA_CP" kafka.tools.StorageTool format "$@" -t "$cid" -c "$props" >"$log" 2>&1
}

# kafka_launch <dir> <heap opts>: starts kafka.Kafka on <dir>/server.properties in the
# background (log4j to <dir>/server.log, stdout/stderr to <dir>/stdout.log), writes <dir>/pid
# and sets KAFKA_PID. KAFKA_OPTS adds JVM flags.
kafka_launch() {
  local dir="$1" heap="$2"
  # shellcheck disable=SC2046,SC2206
  local flags=( $(kafka_jvm_flags "$heap") ${KAFKA_OPTS:-} )
  rm -f "$dir/server.log"
  nohup java "${flags[@]}" -Dkafka.logs.dir="$dir" \
    -Dlog4j2.configurationFile="$kafka_here/log4j2-broker.properties" \
    -cp "$KAFKA_CP" kafka.Kafka "$dir/server.properties" >"$dir/stdout.log" 2>&1 </dev/null &
  KAFKA_PID=$!
  echo "$KAFKA_PID" >"$dir/pid"
}

# kafka_node_state <dir> <pid> <port>: 0 ready ("Kafka Server started" logged and the client
# port accepts connections), 1 still starting, 2 the process has exited.
kafka_node_state() {
  local dir="$1" pid="$2" port="$3"
  kill -0 "$pid" 2>/dev/null || return 2
  grep -q "Kafka Server started" "$dir/server.log" 2>/dev/null && port_open "$port" && return 0
  return 1
}

# kafka_exit_reason <dir>: the first ERROR/FATAL line of <dir>/server.log, else the last line of
# <dir>/stdout.log.
kafka_exit_reason() {
  grep -h -m1 -E ' (ERROR|FATAL) ' "$1/server.log" 2>/dev/null || tail -n1 "$1/stdout.log" 2>/dev/null
}

# kafka_stop_pid <pid> <who>: SIGTERM, up to 30 s for the clean shutdown, then SIGKILL.
kafka_stop_pid() {
  local pid="$1" who="$2"
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "$who: pid $pid still running 30 s after SIGTERM, sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.5
  fi
}
