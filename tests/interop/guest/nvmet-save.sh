#!/bin/sh
# nvmet-save.sh: the guest's nvmet configuration (configfs) as JSON, in the
# shape `nvmetcli save` writes (nvmetcli's nvmet/nvme.py, CFSNode.dump):
# every object's writable attributes by group ("attr_serial" is
# "attr": {"serial": ...}, values the file's text), "enable" where it has
# one, and its links. The interop guest has no python for nvmetcli itself;
# kernel-target step host-migrate hands this to `nvmeof-target
# import-nvmetcli` on the host.
N=/sys/kernel/config/nvmet

js() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }

# attrs DIR GROUP: {"name": "text", ...} of DIR's writable GROUP_* files
# (nvmetcli's list_attrs(group, writable=True): mode has the owner's w)
attrs() {
    _sep=''
    printf '{'
    for _f in "$1"/"$2"_*; do
        [ -f "$_f" ] || continue
        case $(stat -c %A "$_f") in ??w*) ;; *) continue ;; esac
        _v=$(cat "$_f" 2>/dev/null) || continue
        _k=${_f##*/}; _k=${_k#"$2"_}
        printf '%s%s: %s' "$_sep" "$(js "$_k")" "$(js "$_v")"
        _sep=', '
    done
    printf '}'
}

# groups DIR GROUP...: "group": {...}, ... and "enable": N where DIR has it
groups() {
    _d=$1; shift
    _gs=''
    for _g in "$@"; do
        printf '%s%s: %s' "$_gs" "$(js "$_g")" "$(attrs "$_d" "$_g")"
        _gs=', '
    done
    [ -f "$_d/enable" ] && printf '%s"enable": %s' "$_gs" "$(cat "$_d/enable")"
}

# names DIR: the entries of DIR as a JSON list of strings (links by name)
names() {
    _ns=''
    printf '['
    for _e in "$1"/*; do
        [ -e "$_e" ] || [ -L "$_e" ] || continue
        printf '%s%s' "$_ns" "$(js "${_e##*/}")"
        _ns=', '
    done
    printf ']'
}

# each DIR FN: FN D for each directory D in DIR, comma separated (called in
# command substitutions, so nested calls keep their own variables)
each() {
    _es=''
    for _e in "$1"/*; do
        [ -d "$_e" ] || continue
        printf '%s' "$_es"
        "$2" "$_e"
        _es=', '
    done
}

host() { printf '{"nqn": %s}' "$(js "${1##*/}")"; }
ana_group() { printf '{%s, "grpid": %s}' "$(groups "$1" ana)" "${1##*/}"; }
referral() { printf '{%s, "name": %s}' "$(groups "$1" addr)" "$(js "${1##*/}")"; }
port() {
    printf '{%s, "portid": %s, "subsystems": %s, "ana_groups": [%s], "referrals": [%s]}' \
        "$(groups "$1" addr param)" "${1##*/}" "$(names "$1/subsystems")" \
        "$(each "$1/ana_groups" ana_group)" "$(each "$1/referrals" referral)"
}
namespace() {
    printf '{%s, "nsid": %s, "ana_grpid": %s}' "$(groups "$1" device ana resv)" "${1##*/}" \
        "$(cat "$1/ana_grpid" 2>/dev/null || echo 0)"
}
subsystem() {
    printf '{%s, "nqn": %s, "allowed_hosts": %s, "namespaces": [%s]' "$(groups "$1" attr)" \
        "$(js "${1##*/}")" "$(names "$1/allowed_hosts")" "$(each "$1/namespaces" namespace)"
    # nvmetcli saves the passthru directory wherever the kernel has one
    [ -d "$1/passthru" ] && printf ', "passthru": [{%s}]' "$(groups "$1/passthru" device)"
    printf '}'
}

printf '{"hosts": [%s], "ports": [%s], "subsystems": [%s]}\n' \
    "$(each "$N/hosts" host)" "$(each "$N/ports" port)" "$(each "$N/subsystems" subsystem)"
