# Scenario kernel-target: the Linux nvmet target in the guest, listening on
# 0.0.0.0:4420, exported to the host by QEMU hostfwd (127.0.0.1:HOSTPORT).
# After "TARGET READY" the guest asks the host to run its clients, one step
# each (HOOK run-client NAME; run.sh's client_cmd says what NAME runs) and
# waits up to CLIENT_TIMEOUT seconds for the HOOKACK carrying the client's
# exit code.  CLIENT_STEPS (from run.sh), default
#   icreq           icreq-smoke.py: ICReq/ICResp only          -> host-icreq
#   initiator       interop_initiator (our initiator library)  -> host-initiator
#   statuses        interop_statuses (statuses of bad commands) -> host-statuses
#   probe-randread  nvmeof-probe randread 4k QD8 3 s           -> host-probe-randread
#   probe-verify    nvmeof-probe write + randread --verify,    -> host-probe-verify
#                   randrw --bssplit --verify
#   admin           admin-client.sh: nvmeof flush, dsm,         -> host-admin
#                   write-zeroes, get/set-feature, show-regs
#   events          interop_initiator --rounds events          -> host-events
#                   (started in the background; the guest adds port 2 (4421)
#                   first, then makes port 1's ANA group 1 inaccessible and
#                   adds namespace 2 while the client waits for the notices
#                   and keeps I/O going through both ports; see kt_events)
#   auth            interop_initiator --rounds auth            -> host-auth
#                   (the guest makes subsystem NQN-auth for the client's
#                   host NQN with `nvme gen-dhchap-key` keys, ffdhe3072 and
#                   SHA-384, and hands them to the client; see kt_auth)
#   qmax            interop_initiator --rounds qmax            -> host-qmax
#                   (the guest makes subsystem NQN-qmax with attr_qid_max
#                   2; the client connects with 2 of 3 queues asked for,
#                   the guest lowers attr_qid_max to 1 (nvmet deletes the
#                   controller; the client reconnects and goes on with 1),
#                   then unlinks the subsystem (deleted again; the reconnect
#                   is refused with DNR and the client fails it); see kt_qmax)
#   zoned           interop_initiator --rounds zoned           -> host-zoned
#                   (the guest makes a zoned null_blk device, 4 zones of 4
#                   MiB, memory backed, and subsystem NQN-zoned over it;
#                   the client reports, writes, appends, finishes and
#                   resets zones; see kt_zoned)
# or "custom" (HOST_CLIENT_CMD)                                -> host-client
#
# Parameters: NQN, NS_SIZE (bytes), BACKEND (brd|file), CLIENT_TIMEOUT (s),
#             CLIENT_STEPS, NVME_PORT (guest-side port, default 4420)
#
# Later steps can go after host-client, e.g. checking on the target side
# what the initiator wrote (the host hook can pass an offset/md5 back in its
# HOOKACK text), or a second client round with the target reconfigured.

: "${NQN:=nqn.2026-11.io.nvmeof:interop}"
: "${NS_SIZE:=268435456}"
: "${BACKEND:=brd}"
: "${CLIENT_TIMEOUT:=300}"
: "${NVME_PORT:=4420}"
: "${CLIENT_STEPS:=custom}"
export NQN NS_SIZE BACKEND CLIENT_TIMEOUT NVME_PORT CLIENT_STEPS

kt_modules() {
    # nvme_tcp only for the self-check discovery below
    load_mod configfs nvmet nvmet_tcp nvme_tcp || fail "module load"
}

kt_net() { net_up || fail "network setup"; }

# A referral on port 1 (nvmet's ports/1/referrals): the host clients get it
# passed on (referral=IP:PORT/PORTID) and interop_initiator's discovery step
# checks the entry nvmet makes of it. TEST-NET-1, never connected to.
KT_REFERRAL_ADDR=192.0.2.1 KT_REFERRAL_PORT=8009 KT_REFERRAL_PORTID=3
# A unique discovery NQN (nvmet's discovery_nqn, TP 8013): passed on to the
# host clients too (discnqn=NQN); interop_initiator's discovery step reads the
# log through it and through the well-known NQN and checks where nvmet puts it.
KT_DISC_NQN=nqn.2014-08.io.nvmeof.interop:nvmet-discovery

kt_setup() {
    nvmet_setup "$BACKEND" 0.0.0.0 "$NVME_PORT" "$NQN" "$NS_SIZE"
    _r=$NVMET/ports/1/referrals/interop
    mkdir "$_r" && echo tcp >"$_r/addr_trtype" && echo ipv4 >"$_r/addr_adrfam" \
        && echo "$KT_REFERRAL_ADDR" >"$_r/addr_traddr" && echo "$KT_REFERRAL_PORT" >"$_r/addr_trsvcid" \
        && echo "$KT_REFERRAL_PORTID" >"$_r/addr_portid" && echo 1 >"$_r/enable" \
        || fail "nvmet referral on port 1"
    # Without the newline: nvmet's store returns the NQN's length, not the
    # count written, so the shell writes the newline again, alone, and gets
    # EINVAL (the NQN is set by then).
    printf '%s' "$KT_DISC_NQN" >"$NVMET/discovery_nqn" || fail "nvmet discovery_nqn"
    info "nvmet discovery_nqn: $(cat "$NVMET/discovery_nqn")"
}

kt_selfcheck() { # the target answers discovery on the guest's loopback
    t 30 nvme discover -t tcp -a 127.0.0.1 -s "$NVME_PORT" >/tmp/disc.txt 2>&1 \
        || fail "self discovery failed: $(tail -n 1 /tmp/disc.txt)"
    grep -q "subnqn: *$NQN\$" /tmp/disc.txt || fail "discovery log lacks $NQN"
    info "self-discovery lists $NQN"
}

kt_client() { # kt_client NAME
    hook_call run-client "$CLIENT_TIMEOUT" "$1" "nqn=$NQN" "size=$NS_SIZE" "backend=$BACKEND" \
        "referral=$KT_REFERRAL_ADDR:$KT_REFERRAL_PORT/$KT_REFERRAL_PORTID" "discnqn=$KT_DISC_NQN"
    _rc=$?
    [ $_rc = 0 ] || fail "host client $1 failed (rc=$_rc): ${HOOK_REPLY:-no reply}"
    info "host client $1: rc=${HOOK_REPLY#HOOKACK run-client }"
}

kt_events() { # our initiator's asynchronous events from nvmet, and multipath over two ports
    # Port 2 (forwarded to the host as NVME_PORT2): the client's second
    # path, with its own in-capsule data and queue sizes (host-migrate
    # carries them over).
    nvmet_add_port 2 0.0.0.0 4421 "$NQN" $KT_PORT2_PARAMS
    hook_call start-client 60 events "nqn=$NQN"
    _rc=$?
    [ $_rc = 0 ] || fail "host client events did not start (rc=$_rc): ${HOOK_REPLY:-no reply}"
    # nvmet_port_send_ana_event: an ANA Change notice to port 1's controllers;
    # nvmet_ns_changed: a Namespace Attribute Changed notice.
    echo inaccessible >"$NVMET/ports/1/ana_groups/1/ana_state" || fail "ANA state inaccessible"
    nvmet_add_file_ns "$NQN" 2 /srv/events-ns2.img 16777216
    # The client keeps a handle of namespace 2 and prints RESIZE: doubled,
    # nvmet sends a Namespace Attribute Changed notice (nvmet_ns_changed).
    hook_call client-line 60 events RESIZE || fail "client RESIZE: ${HOOK_REPLY:-no reply}"
    truncate -s 33554432 /srv/events-ns2.img \
        && echo 1 >"$NVMET/subsystems/$NQN/namespaces/2/revalidate_size" || fail "namespace 2 resize"
    hook_call wait-client "$CLIENT_TIMEOUT" events
    _rc=$?
    # Later steps (and the teardown) want the group back.
    echo optimized >"$NVMET/ports/1/ana_groups/1/ana_state"
    [ $_rc = 0 ] || fail "host client events failed (rc=$_rc): ${HOOK_REPLY:-no reply}"
    info "host client events: rc=${HOOK_REPLY#HOOKACK wait-client }"
}

kt_auth() { # our initiator's DH-HMAC-CHAP against nvmet's
    _hn=nqn.2014-08.org.nvmexpress:uuid:6e766d65-6f66-4974-8000-0000000000a1
    _an=$NQN-auth
    _hk=$(gen_key 32 1 "$_hn") || fail "nvme gen-dhchap-key: $_hk"
    _ck=$(gen_key 64 3 "$_an") || fail "nvme gen-dhchap-key (controller): $_ck"
    _h=$NVMET/hosts/$_hn
    _s=$NVMET/subsystems/$_an
    mkdir -p "$_h" && echo "$_hk" >"$_h/dhchap_key" && echo "$_ck" >"$_h/dhchap_ctrl_key" \
        && echo ffdhe3072 >"$_h/dhchap_dhgroup" && echo "hmac(sha384)" >"$_h/dhchap_hash" || fail "nvmet host keys"
    mkdir "$_s" && echo 0 >"$_s/attr_allow_any_host" && ln -s "$_h" "$_s/allowed_hosts/$_hn" \
        && mkdir "$_s/namespaces/1" && truncate -s 16M /srv/auth.img \
        && echo -n /srv/auth.img >"$_s/namespaces/1/device_path" && echo 1 >"$_s/namespaces/1/enable" \
        && ln -s "$_s" "$NVMET/ports/1/subsystems/$_an" || fail "nvmet subsystem $_an"
    hook_call run-client "$CLIENT_TIMEOUT" auth "authnqn=$_an" "hostnqn=$_hn" "key=$_hk" "ckey=$_ck"
    _rc=$?
    rm -f "$NVMET/ports/1/subsystems/$_an" "$_s/allowed_hosts/$_hn"
    echo 0 >"$_s/namespaces/1/enable"; rmdir "$_s/namespaces/1" "$_s" "$_h"; rm -f /srv/auth.img
    [ $_rc = 0 ] || fail "host client auth failed (rc=$_rc): ${HOOK_REPLY:-no reply}"
    info "host client auth: rc=${HOOK_REPLY#HOOKACK run-client }"
}

kt_qmax() { # our initiator when nvmet deletes its controller (attr_qid_max, port unlink)
    _s=$NVMET/subsystems/$NQN-qmax
    mkdir "$_s" && echo 1 >"$_s/attr_allow_any_host" && echo 2 >"$_s/attr_qid_max" \
        && mkdir "$_s/namespaces/1" && truncate -s 16M /srv/qmax.img \
        && echo -n /srv/qmax.img >"$_s/namespaces/1/device_path" && echo 1 >"$_s/namespaces/1/enable" \
        && ln -s "$_s" "$NVMET/ports/1/subsystems/$NQN-qmax" || fail "nvmet subsystem $NQN-qmax"
    _rc=0
    if hook_call start-client 60 qmax; then
        # nvmet_subsys_attr_qid_max_store deletes every controller ("Force reconnect")
        echo 1 >"$_s/attr_qid_max" || fail "attr_qid_max 1"
        hook_call client-line 60 qmax RECONNECTED || info "no RECONNECTED: ${HOOK_REPLY:-no reply}"
        # nvmet_port_del_ctrls: the subsystem's controllers on the port go
        rm -f "$NVMET/ports/1/subsystems/$NQN-qmax"
        hook_call wait-client "$CLIENT_TIMEOUT" qmax
        _rc=$?
    else
        _rc=1
    fi
    rm -f "$NVMET/ports/1/subsystems/$NQN-qmax"
    echo 0 >"$_s/namespaces/1/enable"; rmdir "$_s/namespaces/1" "$_s"; rm -f /srv/qmax.img
    [ $_rc = 0 ] || fail "host client qmax failed (rc=$_rc): ${HOOK_REPLY:-no reply}"
    info "host client qmax: rc=${HOOK_REPLY#HOOKACK wait-client }"
}

kt_zoned() { # our initiator's zone commands against nvmet over a zoned null_blk device
    _z=/sys/kernel/config/nullb/zoned
    _s=$NVMET/subsystems/$NQN-zoned
    # nr_devices=0: no default (unzoned) nullb0; the device comes from configfs.
    t 30 modprobe null_blk nr_devices=0 || fail "modprobe null_blk"
    mkdir "$_z" && echo 16 >"$_z/size" && echo 512 >"$_z/blocksize" && echo 1 >"$_z/memory_backed" \
        && echo 1 >"$_z/zoned" && echo 4 >"$_z/zone_size" && echo 2 >"$_z/zone_max_open" \
        && echo 3 >"$_z/zone_max_active" && echo 1 >"$_z/power" || fail "zoned null_blk device"
    # Linux 6.0+ names the disk after the configfs directory, older ones nullbINDEX.
    _dev=/dev/zoned
    [ -b "$_dev" ] || _dev=/dev/nullb$(cat "$_z/index")
    [ -b "$_dev" ] || fail "no block device for the zoned null_blk ($(ls /dev | grep -E 'nullb|zoned' | tr '\n' ' '))"
    _q=/sys/block/${_dev##*/}/queue
    info "$_dev: zoned $(cat $_q/zoned), $(cat $_q/nr_zones) zones of $(cat $_q/chunk_sectors) sectors"
    mkdir "$_s" && echo 1 >"$_s/attr_allow_any_host" && mkdir "$_s/namespaces/1" \
        && echo -n "$_dev" >"$_s/namespaces/1/device_path" && echo 1 >"$_s/namespaces/1/enable" \
        && ln -s "$_s" "$NVMET/ports/1/subsystems/$NQN-zoned" || fail "nvmet subsystem $NQN-zoned over $_dev"
    hook_call run-client "$CLIENT_TIMEOUT" zoned
    _rc=$?
    rm -f "$NVMET/ports/1/subsystems/$NQN-zoned"
    echo 0 >"$_s/namespaces/1/enable"; rmdir "$_s/namespaces/1" "$_s"
    echo 0 >"$_z/power"; rmdir "$_z"
    [ $_rc = 0 ] || fail "host client zoned failed (rc=$_rc): ${HOOK_REPLY:-no reply}"
    info "host client zoned: rc=${HOOK_REPLY#HOOKACK run-client }"
}

# Moving from nvmet (host-migrate): a subsystem NQN-migr with an identity of
# its own, on port 2 only, open to KT_MIGR_HOST only, its namespace in ANA
# group 2 (non-optimized on port 2) with reservations; the configuration
# saved as nvmetcli saves it (nvmet-save.sh) goes to the host (hook
# nvmet-json, in base64 pieces), where hook migrate-nvmet converts it with
# `nvmeof-target import-nvmetcli`, starts our target from it and runs
# interop_initiator's migrate round: what hosts see of the subsystem through
# either must be the same.
KT_MIGR_HOST=nqn.2014-08.org.nvmexpress:uuid:6e766d65-6f66-4974-8000-0000000000b2
# port 2's param_inline_data_size and param_max_queue_size (kt_events makes the port)
KT_PORT2_PARAMS="8192 64"
KT_MIGR_NQN=$NQN-migr
migrate_checks() {
    _s=$NVMET/subsystems/$KT_MIGR_NQN
    _g=$NVMET/ports/2/ana_groups/2
    [ -d "$NVMET/ports/2" ] || nvmet_add_port 2 0.0.0.0 4421 "$NQN" $KT_PORT2_PARAMS
    mkdir -p "$NVMET/hosts/$KT_MIGR_HOST" "$_g" && echo non-optimized >"$_g/ana_state" \
        && mkdir "$_s" && echo 0 >"$_s/attr_allow_any_host" \
        && ln -s "$NVMET/hosts/$KT_MIGR_HOST" "$_s/allowed_hosts/$KT_MIGR_HOST" \
        && echo migr-0001 >"$_s/attr_serial" && echo "nvmet migrated" >"$_s/attr_model" \
        && echo 0x0050c2 >"$_s/attr_ieee_oui" && echo 300 >"$_s/attr_cntlid_min" && echo 399 >"$_s/attr_cntlid_max" \
        && echo 3 >"$_s/attr_qid_max" && mkdir "$_s/namespaces/1" && truncate -s 16M /srv/migr.img \
        && echo -n /srv/migr.img >"$_s/namespaces/1/device_path" \
        && echo 6e766d65-6f66-4974-8000-00000000c0de >"$_s/namespaces/1/device_uuid" \
        && echo 2 >"$_s/namespaces/1/ana_grpid" || fail "nvmet subsystem $KT_MIGR_NQN"
    # persistent reservations came to nvmet in 6.13
    [ ! -e "$_s/namespaces/1/resv_enable" ] || echo 1 >"$_s/namespaces/1/resv_enable" || fail "resv_enable"
    echo 1 >"$_s/namespaces/1/enable" && ln -s "$_s" "$NVMET/ports/2/subsystems/$KT_MIGR_NQN" \
        || fail "nvmet subsystem $KT_MIGR_NQN enabled on port 2"
    sh /guest/nvmet-save.sh >/tmp/nvmet.json || fail "nvmet-save.sh"
    info "nvmet configuration saved as nvmetcli saves it: $(wc -c </tmp/nvmet.json) bytes"
    _i=0
    for _l in $(base64 -w 900 /tmp/nvmet.json); do
        _i=$((_i + 1))
        hook_call nvmet-json 30 "$_i" "$_l" || fail "nvmet-json piece $_i: ${HOOK_REPLY:-no reply}"
    done
    hook_call migrate-nvmet "$CLIENT_TIMEOUT" "$KT_MIGR_NQN" "$KT_MIGR_HOST" \
        || fail "host client migrate failed: ${HOOK_REPLY:-no reply}"
    info "host client migrate: ${HOOK_REPLY#HOOKACK migrate-nvmet }"
}
kt_migrate() {
    ( migrate_checks )
    _rc=$?
    _s=$NVMET/subsystems/$KT_MIGR_NQN
    rm -f "$NVMET/ports/2/subsystems/$KT_MIGR_NQN" "$_s/allowed_hosts/$KT_MIGR_HOST"
    if [ -d "$_s" ]; then
        [ -d "$_s/namespaces/1" ] && { echo 0 >"$_s/namespaces/1/enable"; rmdir "$_s/namespaces/1"; }
        rmdir "$_s"
    fi
    rmdir "$NVMET/hosts/$KT_MIGR_HOST" "$NVMET/ports/2/ana_groups/2" 2>/dev/null
    rm -f /srv/migr.img
    [ $_rc = 0 ] || exit 1
}

# Moving to nvmet (host-export): the host made /guest/nvmet-exported.sh, the
# configfs writes `nvmetcli restore` would make of `nvmeof-target
# export-nvmetcli tests/interop/exported.toml` (nvmet-restore.py): subsystem
# NQN-exp with derived serial number and namespace identifiers, its file
# namespace in ANA group 3, non-optimized on port 2. Every write must take;
# then host client export checks through port 2 that nvmet shows what the
# JSON names.
KT_EXP_NQN=$NQN-exp
export_checks() {
    [ -d "$NVMET/ports/2" ] || nvmet_add_port 2 0.0.0.0 4421 "$NQN" $KT_PORT2_PARAMS
    [ -f /guest/nvmet-exported.sh ] || fail "no /guest/nvmet-exported.sh (export-nvmetcli failed on the host)"
    truncate -s 16M /srv/exp.img || fail "truncate /srv/exp.img"
    _out=$(sh /guest/nvmet-exported.sh 2>&1) || fail "restoring the exported configuration: $(echo "$_out" | tr '\n' ';')"
    [ -d "$NVMET/subsystems/$KT_EXP_NQN" ] || fail "the exported configuration made no $KT_EXP_NQN"
    info "exported configuration restored into nvmet: $(grep -c '^[wdl] ' /guest/nvmet-exported.sh) configfs steps, none failed"
    hook_call run-client "$CLIENT_TIMEOUT" export || fail "host client export failed: ${HOOK_REPLY:-no reply}"
    info "host client export: ${HOOK_REPLY#HOOKACK run-client }"
}
kt_export() {
    ( export_checks )
    _rc=$?
    _s=$NVMET/subsystems/$KT_EXP_NQN
    rm -f "$NVMET/ports/2/subsystems/$KT_EXP_NQN"
    if [ -d "$_s" ]; then
        for _n in "$_s"/namespaces/*; do
            [ -d "$_n" ] && { echo 0 >"$_n/enable"; rmdir "$_n"; }
        done
        rmdir "$_s"
    fi
    rmdir "$NVMET/ports/2/ana_groups/3" 2>/dev/null
    rm -f /srv/exp.img
    [ $_rc = 0 ] || exit 1
}

kt_teardown() {
    rmdir "$NVMET/ports/1/referrals/interop" || fail "rmdir the referral"
    nvmet_teardown "$NQN"
}

scenario_main() {
    info "scenario: kernel target backend=$BACKEND nqn=$NQN size=$NS_SIZE port=$NVME_PORT"
    run_step modules 60 kt_modules
    run_step net 30 kt_net
    run_step target-setup 60 kt_setup || return 0
    run_step target-selfcheck 40 kt_selfcheck
    echo "TARGET READY port=$NVME_PORT nqn=$NQN size=$NS_SIZE backend=$BACKEND"
    for _c in $CLIENT_STEPS; do
        _sn=host-$_c; [ "$_c" = custom ] && _sn=host-client
        if [ "$_c" = events ]; then
            run_step "$_sn" $((CLIENT_TIMEOUT + 80)) kt_events
        elif [ "$_c" = auth ]; then
            run_step "$_sn" $((CLIENT_TIMEOUT + 20)) kt_auth
        elif [ "$_c" = qmax ]; then
            run_step "$_sn" $((CLIENT_TIMEOUT + 80)) kt_qmax
        elif [ "$_c" = zoned ]; then
            run_step "$_sn" $((CLIENT_TIMEOUT + 40)) kt_zoned
        elif [ "$_c" = migrate ]; then
            run_step "$_sn" $((CLIENT_TIMEOUT + 60)) kt_migrate
        elif [ "$_c" = export ]; then
            run_step "$_sn" $((CLIENT_TIMEOUT + 30)) kt_export
        else
            run_step "$_sn" $((CLIENT_TIMEOUT + 10)) kt_client "$_c"
        fi
    done
    run_step target-teardown 60 kt_teardown
}
