#!/usr/bin/env bash
# Shard scaling: produce throughput of one broker as its shard count grows, on a machine with
# cores to spare (run on a 16-core machine; shards on cores 0..N-1, the load generator on the
# cores from SCALING_BENCH_CPU on, by default the upper half). Each shard count gets a fresh broker and data dir, then `sluice bench` in
# produce mode for acks=1 and acks=all; every figure goes to OUT as JSON, plus a summary.
#   perf/shard_scaling.sh SLUICE_BINARY OUT_DIR [SHARD_COUNTS...]
# SCALING_BENCHES=N splits the generator's cores among N bench processes (each with
# SCALING_PRODUCERS producers) whose figures add up: one process may be the limit.
# Results are recorded in perf/results/*-shard-scaling.md with the machine they ran on.
set -euo pipefail
bin=$(realpath "$1")
out=$(realpath -m "$2")
shift 2
counts=("${@:-1 2 4 8}")
read -r -a counts <<<"${counts[*]}"
ncpu=$(nproc)
half=${SCALING_BENCH_CPU:-$((ncpu / 2))}
duration_s=${SCALING_DURATION_S:-12}
producers=${SCALING_PRODUCERS:-8}
benches=${SCALING_BENCHES:-1}
mkdir -p "$out"
work=$(mktemp -d)
broker=""
trap '[ -n "$broker" ] && kill -9 "$broker" 2>/dev/null; rm -rf "$work"' EXIT
{
  echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -r)"
  lscpu | grep -E 'Model name|Thread|Socket' || true
  df -h /tmp | tail -1
} >"$out/machine.txt"
# The bench processes for one row, each on its share of the generator's cores, at once.
run_benches() {
  local n=$1 acks=$2 port=$3 share=$(((ncpu - half) / benches)) pids=() b
  for ((b = 0; b < benches; b++)); do
    local first=$((half + b * share)) name="$n-$acks"
    ((benches > 1)) && name="$n-$acks-$b"
    taskset -c "$first-$((first + share - 1))" "$bin" bench --bootstrap "127.0.0.1:$port" \
      --topic "scale-$n-$acks" --partitions 32 --producers "$producers" --acks "$acks" \
      --duration "$duration_s" --warmup 2 --json "$out/shards-$name.json" \
      >"$out/bench-$name.txt" 2>&1 &
    pids+=($!)
  done
  for b in "${pids[@]}"; do
    wait "$b" || echo "a bench failed for $n shards, acks=$acks" >&2
  done
}

port=19092
for n in "${counts[@]}"; do
  if ((n > half)); then
    echo "skipping $n shards: the load generator has the cores from $half on" >&2
    continue
  fi
  cpus=$(seq -s, 0 $((n - 1)))
  for acks in 1 all; do
    port=$((port + 1))
    rm -rf "$work/data"
    printf 'cpus = [%s]\n' "$cpus" >"$work/config.toml"
    "$bin" serve --config "$work/config.toml" --shards "$n" --listen "127.0.0.1:$port" \
      --data-dir "$work/data" >"$work/broker-$n-$acks.log" 2>&1 &
    broker=$!
    for _ in $(seq 100); do
      (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
      sleep 0.1
    done
    run_benches "$n" "$acks" "$port"
    kill -TERM "$broker"
    wait "$broker" || true
    broker=""
    tail -3 "$work/broker-$n-$acks.log" >>"$out/bench-$n-$acks.txt"
    echo "== $n shards, acks=$acks"
    grep -E "^(records/s|MB/s|latency p50|latency p99) " "$out"/bench-"$n-$acks"*.txt
    if ((benches > 1)); then
      cat "$out"/bench-"$n-$acks"-*.txt | awk '/^records\/s/ {sum += $2} END {print "records/s total " sum}'
    fi
  done
done | tee "$out/summary.txt"
