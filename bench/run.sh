#!/usr/bin/env bash
# One-command benchmark (loopback only): baselines (iperf3, sockperf) and our
# target + probe, medians of several rounds, one table on stdout and in
# docs/benchmarks.md. Usage: bench/run.sh [--rounds N] [--time SECONDS] [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v iperf3 >/dev/null || need+=(iperf3)
command -v sockperf >/dev/null || need+=(sockperf)
[ -x /usr/bin/time ] || need+=(time)
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
fi
cargo build --release -q -p nvmeof-target -p nvmeof-tools --bins --example cache_line_pingpong
exec python3 bench/bench.py "$@"
