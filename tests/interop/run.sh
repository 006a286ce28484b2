#!/usr/bin/env bash
# Linux-kernel NVMe/TCP interop runner.
#
#   tests/interop/run.sh [SCENARIO...]     (no argument: all scenarios)
#
# Scenarios:
#   kernel-host         Linux host (guest) -> target on this host (our
#                       nvmeof-target; TARGET=kernel-guest: Linux nvmet in
#                       the same guest instead, to validate the harness)
#   kernel-target       Linux nvmet (guest, brd namespace, 512 B LBAs) ->
#                       HOST_CLIENT_CMD on this host
#   kernel-target-file  same, file namespace on tmpfs (4 KiB LBAs)
#   smoke               (not in "all") boot + control channel round trip
#
# Boots the guest built by build-guest.sh in QEMU (TCG, 2 vCPUs, 1 GiB) with
# user networking restricted to loopback port forwards, follows the serial
# console, answers the guest's HOOK requests over a second serial port, and
# prints a summary.  Exit status: 0 only if every step of every scenario
# passed and every guest finished.  See README.md for the environment knobs.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${INTEROP_CACHE:-$HERE/cache}
ALL_SCENARIOS=(kernel-host kernel-target kernel-target-file)

: "${TARGET:=host}"                       # kernel-host: host | kernel-guest
: "${NQN:=nqn.2026-11.io.nvmeof:interop}"
: "${NS_SIZE_MB:=256}"
: "${FIO_RUNTIME:=10}"
: "${CLIENT_TIMEOUT:=300}"
: "${HOST_CLIENT_CMD:=python3 \"$HERE/icreq-smoke.py\"}"
: "${NVMEOF_TARGET_BIN:=$REPO/build/release/nvmeof-target}"
: "${NVMEOF_TARGET_ARGS:=}"
: "${INTEROP_QEMU_CPU:=qemu64}"
: "${INTEROP_SMP:=2}"
: "${INTEROP_MEM:=1024}"
: "${INTEROP_VERBOSE:=0}"
NS_SIZE=$((NS_SIZE_MB * 1024 * 1024))

say() { printf '%s\n' "$*"; }
die() { say "run.sh: ERROR: $*" >&2; exit 2; }

usage() {
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

# ------------------------------------------------------------------ args
SCENARIOS=()
for a in "$@"; do
    case $a in
        -h|--help) usage 0 ;;
        all) SCENARIOS+=("${ALL_SCENARIOS[@]}") ;;
        *) printf '%s\n' "${ALL_SCENARIOS[@]}" smoke | grep -qx -- "$a" || { say "unknown scenario: $a" >&2; usage 2; }
           SCENARIOS+=("$a") ;;
    esac
done
[ ${#SCENARIOS[@]} -gt 0 ] || SCENARIOS=("${ALL_SCENARIOS[@]}")

T_ALL0=$(date +%s)
if [ "${INTEROP_SKIP_BUILD:-0}" != 1 ]; then
    timeout 1200 "$HERE/build-guest.sh" || die "build-guest.sh failed"
fi
[ -s "$CACHE/vmlinuz" ] && [ -s "$CACHE/initramfs.cpio.gz" ] || die "no guest in $CACHE"
for c in qemu-system-x86_64 socat python3 cpio gzip timeout ss; do
    command -v "$c" >/dev/null || die "$c not installed (run build-guest.sh)"
done
KVER=$(sed -n 's/^KERNEL_VERSION=//p' "$CACHE/guest.env" 2>/dev/null)
KPKGV=$(sed -n 's/^KERNEL_PKG_VERSION=//p' "$CACHE/guest.env" 2>/dev/null)

RUN_ROOT=${INTEROP_RUN_DIR:-$(mktemp -d /tmp/nvmeof-interop.XXXXXX)}
mkdir -p "$RUN_ROOT"
say "interop: kernel $KVER ($KPKGV), scenarios: ${SCENARIOS[*]}, logs: $RUN_ROOT"

# ------------------------------------------------------------------ helpers
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

port_listening() { [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; }

# PIDs this script started, killed by PID on exit
QEMU_PID=""
MON_PID=""
cleanup_pids() {
    local p
    for p in $QEMU_PID $MON_PID; do kill "$p" 2>/dev/null; done
    stop_target
    QEMU_PID=""; MON_PID=""
}
trap 'cleanup_pids' EXIT
trap 'cleanup_pids; exit 130' INT TERM

# ---------------------------------------------------------- our target
# (kernel-host with TARGET=host)  The target's PID lives in $DIR/target.pid
# so that hooks (run in the console monitor, a subshell) can restart it.
TARGET_PORT=""
start_target() {
    local bin=$NVMEOF_TARGET_BIN
    if [ ! -x "$bin" ] && [ "$bin" = "$REPO/build/release/nvmeof-target" ]; then
        say "[$SCEN] building nvmeof-target (cargo build --release -p nvmeof-target)"
        ( cd "$REPO" && timeout 1800 cargo build --release -p nvmeof-target ) >"$DIR/cargo.log" 2>&1 \
            || { tail -n 20 "$DIR/cargo.log"; return 1; }
    fi
    [ -x "$bin" ] || { say "[$SCEN] target binary not found: $bin"; return 1; }
    [ -n "$TARGET_PORT" ] || TARGET_PORT=$(free_port)
    # shellcheck disable=SC2086
    # own session/process group, so stop_target can stop anything it forks
    setsid "$bin" serve --file "$DIR/ns1.img" --size "${NS_SIZE_MB}M" --listen "127.0.0.1:$TARGET_PORT" \
        --nqn "$NQN" $NVMEOF_TARGET_ARGS >>"$DIR/target.log" 2>&1 </dev/null &
    echo $! >"$DIR/target.pid"; disown $!
    local i
    for i in $(seq 1 150); do
        port_listening "$TARGET_PORT" && { say "[$SCEN] target pid $(cat "$DIR/target.pid") listening on 127.0.0.1:$TARGET_PORT"; return 0; }
        kill -0 "$(cat "$DIR/target.pid")" 2>/dev/null || break
        sleep 0.2
    done
    say "[$SCEN] target did not start listening on 127.0.0.1:$TARGET_PORT; target.log:"
    tail -n 20 "$DIR/target.log" | sed 's/^/    /'
    return 1
}

# smoke: an echo server standing in for the target (same PID file, same stop)
start_echo_server() {
    TARGET_PORT=$(free_port)
    setsid python3 -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8)
while True:
    c, _ = s.accept(); c.settimeout(30); t0 = time.monotonic(); buf = b""
    try:
        while True:
            d = c.recv(4096)
            if not d: break
            buf += d
        c.sendall(buf)
        print(f"echo: {len(buf)} bytes, EOF after {time.monotonic() - t0:.2f}s", flush=True)
    except OSError as e:
        print(f"echo: {e}", flush=True)
    c.close()
' "$TARGET_PORT" >>"$DIR/target.log" 2>&1 </dev/null &
    echo $! >"$DIR/target.pid"; disown $!
    local i
    for i in $(seq 1 50); do port_listening "$TARGET_PORT" && return 0; sleep 0.1; done
    return 1
}

stop_target() {
    [ -n "${DIR:-}" ] && [ -f "$DIR/target.pid" ] || return 0
    local pid i
    pid=$(cat "$DIR/target.pid"); rm -f "$DIR/target.pid"
    # $pid leads its own process group (setsid above): signal the group
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
    for i in $(seq 1 50); do kill -0 -- "-$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null
}

# ------------------------------------------------------------ host hooks
# The guest prints "HOOK <name> [args]"; hook_<name with - as _> runs here
# and its exit code (and first line of stdout) goes back as
# "HOOKACK <name> <rc> <text>" on the guest's ttyS1.
ctl_send() {
    # QEMU holds both FIFOs open read-write, so this never sees EOF/EPIPE and
    # the bytes wait in the pipe until the guest's UART takes them.
    timeout 10 bash -c 'printf "%s\n" "$1" >"$2"' ctl_send "$*" "$DIR/ctl.in" 2>>"$DIR/ctl.err"
}
hook_ping() { echo "pong $*"; }

hook_run_client() { # kernel-target: run HOST_CLIENT_CMD against the forwarded port
    say "[$SCEN] host client: $HOST_CLIENT_CMD (NVME_ADDR=127.0.0.1 NVME_PORT=$HOST_PORT NVME_NQN=$NQN)" >&2
    NVME_ADDR=127.0.0.1 NVME_PORT=$HOST_PORT NVME_NQN=$NQN NVME_NS_SIZE=$NS_SIZE \
        NVME_BACKEND=$BACKEND timeout --kill-after=5 $((CLIENT_TIMEOUT - 15)) \
        bash -c "$HOST_CLIENT_CMD" </dev/null >"$DIR/client.log" 2>&1
    local rc=$?
    sed "s/^/[$SCEN] client| /" "$DIR/client.log" >&2
    echo "$(tail -n 1 "$DIR/client.log" | tr -cd '[:print:]' | head -c 200)"
    return $rc
}

hook_restart_target() { # kernel-host TARGET=host: kill and restart the target
    [ "$SCEN" = kernel-host ] && [ "$TARGET" = host ] || { echo "not applicable"; return 2; }
    stop_target
    start_target >&2 || { echo "restart failed"; return 1; }
    echo "restarted"
}

# Placeholders for the ns-add / ns-resize AEN steps: the target will need a
# control interface (control file or signal) first.
hook_add_namespace() { echo "not implemented"; return 2; }
hook_resize_namespace() { echo "not implemented"; return 2; }

handle_hook() { # handle_hook NAME ARGS...
    local name=$1 fn out rc
    shift
    fn=hook_${name//-/_}
    if declare -F "$fn" >/dev/null; then
        out=$("$fn" "$@"); rc=$?
    else
        out="unknown hook"; rc=127
    fi
    say "[$SCEN] hook $name -> rc=$rc ${out%%$'\n'*}"
    ctl_send "HOOKACK $name $rc ${out%%$'\n'*}" || say "[$SCEN] could not send HOOKACK $name"
}

# ------------------------------------------------------------ console monitor
monitor() { # follows console.log until QEMU ($1) exits
    tail -s 0.2 -n +1 -F --pid="$1" "$DIR/console.log" 2>/dev/null | while IFS= read -r line; do
        line=${line//$'\r'/}
        if [[ $line =~ ^(HOOK\ [^ ]+.*)$ ]]; then
            say "[$SCEN] ${BASH_REMATCH[1]}"
            # shellcheck disable=SC2086
            handle_hook ${BASH_REMATCH[1]#HOOK }
        elif [ "$INTEROP_VERBOSE" = 1 ]; then
            say "[$SCEN] $line"
        elif [[ $line =~ ((STEP|INFO|SCENARIO|TARGET\ READY|DMESG|\ \ \|).*)$ ]]; then
            say "[$SCEN] ${BASH_REMATCH[1]}"
        elif [[ $line =~ (Kernel\ panic|BUG:|Oops|WARNING:|INFO:\ task) ]]; then
            say "[$SCEN] kernel: $line"
        fi
    done
}

# ------------------------------------------------------------ one scenario
RESULTS=()
TOTAL_PASS=0
TOTAL_FAIL=0

run_scenario() {
    SCEN=$1
    DIR=$RUN_ROOT/$SCEN
    rm -rf "$DIR"; mkdir -p "$DIR"
    local t0 gscen env fwd qtimeout
    t0=$(date +%s)
    BACKEND=brd
    HOST_PORT=""
    TARGET_PORT=""
    case $SCEN in
        kernel-host)
            gscen=kernel-host
            env="TARGET=$TARGET"
            qtimeout=${INTEROP_TIMEOUT:-$((FIO_RUNTIME + 420))}
            if [ "$TARGET" = host ]; then
                start_target || { record "$SCEN" 0 1 "$t0" "target did not start"; return; }
                fwd=",guestfwd=tcp:10.0.2.100:4420-cmd:socat - TCP:127.0.0.1:$TARGET_PORT"
                env="$env NVME_ADDR=10.0.2.100 NVME_PORT=4420"
            elif [ "$TARGET" = kernel-guest ]; then
                fwd=""
            else
                die "TARGET must be host or kernel-guest, not '$TARGET'"
            fi ;;
        smoke)
            gscen=smoke; env=""; qtimeout=${INTEROP_TIMEOUT:-120}
            start_echo_server || { record "$SCEN" 0 1 "$t0" "echo server did not start"; return; }
            fwd=",guestfwd=tcp:10.0.2.100:4420-cmd:socat - TCP:127.0.0.1:$TARGET_PORT" ;;
        kernel-target|kernel-target-file)
            gscen=kernel-target
            [ "$SCEN" = kernel-target-file ] && BACKEND=file
            HOST_PORT=$(free_port)
            fwd=",hostfwd=tcp:127.0.0.1:$HOST_PORT-:4420"
            env="CLIENT_TIMEOUT=$CLIENT_TIMEOUT"
            qtimeout=${INTEROP_TIMEOUT:-$((CLIENT_TIMEOUT + 180))} ;;
    esac

    # Overlay cpio: current guest scripts + parameters, appended to the base.
    mkdir -p "$DIR/overlay"
    cp -r "$HERE/guest" "$DIR/overlay/guest"
    mv "$DIR/overlay/guest/init" "$DIR/overlay/init"
    {
        echo "NQN='$NQN'"; echo "NS_SIZE=$NS_SIZE"; echo "FIO_RUNTIME=$FIO_RUNTIME"
        echo "BACKEND=$BACKEND"; echo "VERBOSE=$INTEROP_VERBOSE"
        for kv in $env; do echo "$kv"; done
        [ -n "${GUEST_ENV:-}" ] && printf '%s\n' $GUEST_ENV
    } >"$DIR/overlay/scenario.env"
    ( cd "$DIR/overlay" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet | gzip -1 ) >"$DIR/overlay.cpio.gz"
    cat "$CACHE/initramfs.cpio.gz" "$DIR/overlay.cpio.gz" >"$DIR/initrd.img"

    : >"$DIR/console.log"
    mkfifo "$DIR/ctl.in" "$DIR/ctl.out"     # control channel (guest ttyS1)
    local qemu=(qemu-system-x86_64 -name "nvmeof-interop-$SCEN"
        -accel tcg -machine pc -cpu "$INTEROP_QEMU_CPU" -smp "$INTEROP_SMP" -m "$INTEROP_MEM"
        -nodefaults -no-user-config -display none -no-reboot
        -kernel "$CACHE/vmlinuz" -initrd "$DIR/initrd.img"
        -append "console=ttyS0,115200 panic=-1 loglevel=4 scenario=$gscen"
        -chardev "file,id=con,path=$DIR/console.log" -serial chardev:con
        -chardev "pipe,id=ctl,path=$DIR/ctl" -serial chardev:ctl
        -netdev "user,id=n0,restrict=on,ipv6=off$fwd" -device virtio-net-pci,netdev=n0)
    printf '%q ' "${qemu[@]}" >"$DIR/qemu.cmd"; echo >>"$DIR/qemu.cmd"
    say "[$SCEN] booting guest (timeout ${qtimeout}s)${HOST_PORT:+, nvmet forwarded to 127.0.0.1:$HOST_PORT}${TARGET_PORT:+, guest 10.0.2.100:4420 -> 127.0.0.1:$TARGET_PORT}"
    timeout --kill-after=10 "$qtimeout" "${qemu[@]}" </dev/null >"$DIR/qemu.log" 2>&1 &
    QEMU_PID=$!
    monitor "$QEMU_PID" &
    MON_PID=$!
    wait "$QEMU_PID"; local qrc=$?
    QEMU_PID=""
    # the monitor ends once tail notices QEMU is gone; bound it anyway
    local i
    for i in $(seq 1 50); do kill -0 "$MON_PID" 2>/dev/null || break; sleep 0.2; done
    kill "$MON_PID" 2>/dev/null; wait "$MON_PID" 2>/dev/null
    MON_PID=""
    stop_target
    [ -s "$DIR/qemu.log" ] && sed "s/^/[$SCEN] qemu: /" "$DIR/qemu.log"
    rm -rf "$DIR/initrd.img" "$DIR/overlay" "$DIR/ns1.img"   # big; keep the logs

    # ---- results
    local steps pass fail done_line
    tr -d '\r' <"$DIR/console.log" | grep -aoE 'STEP [^ ]+ (PASS|FAIL).*$' >"$DIR/steps.txt"
    pass=$(grep -c ' PASS$' "$DIR/steps.txt")
    fail=$(grep -c ' FAIL' "$DIR/steps.txt")
    done_line=$(tr -d '\r' <"$DIR/console.log" | grep -aoE 'SCENARIO DONE.*$' | tail -n 1)
    local note=""
    if [ -z "$done_line" ]; then
        fail=$((fail + 1))
        if [ $qrc = 124 ] || [ $qrc = 137 ]; then note="guest timed out after ${qtimeout}s"
        else note="guest did not finish (qemu rc=$qrc)"; fi
        say "[$SCEN] STEP guest-finished FAIL $note"
        say "[$SCEN] last console lines:"; tail -n 15 "$DIR/console.log" | tr -d '\r' | sed "s/^/[$SCEN]   /"
    elif [ "$pass" = 0 ] && [ "$fail" = 0 ]; then
        fail=1; note="no steps reported"
    fi
    record "$SCEN" "$pass" "$fail" "$t0" "$note"
}

record() { # record SCEN PASS FAIL T0 NOTE
    local dt=$(( $(date +%s) - $4 )) status=PASS
    [ "$3" = 0 ] || status=FAIL
    RESULTS+=("$(printf '%-20s %s  %3d passed %3d failed  %4ds  %s' "$1" "$status" "$2" "$3" "$dt" "$5")")
    TOTAL_PASS=$((TOTAL_PASS + $2)); TOTAL_FAIL=$((TOTAL_FAIL + $3))
    say "[$1] $status: $2 passed, $3 failed in ${dt}s${5:+ ($5)}"
}

for s in "${SCENARIOS[@]}"; do
    run_scenario "$s"
done

say ""
say "== interop summary (kernel $KVER, ${INTEROP_SMP} vCPU TCG) =="
for r in "${RESULTS[@]}"; do say "$r"; done
say "total time: $(( $(date +%s) - T_ALL0 ))s; logs in $RUN_ROOT"
say "interop: $TOTAL_PASS passed, $TOTAL_FAIL failed"
[ "$TOTAL_FAIL" = 0 ]
