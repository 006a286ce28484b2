# Scenario kernel-host: the Linux NVMe/TCP host (nvme-tcp + nvme-cli) in the
# guest against an NVMe/TCP target.
#
# Parameters (from /scenario.env or it_KEY=VALUE on the kernel cmdline):
#   TARGET      host          : target runs on the host (our nvmeof-target),
#                               reached at NVME_ADDR:NVME_PORT through QEMU
#                               guestfwd (default 10.0.2.100:4420)
#               kernel-guest  : Linux nvmet inside this same guest on
#                               127.0.0.1:4420 (validates the harness itself)
#   NVME_ADDR, NVME_PORT, NQN, NS_SIZE (bytes), FIO_RUNTIME (s), BACKEND
#
# Step list.  To add a step: write a kh_<name> function below and add a
# run_step line to scenario_main.  A step that needs the host to act calls
# `hook_call NAME TIMEOUT [ARGS]` and run.sh's hook_<NAME> runs on the host.
#
# PLACEHOLDERS (not implemented yet; wire them in scenario_main when the
# target side exists):
#   - ns-add-aen:        host hook "add-namespace" (TARGET=host: run.sh tells
#                        the target, e.g. via a control file or signal;
#                        kernel-guest: mkdir namespaces/2 in configfs) then wait
#                        for the AEN-driven rescan: a second namespace device
#                        for NQN appears within N s (nvme list-ns shows 2).
#   - ns-resize-aen:     host hook "resize-namespace SIZE" (kernel-guest: file
#                        backend, truncate + echo 1 > revalidate_size), then
#                        wait until blockdev --getsize64 reports SIZE.
#   - target-restart:    connect with --ctrl-loss-tmo=60 --reconnect-delay=1,
#                        start a background dd, host hook "restart-target"
#                        (run.sh kills and restarts the target process on the
#                        same file; kernel-guest: unlink/relink the port in
#                        configfs), then wait for the controller state to go
#                        resetting/connecting -> live and the dd to finish;
#                        dd-verify afterwards.
#   - keep-alive:        idle > KATO with no I/O, controller stays live.
#   - auth / TLS:        nvme connect --dhchap-secret / --tls when supported.

: "${TARGET:=host}"
: "${NQN:=nqn.2026-11.io.nvmeof:interop}"
: "${NS_SIZE:=268435456}"
: "${FIO_RUNTIME:=10}"
: "${BACKEND:=brd}"
if [ "$TARGET" = kernel-guest ]; then
    : "${NVME_ADDR:=127.0.0.1}"
else
    : "${NVME_ADDR:=10.0.2.100}"
fi
: "${NVME_PORT:=4420}"
export TARGET NQN NS_SIZE FIO_RUNTIME BACKEND NVME_ADDR NVME_PORT

kh_modules() {
    load_mod nvme_tcp crc32c_generic ext4 || fail "module load"
    grep -q sse4_2 /proc/cpuinfo && modprobe crc32c_intel 2>/dev/null
    info "loaded: $(lsmod | awk 'NR>1{print $1}' | sort | tr '\n' ' ')"
}

kh_net() { net_up || fail "network setup"; info "$(ip -4 addr show eth0 | awk '/inet /{print $2}')"; }

kh_target_setup() { nvmet_setup "$BACKEND" 127.0.0.1 "$NVME_PORT" "$NQN" "$NS_SIZE"; }

kh_discover() {
    t 30 nvme discover -t tcp -a "$NVME_ADDR" -s "$NVME_PORT" >/tmp/disc.txt 2>&1
    _rc=$?
    cat /tmp/disc.txt
    [ $_rc = 0 ] || fail "nvme discover rc=$_rc: $(tail -n 1 /tmp/disc.txt)"
    grep -q "subnqn: *$NQN\$" /tmp/disc.txt || fail "discovery log lacks $NQN"
    info "discovery log: $(grep -c '^=====Discovery Log Entry' /tmp/disc.txt) entries, $NQN listed"
}

# kh_connect [nvme connect options...]
kh_connect() {
    [ -z "$(ctrls_for_nqn "$NQN")" ] || fail "already connected: $(ctrls_for_nqn "$NQN")"
    t 60 nvme connect -t tcp -a "$NVME_ADDR" -s "$NVME_PORT" -n "$NQN" "$@" \
        || fail "nvme connect${*:+ $*} failed"
    _dev=$(wait_ns_dev "$NQN" 30) || fail "no namespace block device for $NQN within 30s"
    _ctrl=$(ctrls_for_nqn "$NQN" | head -n 1)
    [ -n "$_ctrl" ] || fail "no controller for $NQN"
    echo "$_dev" >"$STATE/dev"; echo "$_ctrl" >"$STATE/ctrl"
    info "connected${*:+ ($*)}: ctrl=$_ctrl dev=$_dev state=$(cat /sys/class/nvme/$_ctrl/state) transport=$(cat /sys/class/nvme/$_ctrl/transport) addr=$(cat /sys/class/nvme/$_ctrl/address | tr '\n' ' ')"
}

need_dev() {
    DEV=$(cat "$STATE/dev" 2>/dev/null); CTRL=$(cat "$STATE/ctrl" 2>/dev/null)
    [ -n "$DEV" ] && [ -b "$DEV" ] || fail "not connected (no namespace device)"
}

field() { awk -F' *: ' -v k="$1" '$1==k{sub(/ +$/,"",$2); print $2; exit}'; }

kh_id_ctrl() {
    need_dev
    t 30 nvme id-ctrl "/dev/$CTRL" >/tmp/idctrl.txt || fail "nvme id-ctrl failed"
    _mn=$(field mn </tmp/idctrl.txt); _sn=$(field sn </tmp/idctrl.txt)
    _fr=$(field fr </tmp/idctrl.txt); _sub=$(field subnqn </tmp/idctrl.txt)
    _ver=$(field ver </tmp/idctrl.txt); _cntlid=$(field cntlid </tmp/idctrl.txt)
    info "mn='$_mn' sn='$_sn' fr='$_fr' ver=$_ver cntlid=$_cntlid mdts=$(field mdts </tmp/idctrl.txt) sgls=$(field sgls </tmp/idctrl.txt)"
    [ -n "$_mn" ] || fail "empty model number"
    [ -n "$_sn" ] || fail "empty serial number"
    [ "$_sub" = "$NQN" ] || fail "subnqn '$_sub' != '$NQN'"
}

kh_id_ns() {
    need_dev
    t 30 nvme id-ns "$DEV" >/tmp/idns.txt || fail "nvme id-ns failed"
    _nsze=$(field nsze </tmp/idns.txt); _ncap=$(field ncap </tmp/idns.txt)
    _lbads=$(grep '(in use)' /tmp/idns.txt | sed -n 's/.*lbads:\([0-9]*\).*/\1/p')
    [ -n "$_nsze" ] && [ -n "$_lbads" ] || fail "cannot parse id-ns"
    _bytes=$(( _nsze * (1 << _lbads) ))
    _bd=$(blockdev --getsize64 "$DEV")
    info "nsze=$_nsze ncap=$_ncap lba=$((1 << _lbads)) => $_bytes bytes; blockdev=$_bd; expected=$NS_SIZE"
    [ "$_bytes" = "$NS_SIZE" ] || fail "namespace size $_bytes != $NS_SIZE"
    [ "$_bd" = "$NS_SIZE" ] || fail "block device size $_bd != $NS_SIZE"
    [ $((_ncap)) -le $((_nsze)) ] && [ $((_ncap)) -gt 0 ] || fail "ncap $_ncap out of range"
}

kh_dd_verify() { # kh_dd_verify TAG: 16 MiB at the start and 16 MiB at the end
    need_dev
    dd_verify "$DEV" 0 16 "$1-start"
    dd_verify "$DEV" $(( NS_SIZE / 1048576 - 16 )) 16 "$1-end"
}

kh_fio() {
    need_dev
    t $((FIO_RUNTIME + 60)) fio --name=randrw-verify --filename="$DEV" --ioengine=libaio \
        --direct=1 --rw=randrw --rwmixread=50 --bs=4k --iodepth=16 --size=128M \
        --time_based --runtime="$FIO_RUNTIME" --verify=crc32c --verify_fatal=1 \
        --verify_backlog=256 --do_verify=1 --serialize_overlap=1 --randrepeat=0 --output=/tmp/fio.txt
    _rc=$?
    cat /tmp/fio.txt
    [ $_rc = 0 ] || fail "fio rc=$_rc: $(grep -i -m1 -E 'verify|error|bad' /tmp/fio.txt)"
    grep -q 'err= 0' /tmp/fio.txt || fail "fio reported errors"
    info "fio: $(grep -E '^ *(read|write):' /tmp/fio.txt | sed 's/^ *//; s/,  *BW=/ BW=/; s/ (.*//' | tr '\n' ';')"
}

kh_ext4() {
    need_dev
    t 60 dd if=/dev/urandom of=/tmp/ext4-pat bs=1M count=8 2>/dev/null || fail "pattern"
    t 120 mkfs.ext4 -F -q "$DEV" || fail "mkfs.ext4"
    mkdir -p /mnt/t
    t 60 mount -t ext4 "$DEV" /mnt/t || fail "mount"
    cp /tmp/ext4-pat /mnt/t/pat && cp -a /lib/modules /mnt/t/modules && mkdir /mnt/t/d \
        && t 60 sync || { umount /mnt/t; fail "copy to ext4"; }
    t 60 umount /mnt/t || fail "umount"
    t 120 fsck.ext4 -fn "$DEV" || fail "fsck.ext4 -fn reported problems (rc=$?)"
    t 60 mount -t ext4 -o ro "$DEV" /mnt/t || fail "remount"
    cmp /tmp/ext4-pat /mnt/t/pat && diff -r /lib/modules /mnt/t/modules >/dev/null \
        || { umount /mnt/t; fail "ext4 content mismatch after remount"; }
    info "ext4: $(df -k /mnt/t | awk 'NR==2{print $3" KiB used of "$2}')"
    t 60 umount /mnt/t || fail "umount (ro)"
}

kh_hook_ping() { hook_call ping 30 hello || fail "control channel: ${HOOK_REPLY:-no reply}"; }

kh_queues() { # kh_queues N: expect N I/O queues
    need_dev
    _qc=$(cat "/sys/class/nvme/$CTRL/queue_count" 2>/dev/null)
    # the per-path disk (nvmeXcYnZ with native multipath) is a child of the ctrl
    _path=$(ls -d /sys/class/nvme/"$CTRL"/nvme*n* 2>/dev/null | head -n 1)
    _mq=$(ls "$_path/mq" 2>/dev/null | wc -l)
    info "queue_count(incl. admin)=$_qc blk-mq hw queues=$_mq ($_path)"
    [ "$_mq" = "$1" ] || fail "expected $1 I/O queues, blk-mq has $_mq"
}

kh_disconnect() {
    need_dev
    t 60 nvme disconnect -n "$NQN" >/tmp/disc-out.txt 2>&1; _rc=$?
    cat /tmp/disc-out.txt
    [ $_rc = 0 ] || fail "nvme disconnect rc=$_rc"
    grep -q 'disconnected [1-9]' /tmp/disc-out.txt || fail "disconnect: $(cat /tmp/disc-out.txt)"
    wait_no_ctrl "$NQN" 30 || fail "controller still present 30s after disconnect"
    rm -f "$STATE/dev" "$STATE/ctrl"
}

kh_final_clean() {
    [ -z "$(ctrls_for_nqn "$NQN")" ] || fail "controllers left: $(ctrls_for_nqn "$NQN")"
    if [ "$TARGET" = kernel-guest ]; then
        nvmet_teardown "$NQN"
        t 30 rmmod nvmet_tcp nvmet && info "nvmet modules unloaded" || info "nvmet modules still busy"
    fi
    info "nvme controllers left: $(ls /sys/class/nvme 2>/dev/null | wc -l)"
}

scenario_main() {
    info "scenario: TARGET=$TARGET addr=$NVME_ADDR:$NVME_PORT nqn=$NQN size=$NS_SIZE"
    run_step modules 60 kh_modules
    if [ "$TARGET" = kernel-guest ]; then
        run_step target-setup 60 kh_target_setup
    else
        run_step net 30 kh_net
    fi
    run_step discover 40 kh_discover
    # connect with defaults, then the full data path
    run_step connect 90 kh_connect
    run_step id-ctrl 40 kh_id_ctrl
    run_step id-ns 40 kh_id_ns
    run_step dd-verify 180 kh_dd_verify plain
    run_step fio-verify $((FIO_RUNTIME + 90)) kh_fio
    run_step ext4 300 kh_ext4
    run_step control-hook 40 kh_hook_ping
    run_step disconnect 60 kh_disconnect
    # header + data digests
    run_step connect-digest 90 kh_connect -g -G
    run_step dd-verify-digest 180 kh_dd_verify digest
    run_step disconnect-digest 60 kh_disconnect
    # two I/O queues
    run_step connect-2q 90 kh_connect -i 2
    run_step queues-2q 20 kh_queues 2
    run_step dd-verify-2q 180 kh_dd_verify 2q
    run_step disconnect-2q 60 kh_disconnect
    # PLACEHOLDERS (see the header): ns-add-aen, ns-resize-aen,
    # target-restart, keep-alive, auth/TLS.  E.g.:
    #   run_step connect-restart 90 kh_connect --ctrl-loss-tmo=60 --reconnect-delay=1
    #   run_step target-restart 180 kh_target_restart   # uses hook_call restart-target
    #   run_step disconnect-restart 60 kh_disconnect
    run_step final-clean 60 kh_final_clean
}
