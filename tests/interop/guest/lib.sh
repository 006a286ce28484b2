# Shared guest helpers (busybox sh).  Sourced by /init and by every step:
# each step runs as `timeout -s KILL SECS sh -c '. lib.sh; . scenario; FUNC'`,
# so scenario files must only define functions at top level.
#
# Console protocol (ttyS0, parsed by run.sh):
#   SCENARIO START <name> kernel=<uname -r>
#   INFO <step>: <text>            free-form facts a step reports
#   STEP <name> PASS
#   STEP <name> FAIL <reason>
#   HOOK <name> [args]             asks the host to act (see hook_call)
#   TARGET READY <k=v ...>          kernel-target: nvmet is listening
#   SCENARIO DONE pass=N fail=M
# Control channel (ttyS1 <- QEMU pipe chardev <- run.sh): the host answers a
# HOOK with
#   HOOKACK <name> <rc> [text]

export PATH=/usr/sbin:/usr/bin:/sbin:/bin
STEPDIR=/tmp/steps
STATE=/tmp/state
CTL_FD_OK=/tmp/state/ctl-ok

info() { echo "INFO $*"; }
fail() { echo "FAILREASON: $*"; exit 1; }
# t SECS CMD...: run CMD with a hard timeout
t() { _t=$1; shift; timeout -s KILL "$_t" "$@"; }
console() { echo "$*" >/dev/console; }

load_mod() {
    for _m in "$@"; do
        t 30 modprobe "$_m" || { echo "modprobe $_m failed"; return 1; }
    done
}

# ------------------------------------------------------------------ params
# 1. /scenario.env (written by run.sh into the overlay cpio), shell syntax
# 2. kernel command line: scenario=NAME, it_KEY=VALUE (exported as KEY=VALUE)
load_params() {
    if [ -f /scenario.env ]; then
        set -a; . /scenario.env; set +a
    fi
    for _w in $(cat /proc/cmdline); do
        case $_w in
            scenario=*) SCENARIO=${_w#scenario=} ;;
            it_*=*) export "${_w#it_}" ;;
        esac
    done
    export SCENARIO
    export SCENARIO_SCRIPT=/guest/scenarios/$SCENARIO.sh
}

# ------------------------------------------------------------------ steps
run_step() { # run_step NAME TIMEOUT FUNC [ARGS...]
    _name=$1; _tmo=$2; shift 2
    # ONLY_STEPS="a b": run only those steps (and the set-up ones), for development
    if [ -n "${ONLY_STEPS:-}" ]; then
        case " $ONLY_STEPS modules net target-setup final-clean " in *" $_name "*) ;; *) return 0 ;; esac
    fi
    _log=$STEPDIR/$_name.log
    _t0=$(date +%s)
    timeout -s KILL "$_tmo" sh -c '. /guest/lib.sh; . "$SCENARIO_SCRIPT"; "$@"' \
        "step-$_name" "$@" >"$_log" 2>&1 </dev/null
    _rc=$?
    _dt=$(( $(date +%s) - _t0 ))
    sed -n "s/^INFO /INFO $_name: /p" "$_log"
    if [ "$VERBOSE" = 1 ]; then sed 's/^/  | /' "$_log"; fi
    if [ $_rc = 0 ]; then
        echo "STEP $_name PASS"
        STEPS_PASS=$((STEPS_PASS + 1))
    else
        _reason=$(sed -n 's/^FAILREASON: //p' "$_log" | tail -n 1)
        if [ "$_dt" -ge "$_tmo" ] && [ $_rc -ge 128 ]; then
            _reason="timeout after ${_tmo}s${_reason:+ ($_reason)}"
        fi
        [ -n "$_reason" ] || _reason="exit $_rc: $(grep -v '^INFO ' "$_log" | tail -n 1)"
        [ "$VERBOSE" = 1 ] || tail -n 25 "$_log" | sed 's/^/  | /'
        echo "STEP $_name FAIL $(echo "$_reason" | tr -d '\r' | head -c 300)"
        STEPS_FAIL=$((STEPS_FAIL + 1))
        echo "$_name" >>"$STATE/failed"
    fi
    echo "# step $_name took ${_dt}s"
    return $_rc
}

# skip_step NAME REASON: report a step that could not run (counts as failed)
skip_step() {
    echo "STEP $1 FAIL skipped: $2"
    STEPS_FAIL=$((STEPS_FAIL + 1))
}

# ------------------------------------------------------------------ hooks
# hook_call NAME TIMEOUT [ARGS...]: print "HOOK #SEQ NAME ARGS" on the console
# and wait up to TIMEOUT s for "HOOKACK #SEQ NAME RC [TEXT]" on the control
# channel. Returns RC (124 on timeout). HOOK_REPLY holds the reply line
# without its "#SEQ " ("HOOKACK NAME RC TEXT").
# SEQ numbers the calls of the whole run (a file, since steps call it in
# subshells). While no reply comes the request is printed again after 15 s
# (HOOK_RESEND), then 30, 60, ... s: a request or reply lost on the serial lines (a kernel
# message written into the request's console line, a reply that never
# arrived) is asked for again, and run.sh answers a repeat (same SEQ, name
# and arguments) with the reply it already sent instead of running the hook
# twice. A reply to
# another SEQ (a late one, or a repeat) is ignored, so it cannot answer a
# later call of the same hook.
hook_call() {
    _hn=$1; _ht=$2; shift 2
    if [ ! -f "$CTL_FD_OK" ]; then echo "no control channel (ttyS1)"; return 125; fi
    # Written whole or not at all (a truncated file once read back empty and
    # numbered the next call 1 again); run.sh copes with a number that goes back.
    _hseq=$(cat "$STATE/hook.seq" 2>/dev/null)
    case $_hseq in
        '' | *[!0-9]*)
            [ -e "$STATE/hook.seq" ] && echo "hook $_hn: sequence file held '$_hseq'; numbering from 1"
            _hseq=0 ;;
    esac
    _hseq=$((_hseq + 1))
    { echo "$_hseq" >"$STATE/hook.seq.new" && mv -f "$STATE/hook.seq.new" "$STATE/hook.seq"; } \
        || echo "hook $_hn: could not record sequence number $_hseq"
    _hreq="HOOK #$_hseq $_hn $*"
    console "$_hreq"
    _hasked=$(date -u +%T)
    _dl=$(( $(date +%s) + _ht ))
    _hgap=${HOOK_RESEND:-15}
    _hresend=$(( $(date +%s) + _hgap ))
    while :; do
        _now=$(date +%s)
        _left=$(( _dl - _now ))
        if [ $_left -le 0 ]; then echo "hook $_hn: no HOOKACK #$_hseq within ${_ht}s (asked at $_hasked, now $(date -u +%T))"; return 124; fi
        if [ "$_now" -ge "$_hresend" ]; then
            echo "hook $_hn: no HOOKACK #$_hseq after $(( _now - _dl + _ht ))s; asking again"
            console "$_hreq"
            _hgap=$(( _hgap * 2 ))
            _hresend=$(( _now + _hgap ))
        fi
        _wait=$(( _hresend - _now ))
        [ $_wait -gt $_left ] && _wait=$_left
        [ $_wait -lt 1 ] && _wait=1
        if read -t "$_wait" _line <&3; then
            _line=$(echo "$_line" | tr -d '\r')
            case $_line in
                "HOOKACK #$_hseq $_hn "*)
                    HOOK_REPLY="HOOKACK $_hn ${_line#"HOOKACK #$_hseq $_hn "}"
                    _hrc=${_line#"HOOKACK #$_hseq $_hn "}; _hrc=${_hrc%% *}
                    echo "hook $_hn -> $HOOK_REPLY"
                    return "$_hrc" ;;
                *) [ -n "$_line" ] && echo "control: ignoring '$_line'" ;;
            esac
        else
            # a timeout (> 128) loops to the resend or deadline check;
            # EOF/error: do not spin
            [ $? -gt 128 ] || sleep 1
        fi
    done
}

open_control() {
    [ -c /dev/ttyS1 ] || return 0
    stty -F /dev/ttyS1 clocal raw -echo 2>/dev/null || return 0
    exec 3</dev/ttyS1 && touch "$CTL_FD_OK"
}

# ------------------------------------------------------------------ network
net_up() { # user-mode networking: guest 10.0.2.15, gateway 10.0.2.2
    load_mod virtio_net || return 1
    _i=0
    while [ ! -e /sys/class/net/eth0 ]; do
        _i=$((_i + 1)); [ $_i -gt 50 ] && { echo "eth0 did not appear"; return 1; }
        sleep 0.2
    done
    ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && ip route add default via 10.0.2.2
}

# ------------------------------------------------------------------ nvme host
# Block device (multipath head, e.g. /dev/nvme0n1) of the first namespace of
# the subsystem NQN, or nothing.
ns_dev_for_nqn() {
    for _d in /sys/block/nvme*; do
        [ -e "$_d" ] || continue
        _n=${_d##*/}
        case $_n in nvme*c*) continue ;; esac
        [ "$(cat "$_d/device/subsysnqn" 2>/dev/null)" = "$1" ] || continue
        [ -b "/dev/$_n" ] && { echo "/dev/$_n"; return 0; }
    done
    return 1
}

ctrls_for_nqn() {
    for _c in /sys/class/nvme/nvme*; do
        [ -e "$_c" ] || continue
        [ "$(cat "$_c/subsysnqn" 2>/dev/null)" = "$1" ] && echo "${_c##*/}"
    done
    return 0
}

wait_ns_dev() { # wait_ns_dev NQN SECS: echo device once present
    _dl=$(( $(date +%s) + $2 ))
    while [ "$(date +%s)" -le $_dl ]; do
        ns_dev_for_nqn "$1" && return 0
        sleep 0.2
    done
    return 1
}

# Block device (multipath head) of namespace NSID of subsystem NQN, or nothing.
ns_dev_nsid() { # ns_dev_nsid NQN NSID
    for _d in /sys/block/nvme*n*; do
        [ -e "$_d" ] || continue
        _n=${_d##*/}
        case $_n in nvme*c*) continue ;; esac
        [ "$(cat "$_d/device/subsysnqn" 2>/dev/null)" = "$1" ] || continue
        _id=$(cat "$_d/nsid" 2>/dev/null) || _id=${_n##*n}
        [ "$_id" = "$2" ] && [ -b "/dev/$_n" ] && { echo "/dev/$_n"; return 0; }
    done
    return 1
}

wait_ns_nsid() { # wait_ns_nsid NQN NSID SECS: echo the device once present
    _dl=$(( $(date +%s) + $3 ))
    while [ "$(date +%s)" -le $_dl ]; do
        ns_dev_nsid "$1" "$2" && return 0
        sleep 0.2
    done
    return 1
}

# uptime in ms (sub-second timing; busybox date has no %N)
now_ms() { awk '{printf "%d\n", $1 * 1000}' /proc/uptime; }

wait_no_ctrl() { # wait_no_ctrl NQN SECS
    _dl=$(( $(date +%s) + $2 ))
    while [ "$(date +%s)" -le $_dl ]; do
        [ -z "$(ctrls_for_nqn "$1")" ] && ! ns_dev_for_nqn "$1" >/dev/null && return 0
        sleep 0.2
    done
    return 1
}

# dd_verify DEV OFFSET_MIB COUNT_MIB TAG: write a random pattern with
# O_DIRECT, read it back with O_DIRECT, compare.
dd_verify() {
    _dev=$1; _off=$2; _cnt=$3; _tag=$4
    _p=/tmp/pat-$_tag; _r=/tmp/rb-$_tag
    t 60 dd if=/dev/urandom of="$_p" bs=1M count="$_cnt" 2>/dev/null || fail "making pattern"
    t 120 dd if="$_p" of="$_dev" bs=1M count="$_cnt" seek="$_off" oflag=direct conv=fsync \
        || fail "dd write ${_cnt}MiB at ${_off}MiB"
    t 120 dd if="$_dev" of="$_r" bs=1M count="$_cnt" skip="$_off" iflag=direct \
        || fail "dd read ${_cnt}MiB at ${_off}MiB"
    cmp "$_p" "$_r" || fail "data mismatch ${_cnt}MiB at ${_off}MiB"
    info "$_tag: ${_cnt} MiB at ${_off} MiB verified ($(md5sum <"$_p" | cut -c1-12))"
    rm -f "$_p" "$_r"
}

# gen_key BYTES HMAC NQN: `nvme gen-dhchap-key` from /dev/urandom bytes (its
# own getrandom(GRND_NONBLOCK) fails while the guest's CRNG is not ready)
gen_key() {
    _hex=$(head -c "$1" /dev/urandom | od -An -v -tx1 | tr -d ' \n')
    nvme gen-dhchap-key --secret="$_hex" --key-length="$1" --hmac="$2" --nqn="$3" 2>&1
}

# ------------------------------------------------------------------ nvmet
# nvmet_setup BACKEND TRADDR TRSVCID NQN SIZE_BYTES
#   BACKEND: brd (/dev/ram0, 512 B LBAs) or file (/srv/ns1.img on tmpfs,
#   buffered, 4 KiB LBAs).  Any host may connect.
NVMET=/sys/kernel/config/nvmet
nvmet_setup() {
    _be=$1; _addr=$2; _svc=$3; _nqn=$4; _size=$5
    load_mod configfs nvmet nvmet_tcp || fail "loading nvmet modules"
    grep -q ' /sys/kernel/config ' /proc/mounts || mount -t configfs configfs /sys/kernel/config \
        || fail "mount configfs"
    case $_be in
        brd)
            t 30 modprobe brd rd_nr=1 rd_size=$((_size / 1024)) max_part=0 || fail "modprobe brd"
            _path=/dev/ram0
            [ -b $_path ] || fail "$_path missing" ;;
        file)
            _path=/srv/ns1.img
            truncate -s "$_size" $_path || fail "truncate $_path" ;;
        *) fail "unknown backend $_be" ;;
    esac
    _s=$NVMET/subsystems/$_nqn
    mkdir "$_s" || fail "mkdir subsystem"
    echo 1 >"$_s/attr_allow_any_host" || fail "allow_any_host"
    echo -n "${NVMET_SERIAL:-interop0001}" >"$_s/attr_serial" 2>/dev/null
    echo 0x12ab34 >"$_s/attr_ieee_oui" || fail "attr_ieee_oui"
    mkdir "$_s/namespaces/1" || fail "mkdir namespace"
    echo -n "$_path" >"$_s/namespaces/1/device_path" || fail "device_path"
    [ "$_be" = file ] && echo 1 >"$_s/namespaces/1/buffered_io"
    echo 1 >"$_s/namespaces/1/enable" || fail "enable namespace"
    _p=$NVMET/ports/1
    mkdir "$_p" || fail "mkdir port"
    echo tcp >"$_p/addr_trtype"; echo ipv4 >"$_p/addr_adrfam"
    echo "$_addr" >"$_p/addr_traddr"; echo "$_svc" >"$_p/addr_trsvcid"
    ln -s "$_s" "$_p/subsystems/$_nqn" || fail "link subsystem to port"
    netstat -ltn 2>/dev/null | grep -q ":$_svc " || fail "nothing listens on port $_svc"
    info "nvmet: $_nqn ns1=$_path ($_be, $_size bytes) on tcp $_addr:$_svc"
}

nvmet_teardown() { # nvmet_teardown NQN: every port, then the subsystem
    _s=$NVMET/subsystems/$1
    for _p in "$NVMET"/ports/*; do
        [ -d "$_p" ] || continue
        rm -f "$_p/subsystems/$1" || fail "unlink subsystem from port ${_p##*/}"
        rmdir "$_p" || fail "rmdir port ${_p##*/}"
    done
    for _nsd in "$_s"/namespaces/*; do
        [ -d "$_nsd" ] || continue
        echo 0 >"$_nsd/enable"
        rmdir "$_nsd" || fail "rmdir namespace ${_nsd##*/}"
    done
    rmdir "$_s" || fail "rmdir subsystem"
}

# nvmet_port_down NQN / nvmet_port_up NQN TRADDR TRSVCID: take port 1 away
# (hosts lose their connections and get refused) and bring it back.
nvmet_port_down() {
    rm -f "$NVMET/ports/1/subsystems/$1" || fail "unlink subsystem from port"
    rmdir "$NVMET/ports/1" || fail "rmdir port"
}
nvmet_port_up() {
    _p=$NVMET/ports/1
    mkdir "$_p" || fail "mkdir port"
    echo tcp >"$_p/addr_trtype"; echo ipv4 >"$_p/addr_adrfam"
    echo "$2" >"$_p/addr_traddr"; echo "$3" >"$_p/addr_trsvcid"
    ln -s "$NVMET/subsystems/$1" "$_p/subsystems/$1" || fail "link subsystem to port"
}

# nvmet_add_port ID TRADDR TRSVCID NQN [INLINE QUEUE]: another port to the subsystem (its own ANA groups)
nvmet_add_port() {
    _p=$NVMET/ports/$1
    mkdir "$_p" || fail "mkdir port $1"
    echo tcp >"$_p/addr_trtype"; echo ipv4 >"$_p/addr_adrfam"
    echo "$2" >"$_p/addr_traddr"; echo "$3" >"$_p/addr_trsvcid"
    # optional: the port's in-capsule data size and queue size (set only
    # while the port is disabled, before its first subsystem link)
    if [ -n "${5:-}" ]; then
        echo "$5" >"$_p/param_inline_data_size" && echo "$6" >"$_p/param_max_queue_size" \
            || fail "port $1 params"
    fi
    ln -s "$NVMET/subsystems/$4" "$_p/subsystems/$4" || fail "link subsystem to port $1"
}

# nvmet_add_file_ns NQN NSID PATH SIZE: a buffered file namespace (AEN to hosts)
nvmet_add_file_ns() {
    _d=$NVMET/subsystems/$1/namespaces/$2
    truncate -s "$4" "$3" || fail "truncate $3"
    mkdir "$_d" || fail "mkdir namespace $2"
    echo -n "$3" >"$_d/device_path" || fail "device_path"
    echo 1 >"$_d/buffered_io"
    echo 1 >"$_d/enable" || fail "enable namespace $2"
}

# ------------------------------------------------------------------ main
guest_main() {
    STEPS_PASS=0; STEPS_FAIL=0
    mkdir -p "$STEPDIR" "$STATE"
    load_params
    ip link set lo up 2>/dev/null
    open_control
    # Host identity for nvme-cli.  Fixed by default (QEMU's DMI UUID is all
    # zeros, which is what `nvme gen-hostnqn` would use) so that a target can
    # be configured to allow exactly this host.
    : "${HOSTID:=6e766d65-6f66-4974-8000-000000000001}"
    : "${HOSTNQN:=nqn.2014-08.org.nvmexpress:uuid:$HOSTID}"
    echo "$HOSTNQN" >/etc/nvme/hostnqn
    echo "$HOSTID" >/etc/nvme/hostid
    echo "SCENARIO START $SCENARIO kernel=$(uname -r) cpus=$(nproc) mem=$(awk '/MemTotal/{print $2}' /proc/meminfo)kB uptime=$(cut -d' ' -f1 /proc/uptime)s"
    if [ -z "$SCENARIO" ] || [ ! -f "$SCENARIO_SCRIPT" ]; then
        echo "STEP scenario FAIL unknown scenario '$SCENARIO'"
        STEPS_FAIL=1
    else
        . "$SCENARIO_SCRIPT"
        scenario_main
    fi
    if [ "$STEPS_FAIL" != 0 ]; then
        echo "---- dmesg (last 60 lines) ----"
        dmesg | tail -n 60 | sed 's/^/DMESG /'
    fi
    echo "SCENARIO DONE pass=$STEPS_PASS fail=$STEPS_FAIL uptime=$(cut -d' ' -f1 /proc/uptime)s"
}
