#!/usr/bin/env bash
# Stand-in for `nvmeof-target serve` that relays every connection to another
# NVMe/TCP target on the loopback (FWD_PORT, default $NVME_PORT).  Used to
# validate the kernel-host scenario's host-side plumbing (target start-up,
# QEMU guestfwd with a socat relay per connection) against the kernel nvmet
# of a kernel-target guest:
#
#   HOST_CLIENT_CMD='NVMEOF_TARGET_BIN=tests/interop/fwd-target.sh TARGET=host \
#       INTEROP_SKIP_BUILD=1 tests/interop/run.sh kernel-host' \
#       CLIENT_TIMEOUT=420 tests/interop/run.sh kernel-target
#
# Accepts the CLI of nvmeof-target serve; only --listen (or the first
# `listen = "..."` of a --config file) is used.  SIGHUP is ignored, so the
# ns-add-aen / ns-resize-aen steps fail in this mode (the real target behind
# does not change); target-restart works (run.sh restarts the relay).
set -euo pipefail
[ "${1:-}" = serve ] || { echo "usage: $0 serve --listen 127.0.0.1:PORT [...]" >&2; exit 2; }
shift
listen=""
while [ $# -gt 0 ]; do
    case $1 in
        --listen) listen=$2; shift 2 ;;
        --config) listen=$(sed -n 's/^ *listen *= *"\(.*\)".*/\1/p' "$2" | head -n 1); shift 2 ;;
        --file|--size|--nqn) shift 2 ;;
        *) shift ;;
    esac
done
to=${FWD_PORT:-${NVME_PORT:?FWD_PORT or NVME_PORT must name the real target port}}
host=${listen%:*}; port=${listen##*:}
case $host in 127.*|localhost) ;; *) echo "$0: refusing non-loopback listen address $host" >&2; exit 2 ;; esac
echo "fwd-target: 127.0.0.1:$port -> 127.0.0.1:$to"
trap '' HUP
exec socat "TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr,fork" "TCP:127.0.0.1:$to"
