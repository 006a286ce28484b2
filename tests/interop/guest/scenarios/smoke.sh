# Scenario smoke: boot, report the environment, round-trip the host control
# channel, and check the guestfwd relay (10.0.2.100:4420 -> run.sh's echo
# server on the host loopback), including that the guest's FIN reaches the
# host side.  Quick check of the harness itself (~15 s).
sm_env() {
    info "kernel $(uname -r), $(nproc) cpus, $(awk '/MemTotal/{print $2}' /proc/meminfo) kB"
    for b in nvme fio mkfs.ext4 fsck.ext4; do
        command -v $b >/dev/null || fail "$b missing"
    done
    info "$(nvme version 2>&1 | head -n 1); $(fio --version)"
    info "hostnqn $(cat /etc/nvme/hostnqn)"
}
sm_hook() { hook_call ping 30 hello || fail "control channel: ${HOOK_REPLY:-no reply}"; }
sm_net() { net_up || fail "network setup"; }
sm_fwd() {
    # the host server echoes everything once it sees EOF, then closes
    _r=$(echo "echo-$$" | t 20 nc 10.0.2.100 4420) || fail "nc to 10.0.2.100:4420 failed or hung (rc=$?)"
    [ "$_r" = "echo-$$" ] || fail "guestfwd echo returned '$_r'"
    info "guestfwd relay echoed and closed"
}
scenario_main() {
    run_step env 30 sm_env
    run_step control-hook 40 sm_hook
    run_step net 30 sm_net
    run_step guestfwd-echo 30 sm_fwd
    run_step guestfwd-echo-again 30 sm_fwd
}
