# Scenario kernel-host: the Linux NVMe/TCP host (nvme-tcp + nvme-cli) in the
# guest against an NVMe/TCP target.
#
# Parameters (from /scenario.env or it_KEY=VALUE on the kernel cmdline):
#   TARGET      host          : target runs on the host (our nvmeof-target),
#                               reached at NVME_ADDR:NVME_PORT through QEMU
#                               guestfwd (default 10.0.2.100:4420)
#               kernel-guest  : Linux nvmet inside this same guest on
#                               127.0.0.1:4420 (validates the harness itself)
#   NVME_ADDR, NVME_PORT, NQN, NS_SIZE (bytes), FIO_RUNTIME (s), BACKEND,
#   NS2_SIZE, NS_GROW (bytes), RESTART_DOWN_S, DISCONNECT_MAX_MS, NS1_UUID, RESV_FORMAT
#   (TARGET=host: the UUID our target is configured with for namespace 1),
#   KH_RECONF (1; 0 leaves out connect-reconf ... disconnect-reconf),
#   KH_CONTROL (1; 0 leaves out the steps whose subject no I/O engine
#   touches: ram-digest, keep-alive, discovery-aen, allowed-hosts,
#   ns-masking, queue-limit, port-link, qos, auth: run.sh passes 0 to the
#   engine variants kernel-host-direct and -threads, which repeat the rest),
#   KH_PORT_LIVE (0; 1 runs port-live: run.sh passes 1 to kernel-host)
#
# Step list.  To add a step: write a kh_<name> function below and add a
# run_step line to scenario_main.  A step that needs the host to act calls
# `hook_call NAME TIMEOUT [ARGS]` and run.sh's hook_<NAME> runs on the host.
#
# Reconfiguration while connected (connect-reconf: --reconnect-delay=1
# --ctrl-loss-tmo=60), TARGET=host through run.sh hooks, TARGET=kernel-guest
# through configfs here:
#   - ns-add-aen:     hook "add-namespace 2 NS2_SIZE" (our target: file
#                     namespace added to its config + SIGHUP; nvmet: mkdir
#                     namespaces/2) -> the Namespace Attribute Changed AEN
#                     makes the kernel rescan: the block device of nsid 2
#                     appears (bounded wait), right size, dd verify on it.
#   - ns-resize-aen:  hook "resize-namespace 1 SIZE+NS_GROW" (config + SIGHUP;
#                     nvmet: truncate + revalidate_size) -> the sysfs size of
#                     namespace 1 grows; data before the old end survives,
#                     the new end is writable.
#   - ns-revalidate:  hook "grow-file 2 SIZE+NS_GROW" (truncate only, no
#                     SIGHUP; nvmet: truncate only) + `nvme ns-rescan` -> the
#                     Identify Namespace the rescan sends reports the file's
#                     new size (nvmet_ns_revalidate): namespace 2 grows.
#   - target-restart: data written, a writer running, hook "restart-target"
#                     (SIGTERM, RESTART_DOWN_S s down, same config and port;
#                     nvmet: port removed and re-created) -> the controller
#                     reconnects (dmesg "Successfully reconnected"), the writer
#                     finishes, everything written reads back, new I/O works,
#                     namespace 2 is still there with its data; a
#                     registration made with CPTPL 11b (our target: a
#                     reservations_file) is still there (PTPLS 1).
#
# Controller reset under I/O:
#   - reset-under-io: fio writes and verifies (libaio, QD16, 4-128 KiB) while
#                     `nvme reset` runs twice: the host stops the I/O queues
#                     (requeueing their requests), clears CC.EN, closes the
#                     admin queue and connects a new association; each time
#                     the controller is live again, fio ends without an I/O
#                     or verify error, and (our target) final-clean finds
#                     every old controller removed.
#
# Namespace write protection (Set Features 84h):
#   - write-protect:  nvme set-feature -f 0x84 -v 1 on namespace 1 -> the
#                     Namespace Attribute Changed notice makes the host
#                     rescan and mark the block device read-only (NSATTR bit
#                     0; bounded wait); get-feature says 1; a write sent past
#                     the host's read-only flag (io-passthru on the generic
#                     char device) fails with Namespace is Write Protected
#                     (0x20); reads work; -v 0 -> writable again, dd verify.
#
#   - read-only-ns:   (our target) hook "add-subsystem NQN-ro ro" (a 16 MiB
#                     file of random bytes exported with read_only = true):
#                     the block device is read-only as soon as it appears, its
#                     16 MiB read back have the file's md5, a dd write is
#                     refused by the host, a write past it (io-passthru) by
#                     the target with 0x20, and set-feature 0x84 = 0 fails
#                     (Feature Not Changeable); remove-subsystem.
#   - block-ns:       (our target) hook "add-subsystem NQN-blk block" (a 64 MiB
#                     loop device of the host, exported as a block namespace
#                     with the scenario's engine): the target holds it
#                     exclusively (an O_EXCL open on the host fails EBUSY);
#                     8 MiB written and read back with O_DIRECT, and the loop
#                     device itself holds them (hook block-md5); mkfs.ext4,
#                     a file, fsck clean, read back; remove-subsystem and
#                     the device is released.
#   - lbs-4k:         (our target) hook "add-subsystem NQN-4k lbs4k" (a 32 MiB
#                     file namespace with block_size = 4096): 4096-byte
#                     sectors and lbads 12, dd verify, blkdiscard reads
#                     zeroes, mkfs.ext4, a file, fsck clean, read back.
#
# Reservations (our target; nvmet 6.12 has none):
#   - reservations:   namespace 1 has `reservations = true` and a
#                     reservations_file: ONCS bit 5, RESCAP 0xff; nvme resv-register, resv-report --eds
#                     (one registrant, key a1), resv-acquire Write Exclusive
#                     -> hook "resv-write conflict" (another host ID writing
#                     through the nvmeof CLI is refused with Reservation
#                     Conflict) while dd verify through the holder works; a
#                     release with a wrong key is refused; release -> hook
#                     "resv-write ok"; unregister (no registrant, generation
#                     moved). Then Write Exclusive - Registrants Only taken
#                     again, and another host (hook "resv-cli": the nvmeof
#                     CLI) registers and preempts it with Preempt and Abort
#                     while this host writes (the writer stops with an
#                     error within 60 s, no hang): the Reservation Log
#                     Page Available event (uevent NVME_AEN=0x800006), log
#                     80h says registration preempted on namespace 1, the
#                     report shows the other host holding Write Exclusive,
#                     and this host's write fails; the other host clears.
#   - pr-ioctl:       the same through the block layer's IOC_PR_* ioctls
#                     (/guest/bin/pr-ioctl, run.sh copies it in), which the
#                     kernel's NVMe pr_ops turn into Reservation commands:
#                     register (PTPLS 1: pr_ops send CPTPL 11b), reserve,
#                     a wrong key (PR_STS_RESERVATION_CONFLICT), replace with
#                     PR_FL_IGNORE_KEY, release, preempt and abort of another
#                     host's reservation, clear.
#
# Keep-alive and discovery:
#   - keep-alive:     connect with KATO 2 s (-k 2), stay idle 7 s: the
#                     controller stays live with no error recovery (the
#                     host's Keep Alives reset the target's timer), then I/O.
#   - ram-digest:     (our target) hook "add-subsystem NQN-ram" (a 16 MiB RAM
#                     namespace), connect with header and data digests, 8 MiB
#                     written and read back 5 times (128 KiB and 4 KiB reads,
#                     an overwrite across a chunk boundary): data equal, no
#                     "digest error" in the host's log; remove-subsystem.
#   - discovery-aen:  a persistent discovery controller (nvme discover -p
#                     -k 2) stays live while idle; hook "add-subsystem NQN2"
#                     (our target: config + SIGHUP; nvmet: configfs link to
#                     the port) -> the Discovery Log Change notice reaches the
#                     host (a uevent with NVME_AEN=0x70f002 on the discovery
#                     controller, seen by busybox `uevent`), the log lists
#                     NQN2; "remove-subsystem NQN2" -> a second notice (the
#                     host re-armed its AER), NQN2 gone from the log.
#
# ANA multipath:
#   - ana-multipath:  a second path to the subsystem (our target: its second
#                     port, NVME_ADDR2; nvmet: port 2 on 127.0.0.1:4421): one
#                     block device, two controllers, both paths optimized
#                     (sysfs ana_state, from the ANA log). Hook "ana-state
#                     optimized inaccessible" (config + SIGHUP; nvmet:
#                     ports/N/ana_groups/1/ana_state) -> the ANA Change notice
#                     makes the host re-read the log: path 2 inaccessible,
#                     dd verify through path 1 only (per-path I/O counts),
#                     a read passed through path 2 anyway refused with
#                     0x302 and in its error log at NSID;
#                     then the other way round, `nvme ana-log` on each
#                     controller agreeing; both optimized again, path 2 gone.
#   - port-live:      (kernel-host only, KH_PORT_LIVE) path 2 again, with
#                     ctrl-loss-tmo 60 s; port 2 removed live (ours: hook
#                     "port2 off", its [[port]] left out + SIGHUP; nvmet:
#                     ports/2 unlinked and removed) -> path 2's controller
#                     is deleted and keeps reconnecting (state connecting),
#                     path 1 live, dd verify through it; port 2 back (hook
#                     "port2 on"; nvmet: made again) -> path 2 live and
#                     optimized within 20 s, dd verify; path 2 gone.
#
# Two targets, one subsystem (our target only):
#   - twin-target:    hook "start-twin": a second nvmeof-target process
#                     exporting NQN's namespace 1 (the same file, the same
#                     configured uuid, controller IDs from 1000; the first
#                     has cntlid_max 999) at NVME_ADDR3. Connected through
#                     both, the host joins them: one block device, two
#                     controllers with cntlids on each side of 1000, no
#                     "Duplicate cntlid" or duplicate-identifier complaint;
#                     iopolicy round-robin, dd verify with I/O through both
#                     processes; disconnect, hook "stop-twin" (no error
#                     logged).
#
# Port links (nvmet's ports/N/subsystems):
#   - port-link:      subsystem NQN-ports on port 2 only (our target: hook
#                     "add-subsystem NQN-ports ports 2", its `ports`; nvmet:
#                     linked to ports/2 only): nvme discover lists it under
#                     PORTID 2 only (through port 1 nvmet omits it, ours
#                     names port 2; with hook "discovery-filter
#                     address,svcid" ours lists the asking port only, as
#                     nvmet: nothing of it through port 1, every PORTID 1);
#                     connect through port 1 refused, no
#                     controller left; through port 2 dd verify; moved to
#                     port 1 (hook "subsystem-ports NQN-ports 1"; nvmet: link
#                     to port 1, unlink from port 2) -> the controller through
#                     port 2 deleted, its reconnect refused, gone within 20 s;
#                     the log lists it under port 1; connect there, dd verify.
#
# Per-subsystem I/O queue limit (nvmet's attr_qid_max):
#   - queue-limit:    subsystem NQN-qmax with max_io_queues = 1 (our target:
#                     hook "add-subsystem NQN-qmax qmax 1"; nvmet: attr_qid_max):
#                     connect -i 2 -> 1 I/O queue (queue_count, blk-mq);
#                     limit 2 (hook "max-io-queues"; nvmet: attr_qid_max) ->
#                     the controller is deleted and the host reconnects
#                     with 2 I/O queues, data written before intact, dd
#                     verify; the subsystem taken off (remove-subsystem;
#                     nvmet: port unlink) while connected -> the controller
#                     is gone within 20 s (the reconnect is refused with DNR).
#
# Per-namespace rate limits (ours only: nvmet has none, kernel-guest: left out):
#   - qos:            subsystem NQN-qos whose namespace has qos_iops = 200
#                     (hook "add-subsystem NQN-qos qos 200"): fio 4 KiB
#                     randread at QD16 for 4 s gets at most 230 and at least
#                     100 IOPS without an error, and the controller stays
#                     live (no I/O timeout, no reset).
#
# Zoned namespaces (ours only: nvmet exports zoned block devices alone,
# kernel-guest: left out):
#   - zoned:          subsystem NQN-zoned whose namespace is zoned, 4 zones of
#                     4 MiB, at most 2 open and 3 active (hook "add-subsystem
#                     NQN-zoned zoned"): the host shows a host-managed zoned
#                     block device (queue/zoned, nr_zones 4, chunk_sectors
#                     8192, max_open_zones 2, max_active_zones 3), writable
#                     (the zoned effects log has Zone Append); fio
#                     --zonemode=zbd writes zones 0-1 and verifies them; a
#                     write to a full zone fails; through nvme-cli's zns
#                     commands (no block layer): two Zone Appends to zone 2
#                     land at its start and 8 blocks on, a Write at the
#                     zone's start is refused with Zone Invalid Write, the
#                     appended data reads back, Reset Zone sends the next
#                     append to the start again, report-zones lists 4 zones.
#
# In-band authentication (DH-HMAC-CHAP):
#   - auth:           keys from `nvme gen-dhchap-key` (host key with the
#                     SHA-256 transform, a 48-byte controller key with the
#                     SHA-384 one); hook "add-subsystem NQN-auth auth HOSTNQN
#                     KEY CTRLKEY ffdhe2048" (nvmet: hosts/HOSTNQN/dhchap_*
#                     and allowed_hosts): a connect without a secret, with a
#                     wrong one, and asking a wrong controller secret all
#                     fail and leave no controller; the right secret connects
#                     (I/O verified), re-authenticates on demand (sysfs
#                     dhchap_secret) and stays live; host + controller secrets
#                     connect (bidirectional, ffdhe2048); our target's log
#                     shows each way with the group.
#
# Access control while running:
#   - allowed-hosts:  a subsystem NQN-acl open to another host NQN only
#                     (hook "add-subsystem NQN-acl acl OTHER"; nvmet:
#                     attr_allow_any_host 0, hosts/OTHER linked): not in this
#                     host's discovery log, nvme connect refused, no
#                     controller left. Hook "allow-hosts NQN-acl HOSTNQN"
#                     (config + SIGHUP; nvmet: allowed_hosts links) -> listed,
#                     connects, dd verify. "allow-hosts NQN-acl OTHER" ->
#                     gone from the log, but the connected controller stays
#                     live and does I/O (nvmet checks the host only for a new
#                     association); after a disconnect, connect refused.
#                     "allow-hosts NQN-acl any" -> connects again.
#   - ns-masking:     a subsystem NQN-mask open to every host whose
#                     namespace 2 only another host NQN sees (hook
#                     "add-subsystem NQN-mask mask OTHER"; config `hosts`, as
#                     SPDK's no_auto_visible namespaces; nvmet has none, so
#                     TARGET=kernel-guest skips it): this host connects and
#                     gets namespace 1 only (nvme list-ns, no block device
#                     for 2). Hook "ns-hosts NQN-mask HOSTNQN" -> namespace 2
#                     appears (the Namespace Attribute Changed notice, no
#                     reconnect), dd verify; "ns-hosts NQN-mask none" -> it
#                     goes, namespace 1 keeps doing I/O.
#
# PLACEHOLDERS (not implemented yet):
#   - TLS:               nvme connect --tls when supported.

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
: "${NS2_SIZE:=67108864}"
: "${NS_GROW:=67108864}"
: "${RESTART_DOWN_S:=2}"
# namespace 1's reservations file format (run.sh: kernel-host-threads "spdk")
: "${RESV_FORMAT:=nvmeof}"
: "${DISCONNECT_MAX_MS:=10000}"
export TARGET NQN NS_SIZE FIO_RUNTIME BACKEND NVME_ADDR NVME_PORT NS2_SIZE NS_GROW RESTART_DOWN_S DISCONNECT_MAX_MS RESV_FORMAT

kh_modules() {
    load_mod nvme_tcp crc32c_generic ext4 || fail "module load"
    grep -q sse4_2 /proc/cpuinfo && modprobe crc32c_intel 2>/dev/null
    info "loaded: $(lsmod | awk 'NR>1{print $1}' | sort | tr '\n' ' ')"
}

kh_net() { net_up || fail "network setup"; info "$(ip -4 addr show eth0 | awk '/inet /{print $2}')"; }

kh_target_setup() { nvmet_setup "$BACKEND" 127.0.0.1 "$NVME_PORT" "$NQN" "$NS_SIZE"; }

# the unique discovery NQN run.sh gives our target (discovery_nqn)
KH_DISC_NQN=nqn.2014-08.io.nvmeof.interop:discovery

kh_discover() {
    t 30 nvme discover -t tcp -a "$NVME_ADDR" -s "$NVME_PORT" >/tmp/disc.txt 2>&1
    _rc=$?
    cat /tmp/disc.txt
    [ $_rc = 0 ] || fail "nvme discover rc=$_rc: $(tail -n 1 /tmp/disc.txt)"
    grep -q "subnqn: *$NQN\$" /tmp/disc.txt || fail "discovery log lacks $NQN"
    info "discovery log: $(grep -c '^=====Discovery Log Entry' /tmp/disc.txt) entries, $NQN listed"
    # Our target's configuration refers hosts to port 2's discovery service
    # (run.sh write_target_config); nvme-cli decodes the entry.
    if [ "$TARGET" != kernel-guest ]; then
        _ref=$(grep -A7 '^subtype: *discovery subsystem referral$' /tmp/disc.txt)
        { echo "$_ref" | grep -q '^traddr: *10\.0\.2\.101$' && echo "$_ref" | grep -q '^trsvcid: *4420$' \
            && echo "$_ref" | grep -q '^portid: *2$' \
            && echo "$_ref" | grep -q '^subnqn: *nqn\.2014-08\.org\.nvmexpress\.discovery$'; } \
            || fail "discovery log lacks the referral to 10.0.2.101:4420 (portid 2): $_ref"
        info "referral listed: $(echo "$_ref" | grep -E '^(traddr|trsvcid|portid|treq):' | tr -s ' ' | tr '\n' ' ')"
        # The target's unique discovery NQN (run.sh write_target_config): its
        # own entry names it, and nvme-cli reads the same log through it.
        _own=$(grep -A7 '^subtype: *current discovery subsystem$' /tmp/disc.txt | sed -n 's/^subnqn: *//p' | sort -u)
        [ "$_own" = "$KH_DISC_NQN" ] || fail "current discovery subsystem entries name '$_own', not $KH_DISC_NQN"
        t 30 nvme discover -t tcp -a "$NVME_ADDR" -s "$NVME_PORT" --nqn "$KH_DISC_NQN" >/tmp/disc-u.txt 2>&1
        _rc=$?
        [ $_rc = 0 ] || fail "nvme discover --nqn $KH_DISC_NQN rc=$_rc: $(tail -n 1 /tmp/disc-u.txt)"
        _e1=$(grep -E '^(subtype|traddr|trsvcid|subnqn|portid):' /tmp/disc.txt)
        _e2=$(grep -E '^(subtype|traddr|trsvcid|subnqn|portid):' /tmp/disc-u.txt)
        [ "$_e1" = "$_e2" ] || fail "the log through $KH_DISC_NQN differs: $(echo "$_e2" | tr '\n' ' ')"
        info "unique discovery NQN $KH_DISC_NQN: own entry names it; nvme discover --nqn reads the same $(grep -c '^=====Discovery Log Entry' /tmp/disc-u.txt) entries"
    fi
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
    info "mn='$_mn' sn='$_sn' fr='$_fr' ieee=$(field ieee </tmp/idctrl.txt) ver=$_ver cntlid=$_cntlid mdts=$(field mdts </tmp/idctrl.txt) sgls=$(field sgls </tmp/idctrl.txt)"
    [ -n "$_mn" ] || fail "empty model number"
    [ -n "$_sn" ] || fail "empty serial number"
    # configured: our target's `serial`, nvmet's attr_serial
    [ "$_sn" = interop0001 ] || fail "serial '$_sn', want the configured interop0001"
    # configured: our target's `ieee_oui`, nvmet's attr_ieee_oui (stored low byte first)
    _ieee=$(field ieee </tmp/idctrl.txt)
    [ "$_ieee" = 12ab34 ] || fail "ieee '$_ieee', want the configured OUI 12ab34"
    # FUSES bit 0 (Compare and Write): ours reports it, as SPDK; nvmet does
    # not (nvmet_req_init refuses every fused command).
    _fuses=$(field fuses </tmp/idctrl.txt)
    if [ "$TARGET" = kernel-guest ]; then _want=0; else _want=0x1; fi
    [ "$_fuses" = "$_want" ] || fail "fuses '$_fuses', want $_want"
    [ "$_sub" = "$NQN" ] || fail "subnqn '$_sub' != '$NQN'"
}

# jnum KEY: the first number given to "KEY" in the JSON on stdin (nvme-cli
# prints 128-bit counters as strings: "num_err_log_entries":"1").
jnum() { grep -o "\"$1\" *: *\"\{0,1\}[0-9]*" | head -n 1 | sed 's/.*: *"\{0,1\}//'; }

# kh_error_log: a command the target refuses (admin opcode C4h) is the newest
# entry of the controller's Error Information log as `nvme error-log` reads
# it (its status, the opcode byte at fault, the admin queue), and the SMART
# log counts it (nvmet keeps the log the same way).
kh_error_log() {
    need_dev
    t 30 nvme admin-passthru "/dev/$CTRL" --opcode=0xc4 >/tmp/el.txt 2>&1 && fail "admin opcode C4h succeeded"
    grep -qi 'invalid.*opcode' /tmp/el.txt || fail "admin opcode C4h refused with: $(cat /tmp/el.txt)"
    t 30 nvme error-log "/dev/$CTRL" -e 1 -o json >/tmp/el.json 2>&1 || fail "nvme error-log: $(cat /tmp/el.json)"
    _count=$(jnum error_count </tmp/el.json); _status=$(jnum status_field </tmp/el.json)
    _sqid=$(jnum sqid </tmp/el.json); _pel=$(jnum parm_error_location </tmp/el.json)
    info "newest error log entry: error_count=$_count sqid=$_sqid status_field=$_status parm_error_location=$_pel"
    [ -n "$_count" ] && [ "$_count" -ge 1 ] || fail "no error log entry: $(cat /tmp/el.json)"
    # status_field as nvme-cli prints it (without the phase tag): DNR | Invalid Opcode.
    [ "$_status" = $((0x4001)) ] || fail "newest entry's status $_status, want $((0x4001)) (Invalid Opcode, DNR)"
    [ "$_sqid" = 0 ] && [ "$_pel" = 0 ] || fail "newest entry: sqid $_sqid, parameter error location $_pel; want 0, 0"
    t 30 nvme smart-log "/dev/$CTRL" -o json >/tmp/el.json 2>&1 || fail "nvme smart-log: $(cat /tmp/el.json)"
    _smart=$(jnum num_err_log_entries </tmp/el.json)
    [ "$_smart" = "$_count" ] || fail "SMART counts '$_smart' errors, the error log $_count: $(grep err_log /tmp/el.json)"
    rm -f /tmp/el.txt /tmp/el.json
}

# kh_smart_io: after dd-verify's 32 MiB written and read back, the SMART log
# counts at least that much (data units: thousands of 512 bytes) and at least
# 32 commands each way (1 MiB each at most). nvmet takes these counters from
# a block device and reports zeros for its file namespaces: there the step
# only prints them.
kh_smart_io() {
    need_dev
    t 30 nvme smart-log "/dev/$CTRL" -o json >/tmp/sm.json 2>&1 || fail "nvme smart-log: $(cat /tmp/sm.json)"
    _w=$(jnum data_units_written </tmp/sm.json); _r=$(jnum data_units_read </tmp/sm.json)
    _hw=$(jnum host_write_commands </tmp/sm.json); _hr=$(jnum host_read_commands </tmp/sm.json)
    rm -f /tmp/sm.json
    info "SMART: data units written $_w, read $_r; host write commands $_hw, read commands $_hr"
    [ "$TARGET" = kernel-guest ] && return 0
    [ "${_w:-0}" -ge 66 ] && [ "${_r:-0}" -ge 66 ] && [ "${_hw:-0}" -ge 32 ] && [ "${_hr:-0}" -ge 32 ] \
        || fail "SMART counts less than dd-verify's 32 MiB written and read back"
}

# kh_metrics: our target's Prometheus metrics (run.sh's [metrics] listen;
# hooks metrics-ns and metrics-ctrl read them on the host) count what this
# host does: 4 MiB read and written back unchanged with O_DIRECT at 44 MiB add
# exactly 4 MiB to namespace 1's write bytes (no other writer: reads of udev
# and the like only add reads) in at least 4 commands, and at least as much
# to its reads; this host's controller (its host NQN) shows the I/O queues
# blk-mq has and the address the target saw the connection come from (QEMU's
# forward on the host's loopback). nvmet has no such endpoint.
kh_metrics() {
    need_dev
    if [ "$TARGET" = kernel-guest ]; then
        info "nvmet: no metrics endpoint (step checks our target only)"
        return 0
    fi
    mval() { echo "$1" | sed -n "s/.* $2=\([0-9]*\).*/\1/p"; }
    hook_call metrics-ns 30 1 >/dev/null || fail "metrics-ns: ${HOOK_REPLY:-no reply}"
    _m0=$HOOK_REPLY
    t 60 dd if="$DEV" of=/tmp/mx bs=1M count=4 skip=44 iflag=direct 2>/dev/null || fail "dd read 4 MiB at 44 MiB"
    t 60 dd if=/tmp/mx of="$DEV" bs=1M count=4 seek=44 oflag=direct conv=notrunc 2>/dev/null \
        || fail "dd write 4 MiB at 44 MiB"
    rm -f /tmp/mx
    hook_call metrics-ns 30 1 >/dev/null || fail "metrics-ns: ${HOOK_REPLY:-no reply}"
    _m1=$HOOK_REPLY
    for _k in read_commands read_bytes write_commands write_bytes; do
        _a=$(mval "$_m0" $_k); _b=$(mval "$_m1" $_k)
        [ -n "$_a" ] && [ -n "$_b" ] || fail "no $_k in '$_m0' / '$_m1'"
        eval "_d_$_k=$((_b - _a))"
    done
    [ "$_d_write_bytes" = $((4 << 20)) ] || fail "write bytes moved by $_d_write_bytes, not 4 MiB ($_m0 -> $_m1)"
    [ "$_d_write_commands" -ge 4 ] && [ "$_d_write_commands" -le 1024 ] \
        || fail "write commands moved by $_d_write_commands for 4 MiB"
    [ "$_d_read_bytes" -ge $((4 << 20)) ] && [ "$_d_read_commands" -ge 4 ] \
        || fail "reads moved by $_d_read_commands commands, $_d_read_bytes bytes: less than dd's 4 MiB"
    _hn=$(cat "/sys/class/nvme/$CTRL/hostnqn")
    hook_call metrics-ctrl 30 "$_hn" >/dev/null || fail "metrics-ctrl: ${HOOK_REPLY:-no reply}"
    _path=$(ls -d /sys/class/nvme/"$CTRL"/nvme*n* 2>/dev/null | head -n 1)
    _mq=$(ls "$_path/mq" 2>/dev/null | wc -l)
    case $HOOK_REPLY in
        *" controllers=1 io_queues=$_mq host_traddr=127.0.0.1 portid=1 "*) ;;
        *) fail "metrics of this host's controller: '$HOOK_REPLY' (want 1 controller with $_mq I/O queues from 127.0.0.1 through port 1)" ;;
    esac
    _conns=$(mval "$HOOK_REPLY" connections)
    [ "${_conns:-0}" -gt "$_mq" ] || fail "$_conns connections open, fewer than the admin and $_mq I/O queues"
    _p1=$(mval "$HOOK_REPLY" port1_connections)
    [ "${_p1:-0}" -gt "$_mq" ] && [ "$_p1" -le "$_conns" ] \
        || fail "$_p1 connections through port 1 (want the admin and $_mq I/O queues at least, at most all $_conns)"
    info "+$_d_write_commands write commands, +$_d_write_bytes bytes for dd's 4 MiB; +$_d_read_commands reads, +$_d_read_bytes bytes; ${HOOK_REPLY#HOOKACK metrics-ctrl 0 }"
}

# kh_copy: Copy (NVM OPC 19h) as `nvme copy` sends it through the kernel's
# passthrough ioctl: the second and first 32 KiB of 64 KiB written at 48 MiB
# gathered to 49 MiB, read back with O_DIRECT, the block after it untouched;
# Identify shows ONCS bit 8 and the limits. nvmet has no Copy: against it the
# step checks that the command is refused.
kh_copy() {
    need_dev
    _bs=$(blockdev --getss "$DEV")
    _s=$(((48 << 20) / _bs)); _n=$((32768 / _bs)); _d=$(((49 << 20) / _bs))
    head -c 65536 /dev/urandom >/tmp/cp.src
    t 30 dd if=/tmp/cp.src of="$DEV" bs=65536 seek=$((48 * 16)) oflag=direct status=none || fail "dd write of the source"
    t 30 dd if=/dev/zero of="$DEV" bs=65536 seek=$((49 * 16)) count=2 oflag=direct status=none || fail "dd zeroing the destination"
    # --blocks is NLB, 0's based
    t 30 nvme copy "$DEV" --sdlba=$_d --slbs=$((_s + _n)),$_s --blocks=$((_n - 1)),$((_n - 1)) >/tmp/cp.out 2>&1
    _rc=$?
    if [ "$TARGET" = kernel-guest ]; then
        [ "$_rc" != 0 ] || fail "nvmet ran a Copy: $(cat /tmp/cp.out)"
        info "nvmet refuses Copy (rc $_rc): $(head -c 200 /tmp/cp.out)"
        rm -f /tmp/cp.src /tmp/cp.out
        return 0
    fi
    [ "$_rc" = 0 ] || fail "nvme copy failed (rc $_rc): $(cat /tmp/cp.out)"
    t 30 dd if="$DEV" of=/tmp/cp.dst bs=65536 skip=$((49 * 16)) count=2 iflag=direct status=none || fail "dd read of the destination"
    { tail -c 32768 /tmp/cp.src; head -c 32768 /tmp/cp.src; } | cmp -n 65536 - /tmp/cp.dst || fail "the destination differs from the gathered source ranges"
    [ "$(tail -c 65536 /tmp/cp.dst | tr -d '\000' | wc -c)" = 0 ] || fail "the Copy wrote past its destination"
    _oncs=$(t 30 nvme id-ctrl "/dev/$CTRL" | field oncs)
    [ $((_oncs & 0x100)) != 0 ] || fail "id-ctrl oncs $_oncs lacks Copy (bit 8)"
    t 30 nvme id-ns "$DEV" >/tmp/cp.idns || fail "nvme id-ns"
    _mssrl=$(field mssrl </tmp/cp.idns); _mcl=$(field mcl </tmp/cp.idns); _msrc=$(field msrc </tmp/cp.idns)
    [ "${_mssrl:-0}" -gt 0 ] && [ "${_mcl:-0}" -ge "${_mssrl:-0}" ] || fail "id-ns copy limits: mssrl '$_mssrl' mcl '$_mcl'"
    info "copy: 2 ranges of $_n blocks gathered and read back; oncs $_oncs, mssrl $_mssrl, mcl $_mcl, msrc $_msrc"
    rm -f /tmp/cp.src /tmp/cp.dst /tmp/cp.out /tmp/cp.idns
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
    _sys=/sys/block/${DEV#/dev/}
    info "identifiers: uuid $(cat "$_sys/uuid" 2>/dev/null) nguid $(cat "$_sys/nguid" 2>/dev/null) eui $(cat "$_sys/eui" 2>/dev/null)"
    # our target: namespace 1 has a configured UUID (run.sh NS1_UUID)
    if [ -n "${NS1_UUID:-}" ]; then
        [ "$(cat "$_sys/uuid")" = "$NS1_UUID" ] || fail "uuid $(cat "$_sys/uuid"), configured $NS1_UUID"
    fi
}

kh_dd_verify() { # kh_dd_verify TAG: 16 MiB at the start and 16 MiB at the end
    need_dev
    dd_verify "$DEV" 0 16 "$1-start"
    dd_verify "$DEV" $(( NS_SIZE / 1048576 - 16 )) 16 "$1-end"
}

# zeros_at DEV OFFSET_MIB COUNT_MIB: the range reads back as zeroes (O_DIRECT)
# nuse_matches NUSE_BYTES FILE_BYTES: within 64 KiB of each other (a
# filesystem's own blocks may count in the file's allocation)
nuse_matches() {
    _df=$(( $1 - $2 )); [ $_df -ge 0 ] || _df=$(( -_df ))
    [ $_df -le $((64 << 10)) ] || fail "NUSE says $1 bytes where the file holds $2"
}
# nuse_bytes: namespace 1's utilization (Identify Namespace NUSE) in bytes
nuse_bytes() {
    _nu=$(t 30 nvme id-ns "$DEV" 2>/dev/null | field nuse)
    [ -n "$_nu" ] || { echo "no nuse in id-ns"; return 1; }
    echo $(( _nu * $(blockdev --getss "$DEV") ))
}
zeros_at() {
    t 60 dd if="$1" of=/tmp/zr bs=1M count="$3" skip="$2" iflag=direct 2>/dev/null || fail "dd read ${3}MiB at ${2}MiB"
    t 30 dd if=/dev/zero of=/tmp/zz bs=1M count="$3" 2>/dev/null
    cmp -s /tmp/zr /tmp/zz; _z=$?
    rm -f /tmp/zr /tmp/zz
    return $_z
}

# ns1_usage: bytes the file behind namespace 1 has allocated (our target:
# hook ns-usage; kernel-guest: nvmet's /srv/ns1.img)
ns1_usage() {
    if [ "$TARGET" = kernel-guest ]; then
        [ -f /srv/ns1.img ] || return 1
        echo $(( $(stat -c %b /srv/ns1.img) * $(stat -c %B /srv/ns1.img) ))
    else
        hook_call ns-usage 30 1 >/dev/null || return 1
        echo "$HOOK_REPLY" | sed -n 's/.*allocated=\([0-9]*\).*/\1/p'
    fi
}

kh_discard() {
    need_dev
    _q=/sys/block/${DEV#/dev/}/queue
    _max=$(cat "$_q/discard_max_bytes")
    [ "${_max:-0}" -gt 0 ] || fail "the host sees no discard support (discard_max_bytes $_max): ONCS DSM not taken"
    _dlfeat=$(t 30 nvme id-ns "$DEV" 2>/dev/null | field dlfeat)
    # Ours: deallocated blocks read as zeroes, Write Zeroes deallocates (nvmet 6.12: 0)
    [ "$TARGET" = kernel-guest ] || [ "$_dlfeat" = 9 ] || fail "dlfeat $_dlfeat, want 9"
    dd_verify "$DEV" 32 8 pre-discard
    _u0=$(ns1_usage) || fail "namespace 1's allocation: ${HOOK_REPLY:-no file}"
    _n0=$(nuse_bytes) || fail "$_n0"
    # Two ranges in one call are sent as separate requests, possibly merged
    # into one DSM with several ranges (max_discard_segments)
    t 60 blkdiscard -o $((32 << 20)) -l $((4 << 20)) "$DEV" || fail "blkdiscard 4 MiB at 32 MiB"
    t 60 blkdiscard -o $((36 << 20)) -l $((4 << 20)) "$DEV" || fail "blkdiscard 4 MiB at 36 MiB"
    zeros_at "$DEV" 32 8 || fail "8 MiB at 32 MiB not zero after blkdiscard"
    _u1=$(ns1_usage) || fail "namespace 1's allocation after the discard"
    # 8 MiB less, but for up to 64 KiB of extent-tree blocks a punched hole
    # can cost the filesystem (st_blocks counts them; a clean-clone CI saw
    # 8 MiB - 4 KiB once)
    [ $((_u0 - _u1)) -ge $(((8 << 20) - (64 << 10))) ] || fail "the file's allocation went from $_u0 to $_u1 bytes: the discard punched no 8 MiB hole"
    _n1=$(nuse_bytes) || fail "$_n1"
    if [ "$TARGET" = kernel-guest ]; then
        info "nvmet: NUSE $_n0 -> $_n1 bytes (it reports the size: no thin provisioning)"
    else
        # Ours: thin provisioned (NSFEAT bit 0), NUSE is the file's allocation
        _f=$(t 30 nvme id-ns "$DEV" 2>/dev/null | field nsfeat)
        [ $(( ${_f:-0} & 1 )) = 1 ] || fail "nsfeat $_f: THINP (bit 0) not set"
        nuse_matches "$_n0" "$_u0"
        nuse_matches "$_n1" "$_u1"
        info "NUSE follows the file: $_n0 -> $_n1 bytes (file $_u0 -> $_u1), nsfeat $_f"
    fi
    dd_verify "$DEV" 40 1 after-discard
    info "discard: max $_max bytes, segments $(cat "$_q/max_discard_segments"), dlfeat $_dlfeat; 8 MiB read back as zeroes, file allocation $_u0 -> $_u1 bytes; the next MiB intact"
    # Write Zeroes with DEAC (what the Linux host sends for BLKZEROOUT
    # without NOUNMAP once DLFEAT says the target honours it)
    if [ "$TARGET" = kernel-guest ]; then
        # nvmet here answers Write Zeroes with Invalid Opcode (0x6001): its
        # file namespace lies on tmpfs, which has no FALLOC_FL_ZERO_RANGE, and
        # nvmet_file_execute_write_zeroes turns the EOPNOTSUPP into that status
        # (errno_to_nvme_status); ours writes zeroes where the filesystem cannot
        info "write-zeroes --deac left out against nvmet"
        return 0
    fi
    _bs=$(blockdev --getss "$DEV")
    dd_verify "$DEV" 48 4 pre-write-zeroes
    _u2=$(ns1_usage) || fail "namespace 1's allocation before Write Zeroes"
    t 30 nvme write-zeroes "$DEV" -s $(( (48 << 20) / _bs )) -c $(( (4 << 20) / _bs - 1 )) -d >/tmp/wz.txt 2>&1 \
        || fail "nvme write-zeroes --deac: $(cat /tmp/wz.txt)"
    zeros_at "$DEV" 48 4 || fail "4 MiB at 48 MiB not zero after Write Zeroes"
    _u3=$(ns1_usage) || fail "namespace 1's allocation after Write Zeroes"
    [ $((_u2 - _u3)) -ge $(((4 << 20) - (64 << 10))) ] || fail "Write Zeroes with DEAC left the allocation at $_u2 -> $_u3 bytes"
    info "write-zeroes --deac: 4 MiB read back as zeroes, file allocation $_u2 -> $_u3 bytes"
}

# kh_verify: Verify (NVM OPC 0Ch) as `nvme verify` sends it through the
# kernel's passthrough ioctl: 8 blocks at 0 verify, 8 across the end fail with
# LBA Out of Range; id-ctrl ONCS bit 7, and `nvme nvm-id-ctrl` (Identify CNS
# 06h) shows VSL = MDTS and WZSL 13. nvmet has neither: against it the step
# checks the refusal (Invalid Opcode) and prints its limits.
kh_verify() {
    need_dev
    t 30 nvme nvm-id-ctrl "/dev/$CTRL" >/tmp/vf.nic 2>&1 || fail "nvme nvm-id-ctrl: $(cat /tmp/vf.nic)"
    _vsl=$(field vsl </tmp/vf.nic); _wzsl=$(field wzsl </tmp/vf.nic)
    t 30 nvme id-ctrl "/dev/$CTRL" >/tmp/vf.idc 2>&1 || fail "nvme id-ctrl: $(cat /tmp/vf.idc)"
    _oncs=$(field oncs </tmp/vf.idc); _mdts=$(field mdts </tmp/vf.idc)
    rm -f /tmp/vf.nic /tmp/vf.idc
    _bs=$(blockdev --getss "$DEV"); _n=$(( $(blockdev --getsize64 "$DEV") / _bs ))
    if [ "$TARGET" = kernel-guest ]; then
        t 30 nvme verify "$DEV" -s 0 -c 7 >/tmp/vf.txt 2>&1 && fail "nvmet verified 8 blocks: $(cat /tmp/vf.txt)"
        grep -qi 'invalid.*opcode' /tmp/vf.txt || fail "nvmet refused Verify with: $(cat /tmp/vf.txt)"
        info "verify: nvmet refuses it (Invalid Opcode); its ONCS $_oncs, VSL $_vsl, WZSL $_wzsl"
        rm -f /tmp/vf.txt
        return 0
    fi
    [ $((_oncs & 0x80)) != 0 ] || fail "ONCS $_oncs without Verify (bit 7)"
    [ "$_vsl" = "$_mdts" ] && [ "$_wzsl" = 13 ] || fail "nvm-id-ctrl: VSL $_vsl (MDTS $_mdts), WZSL $_wzsl; want VSL = MDTS, WZSL 13"
    t 30 nvme verify "$DEV" -s 0 -c 7 >/tmp/vf.txt 2>&1 || fail "nvme verify of 8 blocks at 0: $(cat /tmp/vf.txt)"
    t 30 nvme verify "$DEV" -s $((_n - 4)) -c 7 >/tmp/vf.txt 2>&1 && fail "Verify across the end succeeded: $(cat /tmp/vf.txt)"
    grep -qi 'LBA Out of Range' /tmp/vf.txt || fail "Verify across the end: $(cat /tmp/vf.txt)"
    rm -f /tmp/vf.txt
    info "verify: 8 blocks at 0 verified, 8 across the end LBA Out of Range; ONCS $_oncs, VSL $_vsl (MDTS $_mdts), WZSL $_wzsl"
}

# smart_writes: the controller's Host Write Commands (SMART log, every namespace)
smart_writes() {
    t 30 nvme smart-log "/dev/$CTRL" -o json >/tmp/swc.json 2>&1 || { rm -f /tmp/swc.json; return 1; }
    jnum host_write_commands </tmp/swc.json; rm -f /tmp/swc.json
}

# kh_zeroout: a block-layer zeroout (what mkfs, `fallocate -z`, `blkdiscard -z`
# and BLKZEROOUT send) of 64 MiB at 64 MiB. The host splits it at
# write_zeroes_max_bytes, which our Write Zeroes Size Limit (WZSL 13 in
# Identify CNS 06h) makes 32 MiB, MDTS (1 MiB) without it: two Write Zeroes
# commands by the SMART log instead of 64. The range reads back as zeroes and the MiB on either side keeps its
# data. nvmet reports no WZSL and no SMART counts for files: there the step
# prints the host's limit and checks the data only.
kh_zeroout() {
    need_dev
    _wz=$(cat "/sys/block/${DEV#/dev/}/queue/write_zeroes_max_bytes")
    if [ "$TARGET" = kernel-guest ] && [ "${_wz:-0}" = 0 ]; then
        info "zeroout: write_zeroes_max_bytes 0 against nvmet: the host sends it no Write Zeroes"
        return 0
    fi
    [ "$TARGET" = kernel-guest ] || [ "$_wz" = $((32 << 20)) ] \
        || fail "write_zeroes_max_bytes $_wz, want $((32 << 20)) (WZSL 13)"
    head -c $((1 << 20)) /dev/urandom >/tmp/zo.pat
    for _m in 63 64 127 128; do
        t 30 dd if=/tmp/zo.pat of="$DEV" bs=1M seek=$_m oflag=direct status=none || fail "dd write at $_m MiB"
    done
    _hw0=$(smart_writes) || fail "nvme smart-log before the zeroout"
    # fio's falloc engine trims with fallocate(PUNCH_HOLE | KEEP_SIZE), which
    # on a block device is blkdev_issue_zeroout (no fallback to writes)
    if ! t 60 fio --name=zeroout --filename="$DEV" --ioengine=falloc --rw=trim --bs=64M --offset=64M --size=64M \
        --output=/tmp/zo.fio >/dev/null 2>&1; then
        if [ "$TARGET" = kernel-guest ] && grep -q "Operation not supported" /tmp/zo.fio; then
            # As with nvme-cli's Write Zeroes in kh_discard: tmpfs below nvmet
            info "zeroout: write_zeroes_max_bytes $_wz; nvmet refused the Write Zeroes (its file on tmpfs cannot zero ranges)"
            rm -f /tmp/zo.pat /tmp/zo.fio
            return 0
        fi
        fail "fallocate punch (zeroout) of 64 MiB at 64 MiB: $(cat /tmp/zo.fio)"
    fi
    _hw1=$(smart_writes) || fail "nvme smart-log after the zeroout"
    zeros_at "$DEV" 64 64 || fail "64 MiB at 64 MiB not zero after the zeroout"
    for _m in 63 128; do
        t 30 dd if="$DEV" of=/tmp/zo.rb bs=1M count=1 skip=$_m iflag=direct status=none || fail "dd read at $_m MiB"
        cmp -s /tmp/zo.pat /tmp/zo.rb || fail "the MiB at $_m MiB changed with the zeroout beside it"
    done
    rm -f /tmp/zo.pat /tmp/zo.rb /tmp/zo.fio
    info "zeroout: write_zeroes_max_bytes $_wz; 64 MiB zeroed with $((_hw1 - _hw0)) write commands (SMART); the MiB on either side intact"
    [ "$TARGET" = kernel-guest ] && return 0
    [ $((_hw1 - _hw0)) = 2 ] || fail "zeroing 64 MiB took $((_hw1 - _hw0)) write commands, want 2 (32 MiB each)"
}

kh_fio() {
    need_dev
    t $((FIO_RUNTIME + 60)) fio --name=randrw-verify --filename="$DEV" --ioengine=libaio \
        --direct=1 --rw=randrw --rwmixread=50 --bssplit=4k/50:16k/10:64k/10:128k/20:256k/10 \
        --iodepth=16 --size=128M \
        --time_based --runtime="$FIO_RUNTIME" --verify=crc32c --verify_fatal=1 \
        --verify_backlog=256 --do_verify=1 --serialize_overlap=1 --randrepeat=0 --output=/tmp/fio.txt
    _rc=$?
    cat /tmp/fio.txt
    [ $_rc = 0 ] || fail "fio rc=$_rc: $(grep -i -m1 -E 'verify|error|bad' /tmp/fio.txt)"
    grep -q 'err= 0' /tmp/fio.txt || fail "fio reported errors"
    info "fio: $(grep -E '^ *(read|write):' /tmp/fio.txt | sed 's/^ *//; s/,  *BW=/ BW=/; s/ (.*//' | tr '\n' ';')"
}

kh_reset_under_io() { # controller resets (nvme reset) while fio writes and verifies
    need_dev
    _st=/sys/class/nvme/$CTRL/state
    _ids=$(cat /sys/class/nvme/$CTRL/cntlid)
    rm -f /tmp/fio-reset.txt
    t 120 fio --name=reset-verify --filename="$DEV" --ioengine=libaio --direct=1 --rw=randrw \
        --rwmixread=50 --bssplit=4k/50:64k/25:128k/25 --iodepth=16 --size=64M --offset=128M \
        --time_based --runtime=12 --verify=crc32c --verify_fatal=1 --verify_backlog=256 --do_verify=1 \
        --serialize_overlap=1 --randrepeat=0 --output=/tmp/fio-reset.txt &
    _fpid=$!
    _r=0
    while [ $_r -lt 2 ]; do
        sleep 3
        kill -0 $_fpid 2>/dev/null || { cat /tmp/fio-reset.txt; fail "fio ended before reset $((_r + 1))"; }
        _t0=$(now_ms)
        # The host stops the I/O queues (their requests are requeued), clears
        # CC.EN, closes the admin queue and connects a new association.
        t 60 nvme reset "/dev/$CTRL" || { kill $_fpid; fail "nvme reset /dev/$CTRL failed"; }
        _dl=$(( $(date +%s) + 30 ))
        until [ "$(cat "$_st" 2>/dev/null)" = live ]; do
            [ "$(date +%s)" -le $_dl ] || { kill $_fpid; fail "controller $(cat "$_st" 2>/dev/null) 30 s after reset $((_r + 1))"; }
            sleep 0.1
        done
        # (`nvme reset` succeeds only once the new association is live:
        # nvme_reset_ctrl_sync. The cntlid is shown, not checked: nvmet
        # reuses a freed one.)
        _id=$(cat /sys/class/nvme/$CTRL/cntlid)
        info "reset $((_r + 1)): live again after $(( $(now_ms) - _t0 )) ms, cntlid $_id (before: $_ids)"
        _ids="$_ids $_id"
        _r=$((_r + 1))
    done
    wait $_fpid
    _rc=$?
    [ $_rc = 0 ] || { cat /tmp/fio-reset.txt; fail "fio across the resets rc=$_rc: $(grep -i -m1 -E 'verify|error|bad' /tmp/fio-reset.txt)"; }
    grep -q 'err= 0' /tmp/fio-reset.txt || { cat /tmp/fio-reset.txt; fail "fio across the resets reported errors"; }
    info "fio verify across 2 resets: $(grep -E '^ *(read|write):' /tmp/fio-reset.txt | sed 's/^ *//; s/,  *BW=/ BW=/; s/ (.*//' | tr '\n' ';')"
    dd_verify "$DEV" 16 4 after-reset
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

# wait_ro DEV 0|1: bounded wait for the block device's read-only flag
wait_ro() {
    _i=0
    while [ "$(blockdev --getro "$1" 2>/dev/null)" != "$2" ]; do
        [ $_i -lt 75 ] || return 1
        sleep 0.2; _i=$((_i + 1))
    done
}

# wp_checks NSID NG: what kh_write_protect checks while namespace NSID is
# write protected (a subshell: protection is lifted whatever it finds)
wp_checks() {
    t 30 nvme set-feature "/dev/$CTRL" -n "$1" -f 0x84 -v 1 >/tmp/wp.txt 2>&1 \
        || fail "set-feature 0x84 = 1: $(cat /tmp/wp.txt)"
    wait_ro "$DEV" 1 || fail "$DEV not read-only 15 s after write protection (no rescan?)"
    t 30 nvme get-feature "/dev/$CTRL" -n "$1" -f 0x84 >/tmp/wp.txt 2>&1 || fail "get-feature 0x84"
    grep -q 'Current value:0x00000001' /tmp/wp.txt || fail "get-feature 0x84: $(cat /tmp/wp.txt)"
    info "write protected: $DEV read-only, $(tr '\n' ' ' </tmp/wp.txt)"
    t 30 dd if="$DEV" of=/dev/null bs=1M count=4 iflag=direct 2>/dev/null || fail "read while write protected"
    # Past the host's read-only flag: the target itself must refuse the write.
    t 30 dd if=/dev/urandom of=/tmp/wp-blk bs=4096 count=1 2>/dev/null
    t 30 nvme io-passthru "$2" -o 0x01 -n "$1" -l 4096 -w -i /tmp/wp-blk \
        --cdw10=0 --cdw11=0 --cdw12=$(( 4096 / $(blockdev --getss "$DEV") - 1 )) >/tmp/wp.txt 2>&1
    _rc=$?
    info "write while protected: rc=$_rc $(tr '\n' ' ' </tmp/wp.txt)"
    [ $_rc != 0 ] || fail "a write to the write-protected namespace succeeded"
    grep -qi -e 'write protect' -e '(0x20)' /tmp/wp.txt || fail "write refused with another status: $(cat /tmp/wp.txt)"
}

# rr KEY: the first "KEY : value" of the saved Reservation Report (nvme-cli's text)
rr() { sed -n "s/^ *$1 *: *//p" /tmp/rr.txt | head -n 1; }
resv_report() {
    t 30 nvme resv-report "$DEV" -n 1 --eds >/tmp/rr.txt 2>&1 || fail "nvme resv-report --eds: $(tr '\n' ' ' </tmp/rr.txt)"
}
resv_cmd() {
    t 30 nvme "$@" >/tmp/resv.txt 2>&1 || fail "nvme $*: $(tr '\n' ' ' </tmp/resv.txt)"
}

kh_reservations() {
    need_dev
    if [ "$TARGET" = kernel-guest ]; then
        info "nvmet 6.12 has no reservations (6.13 adds resv_enable): left out"
        return 0
    fi
    _oncs=$(t 30 nvme id-ctrl "/dev/$CTRL" 2>/dev/null | field oncs)
    [ $(( ${_oncs:-0} & 0x20 )) -ne 0 ] || fail "ONCS ${_oncs:-?} lacks Reservations (bit 5)"
    _rescap=$(t 30 nvme id-ns "$DEV" 2>/dev/null | field rescap)
    # every type, IEKEY, and PTPL (namespace 1 has a reservations_file)
    [ "$(( ${_rescap:-0} ))" = 255 ] || fail "rescap ${_rescap:-?}, want 0xff (PTPL, every type, IEKEY)"
    resv_cmd resv-register "$DEV" -n 1 --nrkey=0xa1 --rrega=0
    resv_report
    [ "$(rr regctl)" = 1 ] && [ "$(rr rkey)" = a1 ] && [ "$(rr rtype)" = 0 ] \
        || fail "after register: $(tr '\n' ' ' </tmp/rr.txt)"
    _gen=$(rr gen)
    # Write Exclusive: another host may not write, this one may
    resv_cmd resv-acquire "$DEV" -n 1 --crkey=0xa1 --rtype=1 --racqa=0
    resv_report
    [ "$(rr rtype)" = 1 ] && [ "$(rr rcsts)" = 1 ] || fail "after acquire: $(tr '\n' ' ' </tmp/rr.txt)"
    hook_call resv-write 60 conflict || fail "another host's write under Write Exclusive: $HOOK_REPLY"
    dd_verify "$DEV" 56 4 reserved
    # A wrong key is refused, and changes nothing
    if t 30 nvme resv-release "$DEV" -n 1 --crkey=0xb2 --rtype=1 --rrela=0 >/tmp/resv.txt 2>&1; then
        fail "release with a wrong key succeeded"
    fi
    grep -qi "conflict\|0x83\|0x4083" /tmp/resv.txt || fail "release with a wrong key: $(tr '\n' ' ' </tmp/resv.txt)"
    resv_cmd resv-release "$DEV" -n 1 --crkey=0xa1 --rtype=1 --rrela=0
    resv_report
    [ "$(rr rtype)" = 0 ] || fail "after release: $(tr '\n' ' ' </tmp/rr.txt)"
    hook_call resv-write 60 ok || fail "another host's write after the release: $HOOK_REPLY"
    resv_cmd resv-register "$DEV" -n 1 --crkey=0xa1 --rrega=1
    resv_report
    [ "$(rr regctl)" = 0 ] && [ "$(rr gen)" -gt "$_gen" ] || fail "after unregister: $(tr '\n' ' ' </tmp/rr.txt)"
    info "reservations: oncs $_oncs, rescap $_rescap; registered, Write Exclusive held (another host's write refused, ours verified), wrong key refused, released (the other host writes), unregistered (generation $_gen -> $(rr gen))"
    # Preempted by another host: the host hears of it (asynchronous event,
    # log page 80h) and may not write any more; in a subshell, so that its
    # `fail` cannot skip the cleanup
    : >/tmp/uevents
    uevent sh -c 'echo "${ACTION:-} ${DEVPATH:-} NVME_AEN=${NVME_AEN:-}" >>/tmp/uevents' </dev/null >/dev/null 2>&1 &
    _uev=$!
    sleep 0.5
    ( resv_preempted )
    _rc=$?
    kill "$_uev" 2>/dev/null
    hook_call resv-cli 60 clear --key 0xb2 >/dev/null || info "clearing the other host's reservation: $HOOK_REPLY"
    [ $_rc = 0 ] || exit 1
    resv_report
    [ "$(rr regctl)" = 0 ] || fail "after the other host's clear: $(tr '\n' ' ' </tmp/rr.txt)"
}

# The block layer's persistent reservation ioctls (IOC_PR_*, what cluster
# software and QEMU's pr-manager use), which the kernel's NVMe pr_ops turn
# into Reservation commands (nvme-cli's resv-* are passthrough instead).
pr() { t 30 /guest/bin/pr-ioctl "$DEV" "$@" >/tmp/pr.txt 2>&1 || fail "pr-ioctl $*: $(cat /tmp/pr.txt)"; }
kh_pr_ioctl() {
    need_dev
    if [ "$TARGET" = kernel-guest ]; then
        info "nvmet 6.12 has no reservations: left out"
        return 0
    fi
    [ -x /guest/bin/pr-ioctl ] || fail "no /guest/bin/pr-ioctl (cargo build --release -p nvmeof-tests --bin interop_pr_ioctl)"
    resv_report
    [ "$(rr regctl)" = 0 ] || fail "registrants left before: $(tr '\n' ' ' </tmp/rr.txt)"
    pr register 0 0xc1
    resv_report
    # pr_ops register with CPTPL 11b: namespace 1 keeps them (reservations_file)
    [ "$(rr regctl)" = 1 ] && [ "$(rr rkey)" = c1 ] && [ "$(rr ptpls)" = 1 ] \
        || fail "after IOC_PR_REGISTER: $(tr '\n' ' ' </tmp/rr.txt)"
    pr reserve 0xc1 1
    resv_report
    [ "$(rr rtype)" = 1 ] && [ "$(rr rcsts)" = 1 ] || fail "after IOC_PR_RESERVE: $(tr '\n' ' ' </tmp/rr.txt)"
    hook_call resv-write 60 conflict || fail "another host's write under the ioctl's Write Exclusive: $HOOK_REPLY"
    # a wrong key: Reservation Conflict, which the ioctl returns as the
    # positive PR_STS_RESERVATION_CONFLICT (0x18), not as an errno
    if t 30 /guest/bin/pr-ioctl "$DEV" register 0xbad 0xc2 >/tmp/pr.txt 2>&1; then
        fail "IOC_PR_REGISTER with a wrong key succeeded"
    fi
    grep -q "pr status 0x18" /tmp/pr.txt || fail "IOC_PR_REGISTER with a wrong key: $(cat /tmp/pr.txt)"
    # PR_FL_IGNORE_KEY: Replace with IEKEY
    pr register 0xbad 0xc2 ignore
    resv_report
    [ "$(rr rkey)" = c2 ] && [ "$(rr rtype)" = 1 ] || fail "after a replace ignoring the key: $(tr '\n' ' ' </tmp/rr.txt)"
    pr release 0xc2 1
    resv_report
    [ "$(rr rtype)" = 0 ] || fail "after IOC_PR_RELEASE: $(tr '\n' ' ' </tmp/rr.txt)"
    # another host takes Write Exclusive; this one preempts it and aborts its commands
    hook_call resv-cli 60 register --new-key 0xb2 || fail "the other host's register: $HOOK_REPLY"
    hook_call resv-cli 60 acquire --key 0xb2 --rtype write-exclusive || fail "the other host's acquire: $HOOK_REPLY"
    if t 30 dd if=/dev/zero of="$DEV" bs=4k count=1 seek=$((64 << 8)) oflag=direct 2>/dev/null; then
        fail "a write under the other host's Write Exclusive succeeded"
    fi
    pr preempt-abort 0xc2 0xb2 1
    resv_report
    [ "$(rr rtype)" = 1 ] && [ "$(rr regctl)" = 1 ] && [ "$(rr rkey)" = c2 ] \
        || fail "after IOC_PR_PREEMPT_ABORT: $(tr '\n' ' ' </tmp/rr.txt)"
    hook_call resv-write 60 conflict || fail "the preempted host's write: $HOOK_REPLY"
    dd_verify "$DEV" 56 4 pr-held
    pr clear 0xc2
    resv_report
    [ "$(rr regctl)" = 0 ] && [ "$(rr rtype)" = 0 ] || fail "after IOC_PR_CLEAR: $(tr '\n' ' ' </tmp/rr.txt)"
    info "IOC_PR_*: register (PTPL on), reserve Write Exclusive (another host's write refused), a wrong key refused (PR_STS_RESERVATION_CONFLICT), replace ignoring the key, release, preempt and abort of another host's Write Exclusive (its write refused, ours verified), clear"
}

# resv_preempted: another host (hooks resv-cli) preempts this one's Write
# Exclusive - Registrants Only reservation with its key, and aborts its
# commands, while this host writes
resv_preempted() {
    resv_cmd resv-register "$DEV" -n 1 --nrkey=0xa1 --rrega=0
    resv_cmd resv-acquire "$DEV" -n 1 --crkey=0xa1 --rtype=3 --racqa=0
    hook_call resv-cli 60 register --new-key 0xb2 || fail "the other host's register: $HOOK_REPLY"
    # This host keeps writing (O_DIRECT, 4 KiB at a time) while the other
    # one preempts it and aborts its commands (fencing): the writer must
    # stop with an error, not hang.
    rm -f /tmp/resv-w.n /tmp/resv-w.rc
    (
        _i=0
        while [ $_i -lt 3000 ]; do
            t 30 dd if=/dev/zero of="$DEV" bs=4k count=1 seek=$(( (64 << 8) + _i % 256 )) oflag=direct \
                2>/tmp/resv-w.err || { echo "failed after $_i writes: $(head -n 1 /tmp/resv-w.err)" >/tmp/resv-w.rc; exit 0; }
            _i=$((_i + 1)); echo $_i >/tmp/resv-w.n
        done
        echo "never failed ($_i writes)" >/tmp/resv-w.rc
    ) &
    _wpid=$!
    _dl=$(( $(date +%s) + 30 ))
    until [ "$(cat /tmp/resv-w.n 2>/dev/null || echo 0)" -ge 20 ]; do
        [ "$(date +%s)" -le $_dl ] && kill -0 $_wpid 2>/dev/null \
            || { kill $_wpid 2>/dev/null; fail "the writer did not get going: $(cat /tmp/resv-w.rc /tmp/resv-w.err 2>/dev/null)"; }
        sleep 0.05
    done
    hook_call resv-cli 60 preempt-abort --key 0xb2 --preempt-key 0xa1 --rtype write-exclusive \
        || { kill $_wpid 2>/dev/null; fail "the other host's preempt and abort: $HOOK_REPLY"; }
    _dl=$(( $(date +%s) + 60 ))
    while kill -0 $_wpid 2>/dev/null; do
        [ "$(date +%s)" -le $_dl ] || { kill $_wpid; fail "the preempted host's writer still runs 60 s after the preempt and abort ($(cat /tmp/resv-w.n) writes)"; }
        sleep 0.1
    done
    case "$(cat /tmp/resv-w.rc 2>/dev/null)" in
        "failed after "*) info "writer running across the preempt and abort: $(cat /tmp/resv-w.rc)" ;;
        *) fail "writer across the preempt and abort: $(cat /tmp/resv-w.rc 2>/dev/null)" ;;
    esac
    # Reservation Log Page Available: type 6 (I/O command set), log 80h
    _dl=$(( $(date +%s) + 10 ))
    until grep -q "/$CTRL NVME_AEN=0x800006\$" /tmp/uevents; do
        [ "$(date +%s)" -le $_dl ] || fail "no reservation event (NVME_AEN=0x800006) on $CTRL within 10 s: $(tail -n 3 /tmp/uevents | tr '\n' ';')"
        sleep 0.1
    done
    t 30 nvme get-log "/dev/$CTRL" --log-id=0x80 --log-len=64 --raw-binary >/tmp/rlog.bin 2>/tmp/rlog.err \
        || fail "nvme get-log 0x80: $(cat /tmp/rlog.err)"
    # count (8 bytes), type (byte 8: 1 = registration preempted), NSID at 12
    _type=$(od -An -tu1 -j8 -N1 /tmp/rlog.bin | tr -d ' ')
    _nsid=$(od -An -tu4 -j12 -N4 /tmp/rlog.bin | tr -d ' ')
    [ "$_type" = 1 ] && [ "$_nsid" = 1 ] || fail "reservation log: type $_type nsid $_nsid, want 1 (registration preempted) on 1"
    resv_report
    [ "$(rr rtype)" = 1 ] && [ "$(rr regctl)" = 1 ] && [ "$(rr rkey)" = b2 ] \
        || fail "after the preempt: $(tr '\n' ' ' </tmp/rr.txt)"
    if t 30 dd if=/dev/zero of="$DEV" bs=4k count=1 seek=$((64 << 8)) oflag=direct 2>/tmp/dd.err; then
        fail "a write of the preempted host succeeded"
    fi
    info "preempted by another host: event NVME_AEN=0x800006, log 80h type 1 on nsid 1, its write refused ($(head -n 1 /tmp/dd.err))"
}

kh_write_protect() {
    need_dev
    _nsid=$(cat "/sys/block/${DEV#/dev/}/nsid" 2>/dev/null) || fail "no nsid for $DEV"
    _ng=/dev/ng${DEV#/dev/nvme}
    [ -c "$_ng" ] || fail "no generic char device $_ng"
    [ "$(blockdev --getro "$DEV")" = 0 ] || fail "$DEV read-only before the test"
    ( wp_checks "$_nsid" "$_ng" )
    _wrc=$?
    # Lifted even after a failed check, so later steps can write.
    t 30 nvme set-feature "/dev/$CTRL" -n "$_nsid" -f 0x84 -v 0 >/tmp/wp.txt 2>&1 \
        || fail "set-feature 0x84 = 0: $(cat /tmp/wp.txt)"
    wait_ro "$DEV" 0 || fail "$DEV still read-only 15 s after lifting write protection"
    [ $_wrc = 0 ] || exit 1
    dd_verify "$DEV" 64 4 after-write-protect
    rm -f /tmp/wp-blk /tmp/wp.txt
}

NQN_RO=$NQN-ro

# ro_checks MD5: what kh_read_only_ns checks on the connected namespace
# subsys_checks NQN FUNC [ARGS...]: FUNC in a subshell (its `fail` must not
# skip the cleanup), then disconnect from NQN and remove it (kh_subsys); fails
# when FUNC did
subsys_checks() {
    _sn=$1; shift
    ( "$@" )
    _rc=$?
    t 30 nvme disconnect -n "$_sn" >/dev/null 2>&1
    wait_no_ctrl "$_sn" 10 || info "a controller of $_sn is still present after disconnect"
    # (not in a subshell: the caller may read the removal's HOOK_REPLY)
    kh_subsys remove "$_sn" >/tmp/subsys-rm.txt || fail "remove $_sn: $(cat /tmp/subsys-rm.txt)"
    [ $_rc = 0 ] || exit 1
}
ro_checks() {
    t 60 nvme connect -t tcp -a "$NVME_ADDR" -s "$NVME_PORT" -n "$NQN_RO" || fail "nvme connect to $NQN_RO failed"
    _d=$(wait_ns_dev "$NQN_RO" 30) || fail "no namespace block device for $NQN_RO within 30s"
    _c=$(ctrls_for_nqn "$NQN_RO" | head -n 1)
    wait_ro "$_d" 1 || fail "$_d is not read-only"
    _sum=$(t 60 dd if="$_d" bs=1M count=16 iflag=direct 2>/dev/null | md5sum | cut -d' ' -f1)
    [ "$_sum" = "$1" ] || fail "read back md5 $_sum, file md5 $1"
    t 30 dd if=/dev/zero of="$_d" bs=4k count=1 oflag=direct 2>/dev/null && fail "dd wrote to the read-only device"
    _nsid=$(cat "/sys/block/${_d#/dev/}/nsid")
    t 30 dd if=/dev/urandom of=/tmp/ro-blk bs=4096 count=1 2>/dev/null
    t 30 nvme io-passthru "/dev/ng${_d#/dev/nvme}" -o 0x01 -n "$_nsid" -l 4096 -w -i /tmp/ro-blk \
        --cdw10=0 --cdw11=0 --cdw12=$(( 4096 / $(blockdev --getss "$_d") - 1 )) >/tmp/ro.txt 2>&1 \
        && fail "a write to the read-only namespace succeeded"
    grep -qi -e 'write protect' -e '(0x20)' /tmp/ro.txt || fail "write refused with another status: $(cat /tmp/ro.txt)"
    t 30 nvme set-feature "/dev/$_c" -n "$_nsid" -f 0x84 -v 0 >/tmp/ro.txt 2>&1 \
        && fail "write protection of a read-only namespace lifted"
    grep -qi 'not changeable' /tmp/ro.txt || fail "set-feature 0x84 = 0 refused with: $(cat /tmp/ro.txt)"
    _sum=$(t 60 dd if="$_d" bs=1M count=16 iflag=direct 2>/dev/null | md5sum | cut -d' ' -f1)
    [ "$_sum" = "$1" ] || fail "data changed: md5 $_sum"
    info "read-only namespace $_d: read-only at connect, 16 MiB equal to the file, writes refused (host and target), protection not liftable"
    rm -f /tmp/ro-blk /tmp/ro.txt
}

kh_read_only_ns() {
    if [ "$TARGET" = kernel-guest ]; then
        info "left out: nvmet has no read-only namespace configuration"
        return 0
    fi
    hook_call add-subsystem 60 "$NQN_RO" ro || fail "add $NQN_RO: ${HOOK_REPLY:-no reply}"
    _md5=$(echo "$HOOK_REPLY" | sed -n 's/.*md5=\([0-9a-f]*\).*/\1/p')
    [ -n "$_md5" ] || fail "no md5 in the hook's reply: $HOOK_REPLY"
    subsys_checks "$NQN_RO" ro_checks "$_md5"
}

NQN_BLK=$NQN-blk

# blk_checks: what kh_block_ns checks on the connected namespace
blk_checks() {
    t 60 nvme connect -t tcp -a "$NVME_ADDR" -s "$NVME_PORT" -n "$NQN_BLK" || fail "nvme connect to $NQN_BLK failed"
    _d=$(wait_ns_dev "$NQN_BLK" 30) || fail "no namespace block device for $NQN_BLK within 30s"
    _sz=$(blockdev --getsize64 "$_d")
    [ "$_sz" = $((64 << 20)) ] || fail "$_d has $_sz bytes, the loop device 64 MiB"
    t 60 dd if=/dev/urandom of=/tmp/blk-pat bs=1M count=8 2>/dev/null || fail "pattern"
    _want=$(md5sum </tmp/blk-pat | cut -d' ' -f1)
    t 60 dd if=/tmp/blk-pat of="$_d" bs=1M seek=1 oflag=direct 2>/dev/null || fail "dd write"
    _got=$(t 60 dd if="$_d" bs=1M skip=1 count=8 iflag=direct 2>/dev/null | md5sum | cut -d' ' -f1)
    [ "$_got" = "$_want" ] || fail "read back md5 $_got, written $_want"
    # The data is on the device itself (read there with O_DIRECT).
    hook_call block-md5 30 "$NQN_BLK" 1 8 >/dev/null || fail "hook block-md5: ${HOOK_REPLY:-no reply}"
    case $HOOK_REPLY in *" md5=$_want") ;; *) fail "the loop device holds ${HOOK_REPLY##* }, written md5=$_want" ;; esac
    # A filesystem: mkfs discards and zeroes through the block backend.
    t 120 mkfs.ext4 -F -q "$_d" || fail "mkfs.ext4"
    mkdir -p /mnt/blk
    t 60 mount -t ext4 "$_d" /mnt/blk || fail "mount"
    cp /tmp/blk-pat /mnt/blk/pat && t 60 sync || { umount /mnt/blk; fail "copy to ext4"; }
    t 60 umount /mnt/blk || fail "umount"
    t 120 fsck.ext4 -fn "$_d" >/dev/null 2>&1 || fail "fsck.ext4 -fn reported problems"
    t 60 mount -t ext4 -o ro "$_d" /mnt/blk || fail "remount"
    cmp /tmp/blk-pat /mnt/blk/pat || { umount /mnt/blk; fail "ext4 content mismatch after remount"; }
    t 60 umount /mnt/blk || fail "umount (ro)"
    info "block namespace $_d: 8 MiB written and read back (the loop device holds them), ext4 made, filled, fsck clean, read back"
    rm -f /tmp/blk-pat
}

kh_block_ns() {
    if [ "$TARGET" = kernel-guest ]; then
        info "left out: the guest's nvmet exports the step's files (a block device here would be the guest's)"
        return 0
    fi
    hook_call add-subsystem 60 "$NQN_BLK" block || fail "add $NQN_BLK: ${HOOK_REPLY:-no reply}"
    case $HOOK_REPLY in *"(claimed)"*) ;; *) fail "the target does not hold its device exclusively: $HOOK_REPLY" ;; esac
    info "${HOOK_REPLY#HOOKACK add-subsystem 0 }"
    subsys_checks "$NQN_BLK" blk_checks
    case $HOOK_REPLY in *" released)"*) info "${HOOK_REPLY#HOOKACK remove-subsystem 0 }" ;; *) fail "device not released: $HOOK_REPLY" ;; esac
}

NQN_4K=$NQN-4k

# lbs4k_checks: what kh_lbs_4k checks on the connected namespace
lbs4k_checks() {
    t 60 nvme connect -t tcp -a "$NVME_ADDR" -s "$NVME_PORT" -n "$NQN_4K" || fail "nvme connect to $NQN_4K failed"
    _d=$(wait_ns_dev "$NQN_4K" 30) || fail "no namespace block device for $NQN_4K within 30s"
    _ss=$(blockdev --getss "$_d"); _sz=$(blockdev --getsize64 "$_d")
    [ "$_ss" = 4096 ] && [ "$_sz" = $((32 << 20)) ] || fail "$_d: $_ss-byte sectors, $_sz bytes (want 4096, 32 MiB)"
    _lbads=$(t 30 nvme id-ns "$_d" 2>/dev/null | grep '(in use)' | sed -n 's/.*lbads:\([0-9]*\).*/\1/p')
    [ "$_lbads" = 12 ] || fail "id-ns: LBA format in use has lbads '$_lbads', want 12"
    dd_verify "$_d" 4 8 lbs4k
    t 60 blkdiscard -o $((4 << 20)) -l $((1 << 20)) "$_d" || fail "blkdiscard 1 MiB at 4 MiB"
    zeros_at "$_d" 4 1 || fail "1 MiB at 4 MiB not zero after blkdiscard"
    t 120 mkfs.ext4 -F -q "$_d" || fail "mkfs.ext4"
    mkdir -p /mnt/4k
    t 60 mount -t ext4 "$_d" /mnt/4k || fail "mount"
    t 60 dd if=/dev/urandom of=/tmp/4k-pat bs=1M count=4 2>/dev/null
    cp /tmp/4k-pat /mnt/4k/pat && t 60 sync || { umount /mnt/4k; fail "copy to ext4"; }
    t 60 umount /mnt/4k || fail "umount"
    t 120 fsck.ext4 -fn "$_d" >/dev/null 2>&1 || fail "fsck.ext4 -fn reported problems"
    t 60 mount -t ext4 -o ro "$_d" /mnt/4k && cmp /tmp/4k-pat /mnt/4k/pat || { umount /mnt/4k 2>/dev/null; fail "ext4 content after remount"; }
    t 60 umount /mnt/4k || fail "umount (ro)"
    info "4 KiB-block namespace $_d: lbads 12, dd verify, blkdiscard reads zeroes, ext4 made, filled, fsck clean"
    rm -f /tmp/4k-pat
}

kh_lbs_4k() {
    if [ "$TARGET" = kernel-guest ]; then
        info "left out: nvmet's file namespace has 4096-byte blocks already (every step runs on them there)"
        return 0
    fi
    hook_call add-subsystem 60 "$NQN_4K" lbs4k || fail "add $NQN_4K: ${HOOK_REPLY:-no reply}"
    subsys_checks "$NQN_4K" lbs4k_checks
}

NQN_ACL=$NQN-acl
ACL_OTHER=nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000ac100
# acl_set HOSTS|any: who may connect to NQN_ACL (NQNs joined by commas)
acl_set() {
    if [ "$TARGET" = kernel-guest ]; then
        _s=$NVMET/subsystems/$NQN_ACL
        # nvmet refuses allow_any_host while hosts are linked, and links
        # while it is set: links out first, then the flag, then links in
        for _l in "$_s"/allowed_hosts/*; do
            [ -L "$_l" ] || continue
            rm -f "$_l" || { echo "unlink $_l"; return 1; }
        done
        if [ "$1" = any ]; then
            echo 1 >"$_s/attr_allow_any_host" || { echo "attr_allow_any_host 1"; return 1; }
            return 0
        fi
        echo 0 >"$_s/attr_allow_any_host" || { echo "attr_allow_any_host 0"; return 1; }
        for _h in $(echo "$1" | tr ',' ' '); do
            mkdir -p "$NVMET/hosts/$_h" && ln -s "$NVMET/hosts/$_h" "$_s/allowed_hosts/$_h" \
                || { echo "link host $_h"; return 1; }
        done
    else
        hook_call allow-hosts 60 "$NQN_ACL" "$1" >/dev/null || { echo "hook allow-hosts: ${HOOK_REPLY:-no reply}"; return 1; }
    fi
}
# acl_listed: this host's discovery log lists NQN_ACL
acl_listed() {
    t 30 nvme discover -t tcp -a "$NVME_ADDR" -s "$NVME_PORT" >/tmp/acl-disc.txt 2>&1 \
        || fail "nvme discover: $(tail -n 1 /tmp/acl-disc.txt)"
    grep -q "subnqn: *$NQN_ACL\$" /tmp/acl-disc.txt
}
acl_connect() { t 60 nvme connect -t tcp -a "$NVME_ADDR" -s "$NVME_PORT" -n "$NQN_ACL" >/tmp/acl.txt 2>&1; }
acl_refused() { # acl_refused WHEN
    acl_connect && fail "connect to $NQN_ACL succeeded $1"
    wait_no_ctrl "$NQN_ACL" 15 || fail "a controller of $NQN_ACL is left after the refused connect ($1)"
    info "refused $1: $(tail -n 1 /tmp/acl.txt)"
}
acl_disconnect() {
    t 30 nvme disconnect -n "$NQN_ACL" >/dev/null 2>&1
    wait_no_ctrl "$NQN_ACL" 15 || fail "a controller of $NQN_ACL is left after disconnect"
}
acl_checks() {
    acl_listed && fail "$NQN_ACL listed while only $ACL_OTHER may use it"
    acl_refused "while only $ACL_OTHER may connect"
    acl_set "$HOSTNQN" || fail "allow $HOSTNQN"
    acl_listed || fail "$NQN_ACL not listed after $HOSTNQN was allowed"
    acl_connect || fail "connect after $HOSTNQN was allowed: $(tail -n 2 /tmp/acl.txt | tr '\n' ' ')"
    _d=$(wait_ns_dev "$NQN_ACL" 30) || fail "no namespace block device for $NQN_ACL"
    _c=$(ctrls_for_nqn "$NQN_ACL" | head -n 1)
    dd_verify "$_d" 1 4 acl-allowed
    acl_set "$ACL_OTHER" || fail "allow $ACL_OTHER only"
    acl_listed && fail "$NQN_ACL still listed after $HOSTNQN was removed"
    _st=$(cat "/sys/class/nvme/$_c/state")
    [ "$_st" = live ] || fail "$_c is $_st after $HOSTNQN was removed from the allowed hosts"
    dd_verify "$_d" 5 4 acl-removed-connected
    info "$HOSTNQN removed: $NQN_ACL gone from the log, $_c still live and doing I/O"
    acl_disconnect
    acl_refused "after $HOSTNQN was removed"
    acl_set any || fail "allow any host"
    acl_listed || fail "$NQN_ACL not listed while any host may use it"
    acl_connect || fail "connect while any host may: $(tail -n 2 /tmp/acl.txt | tr '\n' ' ')"
    _d=$(wait_ns_dev "$NQN_ACL" 30) || fail "no namespace block device for $NQN_ACL (any host)"
    dd_verify "$_d" 1 4 acl-any
    acl_disconnect
}
kh_allowed_hosts() {
    HOSTNQN=$(cat /etc/nvme/hostnqn)
    if [ "$TARGET" = kernel-guest ]; then
        _s=$NVMET/subsystems/$NQN_ACL
        mkdir "$_s" || fail "mkdir $_s"
        nvmet_add_file_ns "$NQN_ACL" 1 /srv/acl.img 16777216
        acl_set "$ACL_OTHER" || fail "nvmet: allow $ACL_OTHER"
        ln -s "$_s" "$NVMET/ports/1/subsystems/$NQN_ACL" || fail "link $NQN_ACL to port 1"
    else
        hook_call add-subsystem 60 "$NQN_ACL" acl "$ACL_OTHER" || fail "add $NQN_ACL: ${HOOK_REPLY:-no reply}"
    fi
    ( acl_checks )
    _rc=$?
    t 30 nvme disconnect -n "$NQN_ACL" >/dev/null 2>&1
    wait_no_ctrl "$NQN_ACL" 10 || info "a controller of $NQN_ACL is still present"
    if [ "$TARGET" = kernel-guest ]; then
        rm -f "$NVMET/ports/1/subsystems/$NQN_ACL" "$_s"/allowed_hosts/*
        echo 0 >"$_s/namespaces/1/enable"; rmdir "$_s/namespaces/1" "$_s"
        for _h in "$ACL_OTHER" "$HOSTNQN"; do rmdir "$NVMET/hosts/$_h" 2>/dev/null; done
        rm -f /srv/acl.img
    else
        _out=$(kh_subsys remove "$NQN_ACL") || fail "remove $NQN_ACL: $_out"
    fi
    [ $_rc = 0 ] || exit 1
}

NQN_MASK=$NQN-mask
# mask_nsids: the active NSIDs of NQN_MASK's controller, from nvme list-ns
mask_nsids() {
    t 30 nvme list-ns "/dev/$1" >/tmp/mask-ns.txt 2>&1 || { echo "list-ns: $(tail -n 1 /tmp/mask-ns.txt)"; return 1; }
    sed -n 's/.*\]: *0x\([0-9a-f]*\).*/\1/p' /tmp/mask-ns.txt | while read -r _x; do echo $((0x$_x)); done | tr '\n' ' '
}
# mask_set HOSTS|any|none: who sees namespace 2 of NQN_MASK
mask_set() { hook_call ns-hosts 60 "$NQN_MASK" "$1" >/dev/null || fail "hook ns-hosts $1: ${HOOK_REPLY:-no reply}"; }
mask_checks() {
    t 60 nvme connect -t tcp -a "$NVME_ADDR" -s "$NVME_PORT" -n "$NQN_MASK" >/tmp/mask.txt 2>&1 \
        || fail "connect: $(tail -n 2 /tmp/mask.txt | tr '\n' ' ')"
    _d1=$(wait_ns_nsid "$NQN_MASK" 1 30) || fail "no block device for namespace 1"
    _c=$(ctrls_for_nqn "$NQN_MASK" | head -n 1)
    [ -n "$_c" ] || fail "no controller of $NQN_MASK"
    _l=$(mask_nsids "$_c") || fail "$_l"
    [ "$_l" = "1 " ] || fail "active namespaces '$_l' while namespace 2 is $ACL_OTHER's; want 1"
    ns_dev_nsid "$NQN_MASK" 2 >/dev/null && fail "a block device for namespace 2, which this host must not see"
    dd_verify "$_d1" 1 4 mask-ns1
    # admin commands naming namespace 2 anyway (the kernel refuses I/O
    # passthru whose NSID is not the device's): Identify Namespace all
    # zeroes, Get Features 84h (write protection) Invalid Namespace
    t 30 nvme id-ns "/dev/$_c" -n 2 >/tmp/mask-id.txt 2>&1 || fail "id-ns -n 2: $(tail -n 1 /tmp/mask-id.txt)"
    _z=$(field nsze </tmp/mask-id.txt)
    [ -n "$_z" ] && [ $((_z)) -eq 0 ] || fail "Identify Namespace 2 gives nsze '$_z' to a host it is hidden from; want 0"
    t 30 nvme get-feature "/dev/$_c" -f 0x84 -n 2 >/tmp/mask-gf.txt 2>&1 && fail "Get Features 84h of hidden namespace 2 succeeded: $(tail -n 1 /tmp/mask-gf.txt)"
    grep -qi "invalid namespace\|0x400b\|0x4b" /tmp/mask-gf.txt \
        || fail "Get Features 84h of hidden namespace 2: $(tail -n 2 /tmp/mask-gf.txt | tr '\n' ' '), want Invalid Namespace or Format"
    info "hidden namespace 2: Identify nsze 0, Get Features: $(grep -i "invalid" /tmp/mask-gf.txt | head -n 1)"
    mask_set "$HOSTNQN"
    _d2=$(wait_ns_nsid "$NQN_MASK" 2 30) || fail "namespace 2 did not appear within 30 s of being shown to $HOSTNQN"
    _l=$(mask_nsids "$_c") || fail "$_l"
    [ "$_l" = "1 2 " ] || fail "active namespaces '$_l' after namespace 2 was shown; want 1 2"
    t 30 nvme id-ns "/dev/$_c" -n 2 >/tmp/mask-id.txt 2>&1 || fail "id-ns -n 2: $(tail -n 1 /tmp/mask-id.txt)"
    _z=$(field nsze </tmp/mask-id.txt)
    [ -n "$_z" ] && [ $((_z)) -eq 32768 ] || fail "Identify Namespace 2 gives nsze '$_z' once shown; want 32768 (16 MiB)"
    dd_verify "$_d2" 1 4 mask-ns2
    info "namespace 2 shown to $HOSTNQN: $_d2 appeared on $_c (no reconnect)"
    mask_set none
    _i=0
    while ns_dev_nsid "$NQN_MASK" 2 >/dev/null; do
        _i=$((_i + 1)); [ $_i -le 150 ] || fail "namespace 2's block device still there 30 s after it was hidden"
        sleep 0.2
    done
    _l=$(mask_nsids "$_c") || fail "$_l"
    [ "$_l" = "1 " ] || fail "active namespaces '$_l' after namespace 2 was hidden; want 1"
    [ "$(cat "/sys/class/nvme/$_c/state")" = live ] || fail "$_c not live after namespace 2 was hidden"
    dd_verify "$_d1" 5 4 mask-ns1-after
    info "namespace 2 hidden again: its block device went, namespace 1 still does I/O"
}
kh_ns_masking() {
    if [ "$TARGET" = kernel-guest ]; then
        info "nvmet has no namespace masking: nothing to check"
        return 0
    fi
    HOSTNQN=$(cat /etc/nvme/hostnqn)
    hook_call add-subsystem 60 "$NQN_MASK" mask "$ACL_OTHER" || fail "add $NQN_MASK: ${HOOK_REPLY:-no reply}"
    subsys_checks "$NQN_MASK" mask_checks
}

NQN_QMAX=$NQN-qmax
# qmax_subsys add|limit N|unlink|remove: the subsystem NQN_QMAX (a 16 MiB
# namespace) with at most N I/O queues per controller; "unlink" takes it off
# the port (our target: out of the configuration) while hosts are connected
qmax_subsys() {
    _s=$NVMET/subsystems/$NQN_QMAX
    if [ "$TARGET" = kernel-guest ]; then
        case $1 in
            add) mkdir "$_s" && echo 1 >"$_s/attr_allow_any_host" && echo "$2" >"$_s/attr_qid_max" \
                && truncate -s 16M /srv/qmax.img && mkdir "$_s/namespaces/1" \
                && echo -n /srv/qmax.img >"$_s/namespaces/1/device_path" && echo 1 >"$_s/namespaces/1/enable" \
                && ln -s "$_s" "$NVMET/ports/1/subsystems/$NQN_QMAX" ;;
            limit) echo "$2" >"$_s/attr_qid_max" ;;
            unlink) rm -f "$NVMET/ports/1/subsystems/$NQN_QMAX" ;;
            remove) rm -f "$NVMET/ports/1/subsystems/$NQN_QMAX"
                [ -d "$_s" ] || return 0
                echo 0 >"$_s/namespaces/1/enable"; rmdir "$_s/namespaces/1" "$_s" && rm -f /srv/qmax.img ;;
        esac
    else
        case $1 in
            add) hook_call add-subsystem 60 "$NQN_QMAX" qmax "$2" ;;
            limit) hook_call max-io-queues 60 "$NQN_QMAX" "$2" ;;
            unlink | remove) hook_call remove-subsystem 60 "$NQN_QMAX" || [ "$1" = remove ] ;;
        esac || { echo "${HOOK_REPLY:-no reply}"; return 1; }
    fi
}
# qmax_queues CTRL N SECS: wait until CTRL is live with N I/O queues
# (queue_count counts the admin queue too) and blk-mq maps N hardware queues
qmax_queues() {
    _dl=$(( $(date +%s) + $3 ))
    while [ "$(date +%s)" -le $_dl ]; do
        _qc=$(cat "/sys/class/nvme/$1/queue_count" 2>/dev/null)
        _path=$(ls -d /sys/class/nvme/"$1"/nvme*n* 2>/dev/null | head -n 1)
        _mq=$(ls "$_path/mq" 2>/dev/null | wc -l)
        [ "$(cat "/sys/class/nvme/$1/state" 2>/dev/null)" = live ] && [ "$_qc" = $(( $2 + 1 )) ] \
            && [ "$_mq" = "$2" ] && return 0
        sleep 0.2
    done
    echo "state $(cat "/sys/class/nvme/$1/state" 2>/dev/null), queue_count $_qc, blk-mq $_mq"
    return 1
}
qmax_checks() {
    t 60 nvme connect -t tcp -a "$NVME_ADDR" -s "$NVME_PORT" -n "$NQN_QMAX" -i 2 --reconnect-delay=1 \
        --ctrl-loss-tmo=30 || fail "nvme connect to $NQN_QMAX failed"
    _d=$(wait_ns_dev "$NQN_QMAX" 30) || fail "no namespace block device for $NQN_QMAX within 30s"
    _c=$(ctrls_for_nqn "$NQN_QMAX" | head -n 1)
    _out=$(qmax_queues "$_c" 1 10) || fail "asked for 2 I/O queues with a limit of 1: $_out"
    info "limit 1: $_c has 1 I/O queue (asked for 2)"
    t 60 dd if=/dev/urandom of=/tmp/qmax-pat bs=1M count=2 2>/dev/null
    t 60 dd if=/tmp/qmax-pat of="$_d" bs=1M seek=8 oflag=direct conv=fsync 2>/dev/null || fail "dd write"
    _r0=$(dmesg | grep -c "$_c: Successfully reconnected")
    _t0=$(now_ms)
    _out=$(qmax_subsys limit 2) || fail "limit 2: $_out"
    _out=$(qmax_queues "$_c" 2 30) || fail "no reconnect with 2 I/O queues within 30 s of the new limit: $_out"
    [ "$(dmesg | grep -c "$_c: Successfully reconnected")" -gt "$_r0" ] || fail "no reconnect in the host's log"
    info "limit 2: $_c reconnected with 2 I/O queues $(( $(now_ms) - _t0 )) ms after the change"
    _sum=$(t 60 dd if="$_d" bs=1M skip=8 count=2 iflag=direct 2>/dev/null | md5sum | cut -d' ' -f1)
    [ "$_sum" = "$(md5sum </tmp/qmax-pat | cut -d' ' -f1)" ] || fail "data written before the reconnect changed"
    dd_verify "$_d" 0 4 qmax
    _t0=$(now_ms)
    _out=$(qmax_subsys unlink) || fail "unlink: $_out"
    # The host's reconnect gets Connect Invalid Parameters with DNR and it
    # removes the controller, well before ctrl-loss-tmo (30 s).
    wait_no_ctrl "$NQN_QMAX" 20 || fail "$_c still present 20 s after its subsystem was removed"
    info "subsystem removed while connected: $_c gone after $(( $(now_ms) - _t0 )) ms"
    rm -f /tmp/qmax-pat
}
# hooked_subsystem NQN CHECKS ARGS...: hook "add-subsystem NQN ARGS", CHECKS
# in a subshell, then the host's controllers of NQN disconnected and the
# subsystem removed whatever CHECKS did; the step fails where CHECKS failed
hooked_subsystem() {
    _nqn=$1 _checks=$2
    shift 2
    hook_call add-subsystem 60 "$_nqn" "$@" || fail "add $_nqn: ${HOOK_REPLY:-no reply}"
    ( $_checks )
    _rc=$?
    t 30 nvme disconnect -n "$_nqn" >/dev/null 2>&1
    wait_no_ctrl "$_nqn" 10 || info "a controller of $_nqn is still present"
    hook_call remove-subsystem 60 "$_nqn" >/dev/null || info "remove $_nqn: ${HOOK_REPLY:-no reply}"
    [ $_rc = 0 ] || exit 1
}
NQN_QOS=$NQN-qos
qos_checks() {
    t 60 nvme connect -t tcp -a "$NVME_ADDR" -s "$NVME_PORT" -n "$NQN_QOS" >/dev/null 2>&1 || fail "nvme connect $NQN_QOS failed"
    _d=$(wait_ns_dev "$NQN_QOS" 30) || fail "no namespace block device for $NQN_QOS"
    _c=$(ctrls_for_nqn "$NQN_QOS" | head -n 1)
    _r0=$(dmesg | grep -c -E "$_c.*(timeout|reset)")
    t 60 fio --name=qos --filename="$_d" --ioengine=libaio --direct=1 --rw=randread --bs=4k --iodepth=16 \
        --size=16M --time_based --runtime=4 --output-format=terse --terse-version=3 --output=/tmp/qos.fio \
        >/dev/null 2>&1 || fail "fio: $(cat /tmp/qos.fio 2>/dev/null)"
    # terse v3: field 5 the error, 8 the read IOPS
    _err=$(awk -F';' '{print $5; exit}' /tmp/qos.fio); _iops=$(awk -F';' '{print $8; exit}' /tmp/qos.fio)
    info "fio randread QD16 at qos_iops = 200: $_iops IOPS, error $_err"
    [ "$_err" = 0 ] || fail "fio error $_err"
    [ -n "$_iops" ] && [ "$_iops" -le 230 ] && [ "$_iops" -ge 100 ] || fail "$_iops IOPS, want 100..230 (limit 200)"
    [ "$(cat /sys/class/nvme/"$_c"/state)" = live ] || fail "$_c is $(cat /sys/class/nvme/"$_c"/state)"
    [ "$(dmesg | grep -c -E "$_c.*(timeout|reset)")" = "$_r0" ] || fail "$_c: $(dmesg | grep "$_c" | tail -n 2)"
}
kh_qos() {
    if [ "$TARGET" = kernel-guest ]; then
        info "nvmet has no per-namespace rate limits: left out"
        return 0
    fi
    hooked_subsystem "$NQN_QOS" qos_checks qos 200
}

NQN_ZONED=$NQN-zoned
# zoned_append DEV ZSLBA: nvme zns zone-append of /tmp/zoned-4k; echo the LBA
# it reports (nvme-cli prints it in hex)
zoned_append() {
    t 30 nvme zns zone-append "$1" -s "$2" -z 4096 -d /tmp/zoned-4k >/tmp/zoned-append.txt 2>&1 \
        || { cat /tmp/zoned-append.txt; return 1; }
    _l=$(awk '/LBA/{print $NF}' /tmp/zoned-append.txt | tail -n 1)
    case $_l in 0x*) ;; *) _l=0x$_l ;; esac
    echo $((_l))
}
zoned_checks() {
    t 60 nvme connect -t tcp -a "$NVME_ADDR" -s "$NVME_PORT" -n "$NQN_ZONED" >/dev/null 2>&1 || fail "nvme connect $NQN_ZONED failed"
    _d=$(wait_ns_dev "$NQN_ZONED" 30) || fail "no namespace block device for $NQN_ZONED"
    _b=/sys/block/${_d##*/}
    _q=$_b/queue
    info "$_d: zoned $(cat $_q/zoned), nr_zones $(cat $_q/nr_zones), chunk_sectors $(cat $_q/chunk_sectors), max_open_zones $(cat $_q/max_open_zones), max_active_zones $(cat $_q/max_active_zones), ro $(cat $_b/ro)"
    [ "$(cat $_q/zoned)" = host-managed ] || fail "not host-managed: $(dmesg | grep -i zone | tail -n 2)"
    [ "$(cat $_q/nr_zones)" = 4 ] && [ "$(cat $_q/chunk_sectors)" = 8192 ] || fail "want 4 zones of 8192 sectors"
    [ "$(cat $_q/max_open_zones)" = 2 ] && [ "$(cat $_q/max_active_zones)" = 3 ] || fail "want max_open_zones 2, max_active_zones 3"
    [ "$(cat $_b/ro)" = 0 ] || fail "read-only: $(dmesg | grep -i 'zone append' | tail -n 1)"
    # The block layer's zoned writes: fio writes zones 0-1 in order and verifies.
    t 120 fio --name=zbd --filename="$_d" --ioengine=psync --direct=1 --zonemode=zbd --rw=write --bs=64k \
        --offset=0 --size=8M --verify=crc32c --do_verify=1 --output-format=terse --terse-version=3 \
        --output=/tmp/zoned.fio >/dev/null 2>&1 || fail "fio: $(cat /tmp/zoned.fio 2>/dev/null)"
    _err=$(awk -F';' '{print $5; exit}' /tmp/zoned.fio)
    [ "$_err" = 0 ] || fail "fio error $_err"
    info "fio --zonemode=zbd wrote and verified zones 0-1"
    head -c 4096 /dev/urandom >/tmp/zoned-4k
    t 30 dd if=/tmp/zoned-4k of="$_d" bs=4k count=1 oflag=direct 2>/dev/null && fail "a write to a full zone was accepted"
    # Zone 2 through passthrough commands.
    _z=16384
    _l1=$(zoned_append "$_d" $_z) || fail "zone-append: $_l1"
    _l2=$(zoned_append "$_d" $_z) || fail "zone-append: $_l2"
    info "zone appends to zone 2 (LBA $_z) went to LBAs $_l1 and $_l2"
    [ "$_l1" = $_z ] && [ "$_l2" = $((_z + 8)) ] || fail "appends at $_l1, $_l2; want $_z, $((_z + 8))"
    t 30 nvme write "$_d" -s $_z -c 7 -z 4096 -d /tmp/zoned-4k >/tmp/zoned-write.txt 2>&1 \
        && fail "a write at the zone's start, behind its write pointer, was accepted"
    grep -qi -E 'invalid.?write|1bc' /tmp/zoned-write.txt || fail "write refused with: $(cat /tmp/zoned-write.txt)"
    info "write behind the write pointer: $(tail -n 1 /tmp/zoned-write.txt)"
    _sum=$(t 30 dd if="$_d" bs=4k skip=$((_z / 8 + 1)) count=1 iflag=direct 2>/dev/null | md5sum | cut -d' ' -f1)
    [ "$_sum" = "$(md5sum </tmp/zoned-4k | cut -d' ' -f1)" ] || fail "appended data reads back differently"
    t 30 nvme zns reset-zone "$_d" -s $_z >/tmp/zoned-reset.txt 2>&1 || fail "reset-zone: $(cat /tmp/zoned-reset.txt)"
    _l3=$(zoned_append "$_d" $_z) || fail "zone-append after reset: $_l3"
    [ "$_l3" = $_z ] || fail "append after reset at $_l3, want $_z"
    t 30 nvme zns report-zones "$_d" >/tmp/zoned-report.txt 2>&1 || fail "report-zones: $(cat /tmp/zoned-report.txt)"
    [ "$(grep -c SLBA /tmp/zoned-report.txt)" = 4 ] || fail "report-zones: $(cat /tmp/zoned-report.txt)"
    info "report-zones: $(grep SLBA /tmp/zoned-report.txt | tr -s ' ' | tr '\n' ';')"
    rm -f /tmp/zoned-4k
}
kh_zoned() {
    if [ "$TARGET" = kernel-guest ]; then
        info "nvmet exports zoned block devices only: left out"
        return 0
    fi
    hooked_subsystem "$NQN_ZONED" zoned_checks zoned
}

# managed_subsystem NQN MANAGE CHECKS [ARGS...]: "MANAGE add ARGS", CHECKS in a
# subshell, then the host's controllers of NQN disconnected and "MANAGE
# remove" whatever CHECKS did; the step fails where CHECKS failed
managed_subsystem() {
    _nqn=$1 _manage=$2 _checks=$3
    shift 3
    _out=$($_manage add "$@") || fail "add $_nqn: $_out"
    ( $_checks )
    _rc=$?
    t 30 nvme disconnect -n "$_nqn" >/dev/null 2>&1
    wait_no_ctrl "$_nqn" 10 || info "a controller of $_nqn is still present"
    _out=$($_manage remove) || fail "remove $_nqn: $_out"
    [ $_rc = 0 ] || exit 1
}
kh_queue_limit() {
    managed_subsystem "$NQN_QMAX" qmax_subsys qmax_checks 1
}

NQN_PORTS=$NQN-ports
# ports_subsys add|move|remove: NQN_PORTS on port 2 only (add), then on
# port 1 only (move); our target: hooks add-subsystem "ports 2",
# subsystem-ports (config + SIGHUP); nvmet: its ports/N/subsystems links,
# with NQN on port 2 too (nvmet stops listening on a port left without
# subsystems, and the host would retry until ctrl-loss-tmo; ours keeps
# every port, NQN is on both)
ports_subsys() {
    _s=$NVMET/subsystems/$NQN_PORTS
    if [ "$TARGET" = kernel-guest ]; then
        case $1 in
            add) _p=$NVMET/ports/2
                mkdir "$_p" && echo tcp >"$_p/addr_trtype" && echo ipv4 >"$_p/addr_adrfam" \
                    && echo "$NVME_ADDR2" >"$_p/addr_traddr" && echo "$NVME_PORT2" >"$_p/addr_trsvcid" \
                    && echo "$PORT2_INLINE" >"$_p/param_inline_data_size" \
                    && echo "$PORT2_QUEUE" >"$_p/param_max_queue_size" \
                    && mkdir "$_s" && echo 1 >"$_s/attr_allow_any_host" && truncate -s 16M /srv/ports.img \
                    && mkdir "$_s/namespaces/1" && echo -n /srv/ports.img >"$_s/namespaces/1/device_path" \
                    && echo 1 >"$_s/namespaces/1/enable" && ln -s "$_s" "$_p/subsystems/$NQN_PORTS" \
                    && ln -s "$NVMET/subsystems/$NQN" "$_p/subsystems/$NQN" ;;
            move) ln -s "$_s" "$NVMET/ports/1/subsystems/$NQN_PORTS" && rm "$NVMET/ports/2/subsystems/$NQN_PORTS" ;;
            remove) rm -f "$NVMET/ports/1/subsystems/$NQN_PORTS" "$NVMET/ports/2/subsystems/$NQN_PORTS" \
                    "$NVMET/ports/2/subsystems/$NQN"
                rmdir "$NVMET/ports/2" 2>/dev/null
                [ -d "$_s" ] || return 0
                echo 0 >"$_s/namespaces/1/enable"; rmdir "$_s/namespaces/1" "$_s" && rm -f /srv/ports.img ;;
        esac
    else
        case $1 in
            add) hook_call add-subsystem 60 "$NQN_PORTS" ports 2 ;;
            move) hook_call subsystem-ports 60 "$NQN_PORTS" 1 ;;
            remove) hook_call remove-subsystem 60 "$NQN_PORTS" ;;
        esac || { echo "hook: ${HOOK_REPLY:-no reply}"; return 1; }
    fi
}
# ports_portids ADDR PORT: the PORTID of each discovery log entry of NQN_PORTS
# that `nvme discover` through ADDR:PORT lists, one per line
ports_portids() {
    t 30 nvme discover -t tcp -a "$1" -s "$2" >/tmp/ports-disc.txt 2>&1 || { cat /tmp/ports-disc.txt; return 1; }
    awk -v n="$NQN_PORTS" '/^portid:/{p=$2} /^subnqn:/{if ($2 == n) print p}' /tmp/ports-disc.txt
}
ports_connect() { # ports_connect ADDR PORT
    t 60 nvme connect -t tcp -a "$1" -s "$2" -n "$NQN_PORTS" --reconnect-delay=1 --ctrl-loss-tmo=30 \
        >/tmp/ports-connect.txt 2>&1
}
# Port 2's own queue limits (run.sh's [[port]] in_capsule_data and
# max_queue_entries; nvmet's param_inline_data_size, param_max_queue_size);
# port 1 has the defaults: ours 128 KiB and 1024, nvmet's 16 KiB and 1024.
PORT2_INLINE=8192 PORT2_QUEUE=64
# ports_limits CTRL INLINE QUEUE WHERE: the controller reports the port's
# IOCCSZ ((64 + INLINE) / 16) and MAXCMD, and the host sized its queues to
# them (sysfs sqsize: nvme connect's 128 entries, cut to MQES + 1)
ports_limits() {
    t 30 nvme id-ctrl "/dev/$1" >/tmp/ports-id.txt || fail "nvme id-ctrl $1 failed"
    _ioccsz=$(field ioccsz </tmp/ports-id.txt) _maxcmd=$(field maxcmd </tmp/ports-id.txt)
    _sq=$(cat "/sys/class/nvme/$1/sqsize" 2>/dev/null)
    _want_sq=$(( $3 < 128 ? $3 - 1 : 127 ))
    [ "$_ioccsz" = $(( (64 + $2) / 16 )) ] && [ "$_maxcmd" = "$3" ] && [ "$_sq" = "$_want_sq" ] \
        || fail "$4: ioccsz $_ioccsz maxcmd $_maxcmd sqsize $_sq, want $(( (64 + $2) / 16 )) $3 $_want_sq"
    info "$4: ioccsz $_ioccsz ($2 bytes in the capsule), maxcmd $_maxcmd, host sqsize $_sq"
}
ports_checks() {
    # Listed under port 2 only (nvmet lists the asking port's links only: not
    # at all through port 1; ours every port's, so port 2's entry there too).
    _ids=$(ports_portids "$NVME_ADDR2" "$NVME_PORT2") || fail "nvme discover through port 2: $_ids"
    [ "$_ids" = 2 ] || fail "through port 2 the log lists $NQN_PORTS with PORTIDs '$_ids', want 2"
    _ids=$(ports_portids "$NVME_ADDR" "$NVME_PORT") || fail "nvme discover through port 1: $_ids"
    case " $(echo $_ids) " in *" 1 "*) fail "through port 1 the log lists $NQN_PORTS under port 1: '$_ids'" ;; esac
    info "discovery: $NQN_PORTS under port 2 only (PORTIDs through port 1: '$(echo $_ids)')"
    # With discovery_filter "address,svcid" (hook discovery-filter, SIGHUP) our
    # log lists the asking port only, as nvmet's always does: through port 1,
    # no entry of NQN_PORTS at all, and every entry's PORTID is 1 (referrals
    # aside).
    if [ "$TARGET" != kernel-guest ]; then
        hook_call discovery-filter 60 address,svcid || fail "hook discovery-filter: ${HOOK_REPLY:-no reply}"
    fi
    _ids=$(ports_portids "$NVME_ADDR" "$NVME_PORT") || fail "nvme discover through port 1: $_ids"
    [ -z "$_ids" ] || fail "through port 1 the asking-port-only log lists $NQN_PORTS with PORTIDs '$(echo $_ids)'"
    _all=$(awk '/^subtype:/{ref = /referral/} /^portid:/{if (!ref) print $2}' /tmp/ports-disc.txt | sort -u | tr '\n' ' ')
    [ "$_all" = "1 " ] || fail "through port 1 the asking-port-only log has PORTIDs '$_all', want 1 only"
    _ids=$(ports_portids "$NVME_ADDR2" "$NVME_PORT2") || fail "nvme discover through port 2: $_ids"
    [ "$_ids" = 2 ] || fail "through port 2 the asking-port-only log lists $NQN_PORTS with PORTIDs '$_ids', want 2"
    info "asking port only: through port 1 PORTIDs '$(echo $_all)' (no $NQN_PORTS), through port 2 $NQN_PORTS under 2"
    if [ "$TARGET" != kernel-guest ]; then
        hook_call discovery-filter 60 match_any || fail "hook discovery-filter: ${HOOK_REPLY:-no reply}"
    fi
    ports_connect "$NVME_ADDR" "$NVME_PORT" && fail "connect through port 1, where it is not exported, succeeded"
    wait_no_ctrl "$NQN_PORTS" 15 || fail "a controller of $NQN_PORTS is left after the refused connect"
    info "connect through port 1 refused: $(tail -n 1 /tmp/ports-connect.txt)"
    ports_connect "$NVME_ADDR2" "$NVME_PORT2" || fail "connect through port 2: $(tail -n 2 /tmp/ports-connect.txt | tr '\n' ' ')"
    _d=$(wait_ns_dev "$NQN_PORTS" 30) || fail "no namespace block device for $NQN_PORTS"
    _c=$(ctrls_for_nqn "$NQN_PORTS" | head -n 1)
    ports_limits "$_c" "$PORT2_INLINE" "$PORT2_QUEUE" "through port 2"
    dd_verify "$_d" 0 2 ports-2
    # Moved to port 1: the controller through port 2 is deleted, its
    # reconnect there refused with DNR, and the host removes it well
    # before ctrl-loss-tmo (30 s).
    _t0=$(now_ms)
    _out=$(ports_subsys move) || fail "move to port 1: $_out"
    wait_no_ctrl "$NQN_PORTS" 20 || fail "$_c still present 20 s after its subsystem left port 2"
    info "moved to port 1 while connected through port 2: $_c gone after $(( $(now_ms) - _t0 )) ms"
    _ids=$(ports_portids "$NVME_ADDR" "$NVME_PORT") || fail "nvme discover through port 1: $_ids"
    [ "$_ids" = 1 ] || fail "after the move, through port 1 the log lists $NQN_PORTS with PORTIDs '$_ids', want 1"
    ports_connect "$NVME_ADDR" "$NVME_PORT" || fail "connect through port 1 after the move: $(tail -n 2 /tmp/ports-connect.txt | tr '\n' ' ')"
    _d=$(wait_ns_dev "$NQN_PORTS" 30) || fail "no namespace block device for $NQN_PORTS through port 1"
    if [ "$TARGET" = kernel-guest ]; then _inline=16384; else _inline=131072; fi
    ports_limits "$(ctrls_for_nqn "$NQN_PORTS" | head -n 1)" "$_inline" 1024 "through port 1"
    dd_verify "$_d" 0 2 ports-1
}
kh_port_link() {
    if [ "$TARGET" = kernel-guest ]; then : "${NVME_ADDR2:=127.0.0.1}" "${NVME_PORT2:=4421}"; fi
    [ -n "${NVME_ADDR2:-}" ] || fail "no second port (NVME_ADDR2)"
    managed_subsystem "$NQN_PORTS" ports_subsys ports_checks
}

NQN_AUTH=$NQN-auth
# auth_connect [nvme connect options]: nvme connect to NQN_AUTH (output in /tmp/auth.txt)
auth_connect() {
    t 60 nvme connect -t tcp -a "$NVME_ADDR" -s "$NVME_PORT" -n "$NQN_AUTH" "$@" >/tmp/auth.txt 2>&1
}
# auth_refused WHY [options]: the connect must fail and leave no controller
auth_refused() {
    _why=$1; shift
    auth_connect "$@" && fail "connect with $_why succeeded"
    wait_no_ctrl "$NQN_AUTH" 15 || fail "a controller of $NQN_AUTH is left after the refused connect ($_why)"
    info "refused with $_why: $(tail -n 1 /tmp/auth.txt)"
}
# auth_io TAG: the namespace works
auth_io() {
    _d=$(wait_ns_dev "$NQN_AUTH" 30) || fail "no namespace block device for $NQN_AUTH ($1)"
    dd_verify "$_d" 1 4 "auth-$1"
}
auth_disconnect() {
    t 30 nvme disconnect -n "$NQN_AUTH" >/dev/null 2>&1
    wait_no_ctrl "$NQN_AUTH" 15 || fail "a controller of $NQN_AUTH is left after disconnect"
}
auth_checks() { # auth_checks HOSTKEY CTRLKEY WRONGKEY
    auth_refused "no secret"
    auth_refused "a wrong secret" --dhchap-secret="$3"
    auth_connect --dhchap-secret="$1" || fail "connect with the host secret failed: $(tail -n 2 /tmp/auth.txt | tr '\n' ' ')"
    auth_io unidirectional
    _c=$(ctrls_for_nqn "$NQN_AUTH" | head -n 1)
    _q=$(ls -d /sys/class/nvme/"$_c"/*q* 2>/dev/null | wc -l)
    # Re-authentication on demand: writing the secret makes the host run
    # DH-HMAC-CHAP again on every queue (nvme_ctrl_dhchap_secret_store).
    _r0=$(dmesg | grep -c "$_c: qid .*authentication failed")
    echo "$1" >/sys/class/nvme/"$_c"/dhchap_secret || fail "write dhchap_secret"
    sleep 2
    [ "$(cat /sys/class/nvme/"$_c"/state)" = live ] || fail "$_c is $(cat /sys/class/nvme/"$_c"/state) after re-authentication"
    [ "$(dmesg | grep -c "$_c: qid .*authentication failed")" = "$_r0" ] || fail "re-authentication failed: $(dmesg | grep "$_c" | tail -n 2)"
    auth_io re-authenticated
    auth_disconnect
    auth_connect --dhchap-secret="$1" --dhchap-ctrl-secret="$2" \
        || fail "connect with host and controller secrets failed: $(tail -n 2 /tmp/auth.txt | tr '\n' ' ')"
    auth_io bidirectional
    auth_disconnect
    auth_refused "a wrong controller secret" --dhchap-secret="$1" --dhchap-ctrl-secret="$3"
}
kh_auth() {
    HOSTNQN=$(cat /etc/nvme/hostnqn)
    _hk=$(gen_key 32 1 "$HOSTNQN") || fail "nvme gen-dhchap-key: $_hk"
    _ck=$(gen_key 48 2 "$NQN_AUTH") || fail "nvme gen-dhchap-key (controller): $_ck"
    _bad=$(gen_key 32 1 "$HOSTNQN") || fail "nvme gen-dhchap-key (wrong): $_bad"
    info "keys: host $(echo "$_hk" | cut -c1-10)..., controller $(echo "$_ck" | cut -c1-10)..."
    if [ "$TARGET" = kernel-guest ]; then
        _h=$NVMET/hosts/$HOSTNQN
        _s=$NVMET/subsystems/$NQN_AUTH
        mkdir -p "$_h" && echo "$_hk" >"$_h/dhchap_key" && echo "$_ck" >"$_h/dhchap_ctrl_key" \
            && echo ffdhe2048 >"$_h/dhchap_dhgroup" || fail "nvmet host keys"
        mkdir "$_s" && echo 0 >"$_s/attr_allow_any_host" && ln -s "$_h" "$_s/allowed_hosts/$HOSTNQN" \
            && mkdir "$_s/namespaces/1" && truncate -s 64M /srv/auth.img \
            && echo -n /srv/auth.img >"$_s/namespaces/1/device_path" && echo 1 >"$_s/namespaces/1/enable" \
            && ln -s "$_s" "$NVMET/ports/1/subsystems/$NQN_AUTH" || fail "nvmet subsystem $NQN_AUTH"
    else
        hook_call add-subsystem 60 "$NQN_AUTH" auth "$HOSTNQN" "$_hk" "$_ck" ffdhe2048 \
            || fail "add $NQN_AUTH: ${HOOK_REPLY:-no reply}"
    fi
    ( auth_checks "$_hk" "$_ck" "$_bad" )
    _rc=$?
    t 30 nvme disconnect -n "$NQN_AUTH" >/dev/null 2>&1
    wait_no_ctrl "$NQN_AUTH" 10 || info "a controller of $NQN_AUTH is still present"
    if [ "$TARGET" = kernel-guest ]; then
        rm -f "$NVMET/ports/1/subsystems/$NQN_AUTH" "$_s/allowed_hosts/$HOSTNQN"
        echo 0 >"$_s/namespaces/1/enable"; rmdir "$_s/namespaces/1" "$_s" "$_h"; rm -f /srv/auth.img
    else
        if [ $_rc = 0 ]; then
            hook_call log-count 30 host authenticated
            case $HOOK_REPLY in *"count=0 "*|"") fail "the target logged no unidirectional authentication: $HOOK_REPLY" ;; esac
            case $HOOK_REPLY in *ffdhe2048*) ;; *) fail "not ffdhe2048: $HOOK_REPLY" ;; esac
            info "target: ${HOOK_REPLY#HOOKACK log-count 0 }"
            hook_call log-count 30 host and controller authenticated
            case $HOOK_REPLY in *"count=0 "*|"") fail "the target logged no bidirectional authentication: $HOOK_REPLY" ;; esac
            info "target: ${HOOK_REPLY#HOOKACK log-count 0 }"
        fi
        _out=$(kh_subsys remove "$NQN_AUTH") || fail "remove $NQN_AUTH: $_out"
    fi
    [ $_rc = 0 ] || exit 1
}

kh_hook_ping() {
    hook_call ping 30 hello || fail "control channel: ${HOOK_REPLY:-no reply}"
    [ "$HOOK_REPLY" = "HOOKACK ping 0 pong hello" ] || fail "ping answered '$HOOK_REPLY'"
    # A lost reply: run.sh withholds the first answer to ping-lost; asked
    # again after 2 s, it sends the answer it kept (the hook ran once).
    HOOK_RESEND=2 hook_call ping-lost 30 x || fail "no answer to the repeated request: ${HOOK_REPLY:-no reply}"
    [ "$HOOK_REPLY" = "HOOKACK ping-lost 0 pong-lost x 1" ] || fail "ping-lost answered '$HOOK_REPLY'"
    # and the next call is not answered with an old reply
    hook_call ping 30 again || fail "control channel: ${HOOK_REPLY:-no reply}"
    [ "$HOOK_REPLY" = "HOOKACK ping 0 pong again" ] || fail "ping answered '$HOOK_REPLY'"
}

kh_queues() { # kh_queues N: expect N I/O queues
    need_dev
    _qc=$(cat "/sys/class/nvme/$CTRL/queue_count" 2>/dev/null)
    # the per-path disk (nvmeXcYnZ with native multipath) is a child of the ctrl
    _path=$(ls -d /sys/class/nvme/"$CTRL"/nvme*n* 2>/dev/null | head -n 1)
    _mq=$(ls "$_path/mq" 2>/dev/null | wc -l)
    info "queue_count(incl. admin)=$_qc blk-mq hw queues=$_mq ($_path)"
    [ "$_mq" = "$1" ] || fail "expected $1 I/O queues, blk-mq has $_mq"
}

# kh_poll_io: connected with -i 1 -W 1 -P 1 (a default, a write and a poll
# queue): the target grants the three I/O queues, the block device polls
# (io_poll), and io_uring with IOPOLL (fio --hipri: completions reaped by
# polling the poll queue's socket, nvme_tcp_poll) writes and verifies
kh_poll_io() {
    need_dev
    _qc=$(cat "/sys/class/nvme/$CTRL/queue_count" 2>/dev/null)
    [ "$_qc" = 4 ] || fail "queue_count $_qc, want 4 (admin + default, write and poll queues)"
    _poll=$(cat "/sys/block/${DEV#/dev/}/queue/io_poll" 2>/dev/null)
    [ "$_poll" = 1 ] || fail "io_poll is '$_poll' with a poll queue"
    t 120 fio --name=poll-verify --filename="$DEV" --ioengine=io_uring --hipri --direct=1 \
        --rw=randrw --rwmixread=50 --bssplit=4k/60:64k/40 --iodepth=8 --size=32M --offset=64M \
        --time_based --runtime=5 --verify=crc32c --verify_fatal=1 --verify_backlog=64 --do_verify=1 \
        --serialize_overlap=1 --randrepeat=0 --output=/tmp/fio-poll.txt
    _rc=$?
    [ $_rc = 0 ] || { cat /tmp/fio-poll.txt; fail "fio --hipri rc=$_rc: $(grep -i -m1 -E 'verify|error|bad|support' /tmp/fio-poll.txt)"; }
    grep -q 'err= 0' /tmp/fio-poll.txt || { cat /tmp/fio-poll.txt; fail "fio --hipri reported errors"; }
    info "queue_count=$_qc io_poll=$_poll; fio io_uring --hipri: $(grep -E '^ *(read|write):' /tmp/fio-poll.txt | sed 's/^ *//; s/,  *BW=/ BW=/; s/ (.*//' | tr '\n' ';')"
}

# kh_deep_queue: connected with -Q 1024 (the target's MQES is 1023): the
# host's queues have 1024 entries (sqsize 1023), and fio keeps a full queue
# of 4 KiB writes and verifying reads in flight (iodepth 1024)
kh_deep_queue() {
    need_dev
    _sq=$(cat "/sys/class/nvme/$CTRL/sqsize" 2>/dev/null)
    [ "$_sq" = 1023 ] || fail "sqsize $_sq with -Q 1024, want 1023"
    t 120 fio --name=deep-verify --filename="$DEV" --ioengine=libaio --direct=1 --rw=randwrite \
        --bs=4k --iodepth=1024 --iodepth_batch_submit=64 --size=16M --offset=96M --verify=crc32c \
        --verify_fatal=1 --do_verify=1 --randrepeat=0 --output=/tmp/fio-deep.txt
    _rc=$?
    [ $_rc = 0 ] || { cat /tmp/fio-deep.txt; fail "fio iodepth 1024 rc=$_rc: $(grep -i -m1 -E 'verify|error|bad' /tmp/fio-deep.txt)"; }
    grep -q 'err= 0' /tmp/fio-deep.txt || { cat /tmp/fio-deep.txt; fail "fio iodepth 1024 reported errors"; }
    grep -q 'IO depths.*>=64=100.0%' /tmp/fio-deep.txt || { cat /tmp/fio-deep.txt; fail "fio did not keep 64+ requests in flight"; }
    info "sqsize=$_sq; fio 16 MiB of 4 KiB writes at iodepth 1024, verified: $(grep -E '^ *(read|write):' /tmp/fio-deep.txt | sed 's/^ *//; s/,  *BW=/ BW=/; s/ (.*//' | tr '\n' ';') depths $(grep -m1 'IO depths' /tmp/fio-deep.txt | sed 's/.*: *//')"
}

# tour_cmd RC PATTERN ARGS...: `nvme ARGS` exits RC and prints a line
# matching PATTERN (grep -E); the outcome is kept in /tmp/tour.log
tour_cmd() {
    _want_rc=$1 _pat=$2; shift 2
    t 30 nvme "$@" >/tmp/tour.txt 2>&1; _rc=$?
    echo "nvme $* -> $_rc: $(head -c 160 /tmp/tour.txt | tr '\n' '|')" >>/tmp/tour.log
    [ "$_rc" = "$_want_rc" ] && grep -qE -- "$_pat" /tmp/tour.txt \
        || fail "nvme $*: rc $_rc (want $_want_rc), output without /$_pat/: $(head -c 300 /tmp/tour.txt | tr '\n' '|')"
}

# kh_cli_tour: nvme-cli's admin and I/O commands as an administrator tries
# them, with nvmet 6.12's answers: what neither target offers fails with the
# same status (Invalid Command Opcode, Invalid Field, nvme-cli's own refusal
# of a subsystem reset without CAP.NSSRS); what nvmet 6.12 lacks and this
# target has (Supported Log Pages, the NVM Identify Namespace, Compare, a
# firmware slot entry) answers here and fails there as nvmet fails it
kh_cli_tour() {
    need_dev
    : >/tmp/tour.log
    _n=$(cat "/sys/block/${DEV#/dev/}/nsid")
    _c=/dev/$CTRL
    _aec=$(t 30 nvme get-feature "$_c" -f 0x0b 2>/dev/null | sed -n 's/.*Current value:\(0x[0-9a-f]*\).*/\1/p')
    [ -n "$_aec" ] || fail "get-feature 0x0b gave no value"
    tour_cmd 0 "NQN=$NQN" list-subsys
    tour_cmd 0 "^uuid +: " ns-descs "$DEV"
    tour_cmd 0 "Flush: success" flush "$DEV"
    tour_cmd 0 "Current value:0x00000001" get-feature "$_c" -f 0x06
    tour_cmd 0 "value:0x00000100" set-feature "$_c" -f 0x0b -v 0x100
    tour_cmd 0 "Current value:0x00000100" get-feature "$_c" -f 0x0b
    tour_cmd 0 "value:$_aec" set-feature "$_c" -f 0x0b -v "$_aec"
    tour_cmd 0 "^afi" fw-log "$_c"
    for _a in "write-uncor $DEV -s 0 -c 0" "format $_c -n $_n -f" "device-self-test $_c -s 1" \
        "sanitize $_c -a 2" "get-lba-status $_c -n $_n -s 0 -m 100 -a 1"; do
        # shellcheck disable=SC2086
        tour_cmd 1 "Invalid Command Opcode" $_a
    done
    for _a in "id-uuid $_c" "endurance-log $_c -g 1" "telemetry-log $_c -o /tmp/tour-tel.bin" \
        "get-feature $_c -f 0x05" "get-feature $_c -f 0x02" "get-feature $_c -f 0x08" "get-feature $_c -f 0x80" \
        "id-ns-granularity $_c" "id-nvmset $_c" "primary-ctrl-caps $_c" "list-ctrl $_c" "list-ns $_c -a" \
        "persistent-event-log $_c" "set-feature $_c -f 0x06 -v 1"; do
        # shellcheck disable=SC2086
        tour_cmd 1 "Invalid Field in Command" $_a
    done
    # Timestamp without its 8-byte buffer
    tour_cmd 1 "Data SGL Length Invalid" get-feature "$_c" -f 0x0e
    tour_cmd 1 "Subsystem Reset not supported" subsystem-reset "$_c"
    _bs=$(blockdev --getss "$DEV")
    t 30 dd if="$DEV" of=/tmp/tour-blk bs="$_bs" count=1 iflag=direct 2>/dev/null || fail "read block 0"
    if [ "$TARGET" = kernel-guest ]; then
        tour_cmd 1 "Invalid Field in Command" supported-log-pages "$_c"
        tour_cmd 1 "Invalid Field in Command" nvm-id-ns "$DEV"
        tour_cmd 1 "Invalid Command Opcode" compare "$DEV" -s 0 -c 0 -z "$_bs" -d /tmp/tour-blk
    else
        tour_cmd 0 "LID 0x2 \(SMART" supported-log-pages "$_c"
        tour_cmd 0 "^lbstm" nvm-id-ns "$DEV"
        tour_cmd 0 "^frs1 : " fw-log "$_c"
        tour_cmd 0 "compare: Success" compare "$DEV" -s 0 -c 0 -z "$_bs" -d /tmp/tour-blk
        printf '\377' | dd of=/tmp/tour-blk bs=1 seek=7 conv=notrunc 2>/dev/null
        tour_cmd 1 "Compare Failure" compare "$DEV" -s 0 -c 0 -z "$_bs" -d /tmp/tour-blk
    fi
    tour_cmd 0 "Current value:$_aec" get-feature "$_c" -f 0x0b
    info "$(wc -l </tmp/tour.log) nvme-cli commands answered as expected ($TARGET): $(cut -d' ' -f2 /tmp/tour.log | sort | uniq -c | awk '{printf "%s%s", s, $2; s=" "}')"
    rm -f /tmp/tour.txt /tmp/tour-blk /tmp/tour-tel.bin
}

kh_disconnect() { # must be clean and quick (DISCONNECT_MAX_MS)
    need_dev
    _t0=$(now_ms)
    t 60 nvme disconnect -n "$NQN" >/tmp/disc-out.txt 2>&1; _rc=$?
    cat /tmp/disc-out.txt
    [ $_rc = 0 ] || fail "nvme disconnect rc=$_rc"
    grep -q 'disconnected [1-9]' /tmp/disc-out.txt || fail "disconnect: $(cat /tmp/disc-out.txt)"
    wait_no_ctrl "$NQN" 30 || fail "controller still present 30s after disconnect"
    _dt=$(( $(now_ms) - _t0 ))
    rm -f "$STATE/dev" "$STATE/ctrl"
    info "disconnected in ${_dt} ms"
    [ "$_dt" -le "$DISCONNECT_MAX_MS" ] || fail "disconnect took ${_dt} ms (> ${DISCONNECT_MAX_MS} ms)"
}

# ---------------------------------------------------------------- RAM namespace, digests

NQN_RAM=$NQN-ram

# ram_read_check DEV BS COUNT TAG: reads DEV with direct I/O in BS pieces and
# compares with /tmp/ram-pat
ram_read_check() {
    t 60 dd if="$1" of=/tmp/ram-rb bs="$2" count="$3" iflag=direct 2>/dev/null || fail "dd read $4"
    cmp /tmp/ram-pat /tmp/ram-rb || fail "data mismatch: $4"
}

# ram_digest_checks: what kh_ram_digest checks on the connected RAM namespace
ram_digest_checks() {
    t 60 nvme connect -t tcp -a "$NVME_ADDR" -s "$NVME_PORT" -n "$NQN_RAM" -g -G \
        || fail "nvme connect -g -G to $NQN_RAM failed"
    _d=$(wait_ns_dev "$NQN_RAM" 30) || fail "no namespace block device for $NQN_RAM within 30s"
    _de0=$(dmesg | grep -c "digest error")
    t 60 dd if=/dev/urandom of=/tmp/ram-pat bs=1M count=8 2>/dev/null || fail "pattern"
    t 60 dd if=/tmp/ram-pat of="$_d" bs=1M oflag=direct conv=fsync 2>/dev/null || fail "dd write"
    # 128 KiB reads are one chunk of the RAM namespace each: the first pass
    # computes the 4 KiB block CRCs, the second joins the kept ones; 4 KiB
    # reads join one block each
    ram_read_check "$_d" 128k 64 "128k pass 1"
    ram_read_check "$_d" 128k 64 "128k pass 2"
    ram_read_check "$_d" 4k 2048 "4k"
    # 64 KiB written at 4 KiB block 25 (across a 128 KiB chunk boundary):
    # the CRCs of the blocks it changed must not be used again
    t 60 dd if=/dev/urandom of=/tmp/ram-pat2 bs=4k count=16 2>/dev/null || fail "pattern 2"
    t 60 dd if=/tmp/ram-pat2 of=/tmp/ram-pat bs=4k seek=25 conv=notrunc 2>/dev/null || fail "pattern update"
    t 60 dd if=/tmp/ram-pat2 of="$_d" bs=4k seek=25 oflag=direct conv=fsync,notrunc 2>/dev/null \
        || fail "dd overwrite"
    ram_read_check "$_d" 128k 64 "128k after overwrite"
    ram_read_check "$_d" 128k 64 "128k after overwrite, again"
    # The host retries a read that failed its digest after reconnecting, so
    # the data alone would not show a wrong digest: its log does.
    _de=$(dmesg | grep -c "digest error")
    [ "$_de" = "$_de0" ] || fail "data digest errors: $(dmesg | grep "digest error" | tail -n 2 | tr '\n' ' ')"
    info "RAM namespace $_d: 8 MiB read 5 times with header and data digests, no digest error"
    rm -f /tmp/ram-pat /tmp/ram-pat2 /tmp/ram-rb
}

kh_disconnect_under_io() { # kh_disconnect while fio keeps 32 requests in flight
    need_dev
    rm -f /tmp/fio-disc.txt
    t 90 fio --name=disconnect-under-io --filename="$DEV" --ioengine=libaio --direct=1 --rw=randrw \
        --bs=64k --iodepth=32 --size=64M --time_based --runtime=40 --output=/tmp/fio-disc.txt >/dev/null 2>&1 &
    _fpid=$!
    sleep 2
    kill -0 $_fpid 2>/dev/null || { cat /tmp/fio-disc.txt; fail "fio ended before the disconnect"; }
    kh_disconnect
    # the host failed (or finished) what was in flight: fio ends with its device gone
    _dl=$(( $(date +%s) + 30 ))
    while kill -0 $_fpid 2>/dev/null; do
        [ "$(date +%s)" -le $_dl ] || { kill -9 $_fpid; fail "fio still running 30 s after the disconnect"; }
        sleep 0.1
    done
    info "fio across the disconnect ended: $(grep -m1 -o -E 'err= *[0-9]+[^)]*' /tmp/fio-disc.txt || echo 'no summary')"
}

# Our target keeps per-4 KiB CRC32Cs of RAM namespaces and joins them into
# the data digests of later reads (backend/mem.rs): the kernel host checks
# every digest. Hook add-subsystem gives a subsystem with a 16 MiB RAM namespace.
kh_ram_digest() {
    if [ "$TARGET" = kernel-guest ]; then
        info "left out: nvmet has no RAM namespace of ours"
        return 0
    fi
    _out=$(kh_subsys add "$NQN_RAM") || fail "add $NQN_RAM: $_out"
    subsys_checks "$NQN_RAM" ram_digest_checks
}

# ---------------------------------------------------------------- keep-alive, discovery

# The discovery controller's subsystem NQN as the host's sysfs shows it: from
# Identify SUBNQN, so our target's unique discovery NQN (run.sh gives it one)
# although `nvme discover -p` connects by the well-known NQN.
DISC_NQN=nqn.2014-08.org.nvmexpress.discovery
[ "$TARGET" != kernel-guest ] && DISC_NQN=$KH_DISC_NQN
NQN2=$NQN-2

# uevent_lines DEV: the uevents seen for controller DEV (see kh_discovery_aen)
uevent_lines() { grep -c "/$1 NVME_AEN=0x70f002\$" /tmp/uevents 2>/dev/null; }

# wait_uevents DEV N SECS: until N discovery notices were seen for DEV
wait_uevents() {
    _dl=$(( $(date +%s) + $3 ))
    while [ "$(uevent_lines "$1")" -lt "$2" ]; do
        [ "$(date +%s)" -le $_dl ] || return 1
        sleep 0.1
    done
}

kh_keep_alive() {
    kh_connect -k 2
    need_dev
    _bad0=$(dmesg | grep -cE "$CTRL: .*(error recovery|Reconnecting|keep alive|keep-alive)")
    sleep 7
    _st=$(cat "/sys/class/nvme/$CTRL/state")
    [ "$_st" = live ] || fail "controller $CTRL is $_st after 7 s idle with KATO 2 s"
    _bad=$(dmesg | grep -cE "$CTRL: .*(error recovery|Reconnecting|keep alive|keep-alive)")
    [ "$_bad" = "$_bad0" ] || fail "error recovery while idle: $(dmesg | grep -E "$CTRL: " | tail -n 3 | tr '\n' ' ')"
    info "idle 7 s with KATO 2 s: $CTRL still live, no error recovery"
    dd_verify "$DEV" 0 1 after-idle
    kh_disconnect
}

kh_subsys() { # kh_subsys add|remove NQN
    if [ "$TARGET" = kernel-guest ]; then
        _s=$NVMET/subsystems/$2
        if [ "$1" = add ]; then
            mkdir "$_s" && echo 1 >"$_s/attr_allow_any_host" && ln -s "$_s" "$NVMET/ports/1/subsystems/$2"
        else
            rm -f "$NVMET/ports/1/subsystems/$2" && rmdir "$_s"
        fi
    else
        hook_call "$1-subsystem" 60 "$2" || { echo "hook $1-subsystem: ${HOOK_REPLY:-no reply}"; return 1; }
    fi
}

# disc_notice DC add|remove N: change the subsystem set by NQN2; the N-th
# discovery log change notice must reach DC, and the log then list NQN2
# (add) or not (remove)
disc_notice() {
    _th=$(now_ms)
    _out=$(kh_subsys "$2" "$NQN2") || fail "$2 $NQN2: $_out"
    wait_uevents "$1" "$3" 30 \
        || fail "no discovery log change notice #$3 on $1 within 30 s of the $2 of $NQN2 (AER not re-armed?); uevents: $(tail -n 3 /tmp/uevents | tr '\n' ';')"
    info "discovery log change notice #$3 on $1 $(( $(now_ms) - _th )) ms after the $2 of $NQN2"
    t 30 nvme discover -t tcp -a "$NVME_ADDR" -s "$NVME_PORT" >/tmp/disc$3.txt 2>&1
    # libnvme 1.3 (Debian 12) reads a log of more than 4 KiB (three entries
    # and the header) in 4 KiB pieces and sets RAE in each of them, so its
    # reads never unmask the notice (a one-piece read has RAE clear): read the
    # header once more with RAE clear, as later libnvme versions do. Our log
    # lists every port (two here), nvmet's only the one asked through.
    if [ "$(grep -c '^=====Discovery Log Entry' /tmp/disc$3.txt)" -ge 4 ]; then
        t 30 nvme get-log "/dev/$1" --log-id=0x70 --log-len=1024 >/dev/null 2>&1 \
            || fail "nvme get-log 0x70 (RAE clear) on $1 failed"
    fi
    if grep -q "subnqn: *$NQN2\$" /tmp/disc$3.txt; then
        [ "$2" = add ] || fail "discovery log still lists $NQN2 after the notice"
    else
        [ "$2" = remove ] || fail "discovery log lacks $NQN2 after the notice"
    fi
}

# disc_checks DC: what kh_discovery_aen checks on discovery controller DC
disc_checks() {
    grep -q "subnqn: *$NQN2\$" /tmp/pdisc.txt && fail "$NQN2 listed before it was added"
    # idle past 2 x KATO: the keep-alive keeps the discovery controller
    sleep 5
    _st=$(cat "/sys/class/nvme/$1/state")
    [ "$_st" = live ] || fail "discovery controller $1 is $_st after 5 s idle with KATO 2 s"
    info "persistent discovery controller $1 live after 5 s idle (KATO 2 s)"
    disc_notice "$1" add 1
    disc_notice "$1" remove 2
}

kh_discovery_aen() {
    [ -z "$(ctrls_for_nqn "$DISC_NQN")" ] || fail "a discovery controller is already connected"
    : >/tmp/uevents
    # busybox uevent runs the command for every kernel uevent (netlink), with
    # the event's variables in its environment; nvme_aen_uevent sends one on
    # the controller with NVME_AEN=<completion dword 0>
    uevent sh -c 'echo "${ACTION:-} ${DEVPATH:-} NVME_AEN=${NVME_AEN:-}" >>/tmp/uevents' </dev/null >/dev/null 2>&1 &
    _uev=$!
    sleep 0.5
    t 30 nvme discover -p -k 2 -t tcp -a "$NVME_ADDR" -s "$NVME_PORT" >/tmp/pdisc.txt 2>&1
    _rc=$?
    _dc=$(ctrls_for_nqn "$DISC_NQN" | head -n 1)
    if [ -z "$_dc" ]; then kill "$_uev"; fail "nvme discover -p (rc=$_rc) left no discovery controller: $(tail -n 1 /tmp/pdisc.txt)"; fi
    # in a subshell: its `fail` (FAILREASON, exit) must not skip the cleanup
    ( disc_checks "$_dc" )
    _rc=$?
    t 30 nvme disconnect -d "$_dc" >/dev/null 2>&1 || info "nvme disconnect -d $_dc failed"
    kill "$_uev" 2>/dev/null
    [ $_rc = 0 ] || exit 1
    wait_no_ctrl "$DISC_NQN" 10 || fail "discovery controller $_dc still present after disconnect"
}

# ---------------------------------------------------------------- twin target

twin_checks() { # twin_checks C1: C1 is the first target's controller
    t 60 nvme connect -t tcp -a "$NVME_ADDR3" -s 4420 -n "$NQN" >/tmp/twin.txt 2>&1 \
        || fail "nvme connect to the twin failed: $(tail -n 2 /tmp/twin.txt | tr '\n' ' ')"
    second_path "$1"; _found=$?
    _dups=$(dmesg | grep -ciE "duplicate cntlid|duplicate IDs|ignoring nsid")
    [ "$_dups" = "$_dups0" ] || fail "the host refused the twin: $(dmesg | grep -iE 'duplicate|ignoring' | tail -n 1)"
    [ $_found = 0 ] || fail "no second controller with a path to namespace 1: $(ctrls_for_nqn "$NQN" | tr '\n' ' ')"
    _k1=$(cat "/sys/class/nvme/$1/cntlid"); _k2=$(cat "/sys/class/nvme/$_c2/cntlid")
    [ "$_k1" -lt 1000 ] && [ "$_k2" -ge 1000 ] || fail "cntlids $_k1 and $_k2, want < 1000 and >= 1000"
    [ "$(ns_dev_for_nqn "$NQN")" = "$DEV" ] || fail "a second block device: $(ns_dev_for_nqn "$NQN"), not $DEV"
    _sub=""
    for _s in /sys/class/nvme-subsystem/*; do
        [ -e "$_s/$1" ] && [ -e "$_s/$_c2" ] && _sub=${_s##*/}
    done
    [ -e "/sys/class/nvme-subsystem/$_sub/iopolicy" ] || fail "no subsystem holding both $1 and $_c2"
    echo round-robin >"/sys/class/nvme-subsystem/$_sub/iopolicy" || fail "iopolicy round-robin"
    _a=$(path_ios "$1"); _b=$(path_ios "$_c2")
    dd_verify "$DEV" 16 8 twin
    _da=$(( $(path_ios "$1") - _a )); _db=$(( $(path_ios "$_c2") - _b ))
    [ "$_da" -gt 0 ] && [ "$_db" -gt 0 ] || fail "I/Os: $_da through $1, $_db through the twin's $_c2 (round-robin)"
    info "one subsystem $_sub: $1 (cntlid $_k1, first target) and $_c2 (cntlid $_k2, twin), one device $DEV; round-robin dd verify: $_da I/Os through the first, $_db through the twin"
}

kh_twin_target() {
    [ "$TARGET" = host ] || { info "left out: needs our target twice (TARGET=host)"; return 0; }
    [ -n "${NVME_ADDR3:-}" ] || fail "no twin address (NVME_ADDR3)"
    [ "$(cat /sys/module/nvme_core/parameters/multipath 2>/dev/null)" = Y ] || fail "nvme_core.multipath is off"
    _dups0=$(dmesg | grep -ciE "duplicate cntlid|duplicate IDs|ignoring nsid")
    hook_call start-twin 60 || fail "start-twin: ${HOOK_REPLY:-no reply}"
    kh_connect
    need_dev
    ( twin_checks "$CTRL" )
    _rc=$?
    t 30 nvme disconnect -n "$NQN" >/dev/null 2>&1
    wait_no_ctrl "$NQN" 15 || info "a controller of $NQN is still present"
    hook_call stop-twin 60 || fail "stop-twin: ${HOOK_REPLY:-no reply}"
    [ $_rc = 0 ] || exit 1
}

# ---------------------------------------------------------------- ANA multipath

# ana_path CTRL: sysfs directory of CTRL's path to namespace 1 (nvmeXcYn1)
ana_path() { ls -d /sys/class/nvme/"$1"/nvme*c*n1 2>/dev/null | head -n 1; }
# second_path C1: sets _c2 to another controller of NQN than C1 once it has
# a path to namespace 1 (up to 20 s); fails if none
second_path() {
    _c2=""
    for _i in $(seq 1 100); do
        _c2=$(ctrls_for_nqn "$NQN" | grep -vx "$1" | head -n 1)
        [ -n "$_c2" ] && [ -n "$(ana_path "$_c2")" ] && return 0
        sleep 0.2
    done
    return 1
}
ana_state_of() { cat "$(ana_path "$1")/ana_state" 2>/dev/null; }
wait_ana() { # wait_ana CTRL STATE SECS
    _dl=$(( $(date +%s) + $3 ))
    while [ "$(date +%s)" -le $_dl ]; do
        [ "$(ana_state_of "$1")" = "$2" ] && return 0
        sleep 0.2
    done
    return 1
}
# path_ios CTRL: reads + writes completed through CTRL's path
path_ios() { awk '{print $1 + $5}' "$(ana_path "$1")/stat"; }

ana_set() { # ana_set STATE_PORT1 STATE_PORT2
    if [ "$TARGET" = kernel-guest ]; then
        echo "$1" >"$NVMET/ports/1/ana_groups/1/ana_state" && echo "$2" >"$NVMET/ports/2/ana_groups/1/ana_state"
    else
        hook_call ana-state 60 "$1" "$2" >/dev/null || { echo "hook ana-state: ${HOOK_REPLY:-no reply}"; return 1; }
    fi
}

# ana_route C_ON C_OFF DEV TAG: dd verify on DEV; every I/O goes through C_ON's path
ana_route() {
    _a=$(path_ios "$1"); _b=$(path_ios "$2")
    dd_verify "$3" 8 8 "$4"
    _da=$(( $(path_ios "$1") - _a )); _db=$(( $(path_ios "$2") - _b ))
    info "$4: $_da I/Os through $1, $_db through $2"
    [ "$_da" -gt 0 ] && [ "$_db" = 0 ] || fail "$4: $_da I/Os through $1 ($(ana_state_of "$1")), $_db through $2 ($(ana_state_of "$2"))"
}

# ana_log_state CTRL STATE: `nvme ana-log` on CTRL reports group 1 in STATE
ana_log_state() {
    t 30 nvme ana-log "/dev/$1" -o json >/tmp/ana.json 2>&1 || fail "nvme ana-log /dev/$1: $(cat /tmp/ana.json)"
    tr -d ' \n' </tmp/ana.json | grep -q "\"grpid\":1,.*\"state\":\"$2\"" \
        || fail "ANA log of $1 lacks group 1 $2: $(tr -d '\n' </tmp/ana.json | cut -c1-300)"
}

# ana_refusal CTRL DEV: a read sent through CTRL's inaccessible path anyway
# (passthrough on the controller's char device, which the host's path
# selection does not reroute) fails with Asymmetric Access Inaccessible
# (0x302, no DNR), and the controller's error log has it at the NSID byte
ana_refusal() {
    t 30 nvme io-passthru "/dev/$1" -o 0x02 -n 1 -l 4096 -r --cdw10=0 --cdw11=0 \
        --cdw12=$(( 4096 / $(blockdev --getss "$2") - 1 )) >/tmp/ana-io.txt 2>&1 \
        && fail "a read through the inaccessible path $1 succeeded"
    grep -qi -e 'inaccessible' -e '(0x302)' /tmp/ana-io.txt || fail "read through $1 refused with: $(tail -n 2 /tmp/ana-io.txt)"
    t 30 nvme error-log "/dev/$1" -e 1 -o json >/tmp/ana-el.json 2>&1 || fail "nvme error-log /dev/$1: $(cat /tmp/ana-el.json)"
    _st=$(jnum status_field </tmp/ana-el.json); _pel=$(jnum parm_error_location </tmp/ana-el.json)
    _sq=$(jnum sqid </tmp/ana-el.json)
    info "read through the inaccessible path $1: $(grep -io 'asymmetric access inaccessible' /tmp/ana-io.txt | head -n 1); error log: sqid $_sq status_field $_st location $_pel"
    [ "$_st" = $((0x302)) ] && [ "$_pel" = 4 ] && [ "${_sq:-0}" -ge 1 ] \
        || fail "newest error log entry of $1: status $_st location $_pel sqid $_sq; want $((0x302)), 4 (NSID), an I/O queue"
    rm -f /tmp/ana-io.txt /tmp/ana-el.json
}

# ana_checks C1 C2 DEV: what kh_ana_multipath checks on the two paths
ana_checks() {
    for _c in "$1" "$2"; do
        wait_ana "$_c" optimized 15 || fail "path of $_c is '$(ana_state_of "$_c")', not optimized"
    done
    info "two paths to $3: $1 $(cat /sys/class/nvme/$1/address | tr '\n' ' ')and $2 $(cat /sys/class/nvme/$2/address | tr '\n' ' ')both optimized"
    _t0=$(now_ms)
    _out=$(ana_set optimized inaccessible) || fail "$_out"
    wait_ana "$2" inaccessible 15 || fail "path of $2 is '$(ana_state_of "$2")' 15 s after port 2 went inaccessible (ANA Change notice?)"
    info "path of $2 inaccessible $(( $(now_ms) - _t0 )) ms after the change"
    [ "$(ana_state_of "$1")" = optimized ] || fail "path of $1 is '$(ana_state_of "$1")'"
    ana_route "$1" "$2" "$3" ana-path1
    ana_refusal "$2" "$3"
    _out=$(ana_set inaccessible optimized) || fail "$_out"
    wait_ana "$1" inaccessible 15 || fail "path of $1 is '$(ana_state_of "$1")' 15 s after port 1 went inaccessible"
    wait_ana "$2" optimized 15 || fail "path of $2 is '$(ana_state_of "$2")' 15 s after port 2 went optimized"
    ana_log_state "$1" inaccessible
    ana_log_state "$2" optimized
    ana_route "$2" "$1" "$3" ana-path2
    _out=$(ana_set optimized optimized) || fail "$_out"
    for _c in "$1" "$2"; do
        wait_ana "$_c" optimized 15 || fail "path of $_c is '$(ana_state_of "$_c")' 15 s after both went optimized"
    done
}

kh_ana_multipath() {
    need_dev
    [ "$(cat /sys/module/nvme_core/parameters/multipath 2>/dev/null)" = Y ] || fail "nvme_core.multipath is off"
    if [ "$TARGET" = kernel-guest ]; then
        : "${NVME_ADDR2:=127.0.0.1}" "${NVME_PORT2:=4421}"
        port2_set on || fail "nvmet port 2"
    fi
    [ -n "${NVME_ADDR2:-}" ] || fail "no second path (NVME_ADDR2)"
    t 60 nvme connect -t tcp -a "$NVME_ADDR2" -s "$NVME_PORT2" -n "$NQN" || fail "nvme connect $NVME_ADDR2:$NVME_PORT2 failed"
    second_path "$CTRL" || fail "no second controller with a path to namespace 1"
    [ "$(ns_dev_for_nqn "$NQN")" = "$DEV" ] || fail "a second block device: $(ns_dev_for_nqn "$NQN"), not $DEV"
    ( ana_checks "$CTRL" "$_c2" "$DEV" )
    _rc=$?
    # Both optimized again and path 2 gone, even after a failed check.
    ana_set optimized optimized >/dev/null
    t 30 nvme disconnect -d "$_c2" >/dev/null 2>&1 || info "nvme disconnect -d $_c2 failed"
    if [ "$TARGET" = kernel-guest ]; then
        port2_set off
    fi
    [ $_rc = 0 ] || exit 1
    wait_ana "$CTRL" optimized 15 || fail "path of $CTRL is '$(ana_state_of "$CTRL")' at the end"
    rm -f /tmp/ana.json
}

# port2_set on|off: port 2 (ours: hook port2; nvmet: ports/2 on
# NVME_ADDR2:NVME_PORT2 with NQN linked) there or not
port2_set() {
    if [ "$TARGET" = kernel-guest ]; then
        _p=$NVMET/ports/2
        if [ "$1" = on ]; then
            mkdir "$_p" && echo tcp >"$_p/addr_trtype" && echo ipv4 >"$_p/addr_adrfam" \
                && echo "$NVME_ADDR2" >"$_p/addr_traddr" && echo "$NVME_PORT2" >"$_p/addr_trsvcid" \
                && ln -s "$NVMET/subsystems/$NQN" "$_p/subsystems/$NQN"
        else
            rm -f "$_p/subsystems/$NQN" && rmdir "$_p"
        fi
    else
        hook_call port2 60 "$1"
    fi
}
# wait_ctrl_state CTRL STATE|not-STATE SECS
wait_ctrl_state() {
    _dl=$(( $(date +%s) + $3 ))
    while [ "$(date +%s)" -le $_dl ]; do
        _st=$(cat "/sys/class/nvme/$1/state" 2>/dev/null)
        case $2 in
            not-*) [ -n "$_st" ] && [ "$_st" != "${2#not-}" ] && return 0 ;;
            *) [ "$_st" = "$2" ] && return 0 ;;
        esac
        sleep 0.1
    done
    return 1
}
# Port 2 removed and added back while a path runs through it (port-live):
# ours drops the [[port]] (hook "port2 off", SIGHUP) and adds it back ("port2
# on"); nvmet's ports/2 is unlinked and removed, then made again. The path
# through port 2 (ctrl-loss-tmo 60 s, reconnect every 1 s) loses its
# controller and keeps reconnecting while I/O goes on through port 1, then
# is live again once the port is back.
port_live_checks() {
    _c2=$1
    _t0=$(now_ms)
    port2_set off || fail "port 2 off: ${HOOK_REPLY:-configfs}"
    wait_ctrl_state "$_c2" not-live 15 \
        || fail "$_c2 still live 15 s after port 2 went away"
    info "port 2 removed: $_c2 $(cat "/sys/class/nvme/$_c2/state") after $(( $(now_ms) - _t0 )) ms"
    sleep 3
    _st=$(cat "/sys/class/nvme/$_c2/state" 2>/dev/null)
    [ "$_st" = connecting ] || fail "$_c2 is '$_st' 3 s into the outage, not connecting"
    [ "$(cat "/sys/class/nvme/$CTRL/state")" = live ] || fail "$CTRL (port 1) is not live during the outage"
    dd_verify "$DEV" 6 2 port-live-outage
    _t0=$(now_ms)
    port2_set on || fail "port 2 on: ${HOOK_REPLY:-configfs}"
    wait_ctrl_state "$_c2" live 20 \
        || fail "$_c2 is '$(cat "/sys/class/nvme/$_c2/state" 2>/dev/null)' 20 s after port 2 came back"
    info "port 2 back: $_c2 live again after $(( $(now_ms) - _t0 )) ms (reconnect delay 1 s)"
    wait_ana "$_c2" optimized 15 || fail "path $_c2 is '$(ana_state_of "$_c2")' after the reconnect"
    dd_verify "$DEV" 8 2 port-live-back
}
kh_port_live() {
    need_dev
    if [ "$TARGET" = kernel-guest ]; then
        : "${NVME_ADDR2:=127.0.0.1}" "${NVME_PORT2:=4421}"
        port2_set on || fail "nvmet port 2"
    fi
    [ -n "${NVME_ADDR2:-}" ] || fail "no second path (NVME_ADDR2)"
    t 60 nvme connect -t tcp -a "$NVME_ADDR2" -s "$NVME_PORT2" -n "$NQN" --reconnect-delay=1 --ctrl-loss-tmo=60 \
        >/tmp/pl-connect.txt 2>&1 || fail "nvme connect $NVME_ADDR2:$NVME_PORT2: $(tail -n 1 /tmp/pl-connect.txt)"
    second_path "$CTRL" || fail "no second controller with a path to namespace 1"
    ( port_live_checks "$_c2" )
    _rc=$?
    # Port 2 gone (nvmet: this step made it) or back (ours, after a failed
    # check) and the path disconnected.
    if [ "$TARGET" = kernel-guest ]; then
        port2_set off >/dev/null 2>&1
    elif [ $_rc != 0 ]; then
        port2_set on >/dev/null 2>&1
    fi
    t 30 nvme disconnect -d "$_c2" >/dev/null 2>&1 || info "nvme disconnect -d $_c2 failed"
    [ $_rc = 0 ] || exit 1
}

# ---------------------------------------------------------------- reconfiguration

kh_ns_add_aen() {
    need_dev
    _d2=$(ns_dev_nsid "$NQN" 2) && fail "namespace 2 already present ($_d2)"
    _t0=$(now_ms)
    if [ "$TARGET" = kernel-guest ]; then
        nvmet_add_file_ns "$NQN" 2 /srv/ns2.img "$NS2_SIZE"
    else
        hook_call add-namespace 60 2 "$NS2_SIZE" || fail "hook add-namespace: ${HOOK_REPLY:-no reply}"
    fi
    _th=$(now_ms)
    _d2=$(wait_ns_nsid "$NQN" 2 60) \
        || fail "no block device for namespace 2 within 60s (AEN/rescan missing?); target's active list: $(t 20 nvme list-ns "/dev/$CTRL" 2>&1 | tr '\n' ' ')"
    info "namespace 2 appeared as $_d2 $(( $(now_ms) - _th )) ms after the target added it"
    _bd=$(blockdev --getsize64 "$_d2")
    [ "$_bd" = "$NS2_SIZE" ] || fail "$_d2 has $_bd bytes, expected $NS2_SIZE"
    dd_verify "$_d2" 0 4 ns2
    # a pattern that must survive target-restart
    t 60 dd if=/dev/urandom of="$STATE/ns2-pat" bs=1M count=2 2>/dev/null || fail "pattern"
    t 60 dd if="$STATE/ns2-pat" of="$_d2" bs=1M seek=8 oflag=direct conv=fsync 2>/dev/null \
        || fail "dd write to $_d2"
    echo "$_d2" >"$STATE/dev2"
}

# blk_bytes_within BLK BYTES SECS: block device BLK reaches BYTES (sysfs) within SECS
blk_bytes_within() {
    _bw_dl=$(( $(date +%s) + $3 ))
    while [ $(( $(cat "/sys/block/$1/size") * 512 )) != "$2" ]; do
        [ "$(date +%s)" -le $_bw_dl ] || return 1
        sleep 0.2
    done
}
kh_ns_resize_aen() {
    need_dev
    _blk=${DEV##*/}
    _old=$(( $(cat "/sys/block/$_blk/size") * 512 ))
    _new=$(( _old + NS_GROW ))
    _om=$(( _old / 1048576 ))
    # data just below the old end must survive
    dd_write_pat() { t 60 dd if=/dev/urandom of="$1" bs=1M count="$2" 2>/dev/null && \
        t 120 dd if="$1" of="$DEV" bs=1M seek="$3" oflag=direct conv=fsync 2>/dev/null; }
    dd_write_pat /tmp/rz-pat 4 $(( _om - 4 )) || fail "writing below the old end"
    _t0=$(now_ms)
    if [ "$TARGET" = kernel-guest ]; then
        [ "$BACKEND" = file ] || fail "TARGET=kernel-guest needs BACKEND=file to resize"
        truncate -s "$_new" /srv/ns1.img || fail "truncate"
        echo 1 >"$NVMET/subsystems/$NQN/namespaces/1/revalidate_size" || fail "revalidate_size"
    else
        hook_call resize-namespace 60 1 "$_new" || fail "hook resize-namespace: ${HOOK_REPLY:-no reply}"
    fi
    _th=$(now_ms)
    blk_bytes_within "$_blk" "$_new" 60 \
        || fail "/sys/block/$_blk/size still $(cat "/sys/block/$_blk/size") sectors 60s after the resize to $_new bytes (AEN/rescan missing?); id-ns nsze now $(t 20 nvme id-ns "$DEV" 2>/dev/null | field nsze)"
    info "$_blk grew from $_old to $_new bytes, $(( $(now_ms) - _th )) ms after the target resized it"
    _bd=$(blockdev --getsize64 "$DEV")
    [ "$_bd" = "$_new" ] || fail "blockdev --getsize64 $_bd != $_new"
    t 120 dd if="$DEV" of=/tmp/rz-rb bs=1M count=4 skip=$(( _om - 4 )) iflag=direct 2>/dev/null || fail "read below the old end"
    cmp /tmp/rz-pat /tmp/rz-rb || fail "data below the old end changed by the resize"
    rm -f /tmp/rz-pat /tmp/rz-rb
    dd_verify "$DEV" $(( _new / 1048576 - 8 )) 8 grown-end
    echo "$_new" >"$STATE/ns1-size"
}

# ns-revalidate: namespace 2's file grows outside the target (hook grow-file:
# truncate only, no reload; nvmet: truncate, no revalidate_size); `nvme
# ns-rescan` makes the host read Identify Namespace, which reports the file's
# size now (nvmet_ns_revalidate), so the block device grows; its data stays
# and the new end is writable.
kh_ns_revalidate() {
    need_dev
    _d2=$(cat "$STATE/dev2" 2>/dev/null)
    [ -b "$_d2" ] || fail "no block device of namespace 2 (step ns-add-aen)"
    _blk=${_d2##*/}
    _old=$(( $(cat "/sys/block/$_blk/size") * 512 ))
    _new=$(( _old + NS_GROW ))
    if [ "$TARGET" = kernel-guest ]; then
        truncate -s "$_new" /srv/ns2.img || fail "truncate"
    else
        hook_call grow-file 60 2 "$_new" || fail "hook grow-file: ${HOOK_REPLY:-no reply}"
    fi
    [ $(( $(cat "/sys/block/$_blk/size") * 512 )) = "$_old" ] || fail "$_blk changed size before the rescan"
    _t0=$(now_ms)
    t 30 nvme ns-rescan "/dev/$CTRL" || fail "nvme ns-rescan /dev/$CTRL"
    blk_bytes_within "$_blk" "$_new" 30 \
        || fail "/sys/block/$_blk/size still $(cat "/sys/block/$_blk/size") sectors 30s after a rescan of a file grown to $_new bytes; id-ns nsze $(t 20 nvme id-ns "$_d2" 2>/dev/null | field nsze)"
    info "$_blk grew from $_old to $_new bytes with its file, $(( $(now_ms) - _t0 )) ms after nvme ns-rescan"
    t 60 dd if="$_d2" of=/tmp/rv-n2 bs=1M count=2 skip=8 iflag=direct 2>/dev/null || fail "read namespace 2"
    cmp "$STATE/ns2-pat" /tmp/rv-n2 || fail "namespace 2 data changed when it grew"
    rm -f /tmp/rv-n2
    dd_verify "$_d2" $(( _new / 1048576 - 4 )) 4 ns2-grown-end
}

kh_target_restart() {
    need_dev
    _st=/sys/class/nvme/$CTRL/state
    [ "$(cat "$_st")" = live ] || fail "controller $CTRL is $(cat "$_st") before the restart"
    if [ "$TARGET" = host ]; then
        # a registration with Persist Through Power Loss on (CPTPL 11b, as the
        # kernel's pr_ops): namespace 1 has a reservations_file
        resv_cmd resv-register "$DEV" -n 1 --nrkey=0xc3 --rrega=0 --cptpl=3
        resv_report
        [ "$(rr ptpls)" = 1 ] && [ "$(rr rkey)" = c3 ] || fail "before the restart: $(tr '\n' ' ' </tmp/rr.txt)"
    fi
    # written (and synced) before the restart
    t 60 dd if=/dev/urandom of=/tmp/rs-a bs=1M count=8 2>/dev/null || fail "pattern"
    t 120 dd if=/tmp/rs-a of="$DEV" bs=1M seek=32 oflag=direct conv=fsync 2>/dev/null || fail "write before the restart"
    # a writer that runs across the restart: 24 chunks of 1 MiB at 64 MiB, 64 KiB requests
    t 60 dd if=/dev/urandom of=/tmp/rs-b bs=1M count=24 2>/dev/null || fail "pattern"
    rm -f /tmp/rs-w.n /tmp/rs-w.t /tmp/rs-w.rc /tmp/rs-stop /tmp/rs-states
    (
        _i=0
        while [ $_i -lt 24 ]; do
            t 150 dd if=/tmp/rs-b of="$DEV" bs=64k count=16 skip=$((_i * 16)) seek=$((1024 + _i * 16)) \
                oflag=direct conv=fsync 2>/dev/null || { echo "chunk $_i: dd rc $?" >/tmp/rs-w.rc; exit 1; }
            _i=$((_i + 1)); echo $_i >/tmp/rs-w.n; echo "$(now_ms) $_i" >>/tmp/rs-w.t
        done
        echo ok >/tmp/rs-w.rc
    ) &
    _wpid=$!
    # controller states seen (bounded: 200 s)
    (
        _i=0; _last=""
        while [ $_i -lt 2000 ] && [ ! -f /tmp/rs-stop ]; do
            _s=$(cat "$_st" 2>/dev/null || echo gone)
            [ "$_s" != "$_last" ] && { echo "$(now_ms) $_s" >>/tmp/rs-states; _last=$_s; }
            sleep 0.1; _i=$((_i + 1))
        done
    ) &
    _mpid=$!
    _r0=$(dmesg | grep -c 'Successfully reconnected')
    sleep 1
    _n0=$(cat /tmp/rs-w.n 2>/dev/null || echo 0)
    _t0=$(now_ms)
    if [ "$TARGET" = kernel-guest ]; then
        nvmet_port_down "$NQN"
        sleep "$RESTART_DOWN_S"
        nvmet_port_up "$NQN" 127.0.0.1 "$NVME_PORT"
    else
        hook_call restart-target 90 || { touch /tmp/rs-stop; fail "hook restart-target: ${HOOK_REPLY:-no reply}"; }
    fi
    _how=${HOOK_REPLY#"HOOKACK restart-target 0 "}
    info "restart: ${_how:-nvmet port removed for ${RESTART_DOWN_S}s and re-created}; writer had done $_n0/24 chunks"
    _dl=$(( $(date +%s) + 90 ))
    while :; do
        _r=$(dmesg | grep -c 'Successfully reconnected')
        [ "$_r" -gt "$_r0" ] && [ "$(cat "$_st" 2>/dev/null)" = live ] && break
        [ "$(date +%s)" -le $_dl ] || { touch /tmp/rs-stop; fail "no reconnect within 90s: state $(cat "$_st" 2>/dev/null), states seen: $(cut -d' ' -f2 /tmp/rs-states | tr '\n' ' ')"; }
        sleep 0.2
    done
    info "reconnected $(( $(now_ms) - _t0 )) ms after the restart began: $(dmesg | grep 'Successfully reconnected' | tail -n 1 | sed 's/^\[[^]]*\] //')"
    _dl=$(( $(date +%s) + 150 ))
    while kill -0 $_wpid 2>/dev/null; do
        [ "$(date +%s)" -le $_dl ] || { touch /tmp/rs-stop; kill $_wpid; fail "writer still running 150s after the reconnect ($(cat /tmp/rs-w.n 2>/dev/null)/24 chunks)"; }
        sleep 0.2
    done
    touch /tmp/rs-stop
    wait $_mpid 2>/dev/null
    info "controller states: $(awk -v t="$_t0" '{printf "%s@%+dms ", $2, $1 - t}' /tmp/rs-states)"
    # when each writer chunk finished, relative to the restart (a gap of ~30 s
    # is a request the host only retried after its I/O timeout)
    info "writer chunks done at: $(awk -v t="$_t0" '{printf "%+d ", $1 - t}' /tmp/rs-w.t 2>/dev/null)ms"
    dmesg | grep -E 'nvme|I/O' | tail -n 12 | sed 's/^/dmesg: /' >&2
    [ "$(cat /tmp/rs-w.rc 2>/dev/null)" = ok ] || fail "writer across the restart failed: $(cat /tmp/rs-w.rc 2>/dev/null)"
    grep -q -v live /tmp/rs-states || info "note: never saw a non-live state (reconnect faster than 100 ms polling)"
    t 120 dd if="$DEV" of=/tmp/rs-ra bs=1M count=8 skip=32 iflag=direct 2>/dev/null || fail "read back (before)"
    cmp /tmp/rs-a /tmp/rs-ra || fail "data written before the restart differs after it"
    t 120 dd if="$DEV" of=/tmp/rs-rb bs=1M count=24 skip=64 iflag=direct 2>/dev/null || fail "read back (writer)"
    cmp /tmp/rs-b /tmp/rs-rb || fail "data of the writer running across the restart differs"
    info "8 MiB written before and 24 MiB written across the restart read back intact"
    if [ "$TARGET" = host ]; then
        resv_report
        [ "$(rr ptpls)" = 1 ] && [ "$(rr regctl)" = 1 ] && [ "$(rr rkey)" = c3 ] \
            || fail "the registration did not persist through the restart: $(tr '\n' ' ' </tmp/rr.txt)"
        # the file it persisted in, in the format configured: SPDK's JSON
        # (key 0xc3 = 195, this host's ID) or this target's TOML
        case $RESV_FORMAT in
            spdk) _want="{\"ptpl\":true,\"rtype\":0,\"crkey\":0," _want2="\"rkey\":195,\"host_uuid\":\"$(cat /etc/nvme/hostid)\"" ;;
            *) _want="ptpl = true" _want2='rkey = "0xc3"' ;;
        esac
        case $_how in
            *"$_want"*"$_want2"*) ;;
            *) fail "namespace 1's $RESV_FORMAT reservations file: $_how" ;;
        esac
        resv_cmd resv-register "$DEV" -n 1 --crkey=0xc3 --rrega=1
        info "a registration with PTPL on (key c3) persisted through the target restart in the $RESV_FORMAT format"
    fi
    rm -f /tmp/rs-a /tmp/rs-ra /tmp/rs-b /tmp/rs-rb
    dd_verify "$DEV" 128 4 after-restart
    if [ -f "$STATE/dev2" ]; then
        _d2=$(wait_ns_nsid "$NQN" 2 30) || fail "namespace 2 gone after the restart"
        t 60 dd if="$_d2" of=/tmp/rs-n2 bs=1M count=2 skip=8 iflag=direct 2>/dev/null || fail "read namespace 2"
        cmp "$STATE/ns2-pat" /tmp/rs-n2 || fail "namespace 2 data differs after the restart"
        info "namespace 2 ($_d2) still present with its data"
    fi
}

kh_final_clean() {
    [ -z "$(ctrls_for_nqn "$NQN")" ] || fail "controllers left: $(ctrls_for_nqn "$NQN")"
    if [ "$TARGET" = host ]; then
        hook_call target-check 30 || fail "target check: ${HOOK_REPLY:-no reply}"
        info "${HOOK_REPLY#HOOKACK target-check 0 }"
    fi
    if [ "$TARGET" = kernel-guest ]; then
        nvmet_teardown "$NQN"
        t 30 rmmod nvmet_tcp nvmet && info "nvmet modules unloaded" || info "nvmet modules still busy"
    fi
    info "nvme controllers left: $(ls /sys/class/nvme 2>/dev/null | wc -l)"
}

# run_control_step: run_step for a step no I/O engine touches, left out
# where KH_CONTROL=0 (the engine variants; kernel-host runs it)
run_control_step() {
    if [ "${KH_CONTROL:-1}" = 1 ]; then
        run_step "$@"
    else
        info "step $1 left out: KH_CONTROL=0 (no I/O engine in it; kernel-host runs it)"
    fi
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
    run_step error-log 40 kh_error_log
    run_step dd-verify 180 kh_dd_verify plain
    run_step smart-io 40 kh_smart_io
    run_step metrics 60 kh_metrics
    run_step copy 60 kh_copy
    run_step verify 60 kh_verify
    run_step discard 120 kh_discard
    run_step zeroout 120 kh_zeroout
    run_step fio-verify $((FIO_RUNTIME + 90)) kh_fio
    run_step reset-under-io 180 kh_reset_under_io
    run_step ext4 300 kh_ext4
    run_step write-protect 120 kh_write_protect
    run_step reservations 180 kh_reservations
    run_step pr-ioctl 180 kh_pr_ioctl
    run_step control-hook 40 kh_hook_ping
    run_step disconnect 60 kh_disconnect
    # header + data digests
    run_step connect-digest 90 kh_connect -g -G
    run_step dd-verify-digest 180 kh_dd_verify digest
    run_step disconnect-digest 60 kh_disconnect
    run_control_step ram-digest 240 kh_ram_digest
    run_step read-only-ns 180 kh_read_only_ns
    run_step block-ns 240 kh_block_ns
    run_step lbs-4k 240 kh_lbs_4k
    # two I/O queues
    run_step connect-2q 90 kh_connect -i 2
    run_step queues-2q 20 kh_queues 2
    run_step dd-verify-2q 180 kh_dd_verify 2q
    run_step disconnect-2q 90 kh_disconnect_under_io
    # default, write and poll queues: polled I/O
    run_step connect-poll 90 kh_connect -i 1 -W 1 -P 1 -Q 1024 --disable-sqflow
    run_step poll-io 120 kh_poll_io
    run_step deep-queue 120 kh_deep_queue
    run_step cli-tour 120 kh_cli_tour
    run_step disconnect-poll 60 kh_disconnect
    # two paths, ANA
    run_step connect-mp 90 kh_connect
    run_step ana-multipath 240 kh_ana_multipath
    # port 2 away and back under a path (kernel-host only: no I/O engine in it)
    if [ "${KH_PORT_LIVE:-0}" = 1 ]; then run_step port-live 120 kh_port_live; fi
    run_step disconnect-mp 60 kh_disconnect
    run_step twin-target 180 kh_twin_target
    # keep-alive and persistent discovery
    run_control_step keep-alive 90 kh_keep_alive
    run_control_step discovery-aen 180 kh_discovery_aen
    # reconfiguration while connected: AENs, target restart -> reconnect
    if [ "${KH_RECONF:-1}" = 1 ]; then
        run_step connect-reconf 90 kh_connect --reconnect-delay=1 --ctrl-loss-tmo=60
        run_step ns-add-aen 150 kh_ns_add_aen
        run_step ns-resize-aen 180 kh_ns_resize_aen
        run_step ns-revalidate 120 kh_ns_revalidate
        run_step target-restart 420 kh_target_restart
        run_step disconnect-reconf 60 kh_disconnect
    else
        info "reconfiguration steps (connect-reconf ... disconnect-reconf) left out: KH_RECONF=$KH_RECONF"
    fi
    run_control_step allowed-hosts 240 kh_allowed_hosts
    run_control_step ns-masking 180 kh_ns_masking
    run_control_step queue-limit 180 kh_queue_limit
    run_control_step port-link 180 kh_port_link
    run_control_step qos 120 kh_qos
    run_step zoned 240 kh_zoned
    run_control_step auth 300 kh_auth
    # PLACEHOLDERS (see the header): TLS.
    run_step final-clean 60 kh_final_clean
}
