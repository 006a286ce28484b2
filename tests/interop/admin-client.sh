#!/usr/bin/env bash
# Host client "admin" of the kernel-target scenarios: the `nvmeof` admin
# CLI's NVM, feature and register commands against the Linux kernel target
# (nvmet) at 127.0.0.1:$NVME_PORT, subsystem $NVME_NQN, namespace 1 (brd
# or a file, whose block size nvmet takes from the device or inode).
#   show-regs          CC.EN and CSTS.RDY set, MQES and the version decoded
#   get-feature        Number of Queues; the 128-bit Host Identifier (data);
#                      an unsupported feature fails with Invalid Field
#   set-feature 0x84   write protection: a write then fails with Namespace
#                      is Write Protected (0x20), and works once lifted
#   write-zeroes       the blocks read back as zeroes, the rest unchanged
#                      (a file on the guest's tmpfs: nvmet's Invalid Opcode)
#   dsm                nvmet takes the Deallocate (discard or punched hole)
#   flush              completes
#   get-log            the SMART log's 512 bytes
# Usage: admin-client.sh NVMEOF_BIN. Exit 0 when all hold; the first
# failure is printed and ends it with 1.
set -uo pipefail
N=$1
A=127.0.0.1:$NVME_PORT
Q=(--nqn "$NVME_NQN")
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# A failure names the last command's error output.
fail() { echo "admin: FAIL $*${err:+: $err}"; exit 1; }
nv() { timeout 30 "$N" "$@" 2>"$tmp/err"; local rc=$?; err=$(tr '\n' ' ' <"$tmp/err"); return $rc; }
err=

nv show-regs "$A" "${Q[@]}" >"$tmp/regs" || fail "show-regs: $(tail -n 1 "$tmp/regs")"
for l in "Enable (EN): yes" "Ready (RDY): yes" "Maximum Queue Entries Supported (MQES): "; do
    grep -qF "$l" "$tmp/regs" || fail "show-regs lacks '$l': $(tr '\n' ' ' <"$tmp/regs")"
done
ver=$(sed -n 's/^version : 0x[0-9a-f]* (\(.*\))$/\1/p' "$tmp/regs")
nv get-feature "$A" "${Q[@]}" -f 7 >"$tmp/q" || fail "get-feature 7: $(cat "$tmp/q")"
nsqa=$(sed -n 's/.*(NSQA): //p' "$tmp/q")
[ -n "$nsqa" ] || fail "get-feature 7: $(cat "$tmp/q")"
nv get-feature "$A" "${Q[@]}" -f 0x81 >"$tmp/h" || fail "get-feature 0x81"
grep -qE "Host Identifier: [0-9a-f]{32}$" "$tmp/h" && ! grep -q "Host Identifier: 0\{32\}$" "$tmp/h" \
    || fail "host identifier: $(cat "$tmp/h")"
if nv get-feature "$A" "${Q[@]}" -f 4 >/dev/null; then fail "get-feature 4 succeeded"; fi
[[ $err == *"invalid field in command (SCT 0 SC 0x02, DNR)"* ]] || fail "get-feature 4"

bs=$(nv identify "$A" "${Q[@]}" --nsid 1 --json | sed -n 's/^  "block_size": \([0-9]*\),*$/\1/p')
[ -n "$bs" ] || fail "no block size from identify"
lba=$((1048576 / bs)) blocks=$((65536 / bs)) half=$((32768 / bs))
head -c 65536 /dev/urandom >"$tmp/data"
nv write "$A" "${Q[@]}" --lba "$lba" --file "$tmp/data" >/dev/null || fail "write"
nv read "$A" "${Q[@]}" --lba "$lba" --count "$blocks" >"$tmp/back" && cmp -s "$tmp/data" "$tmp/back" \
    || fail "read back after write differs"

nv set-feature "$A" "${Q[@]}" -f 0x84 -n 1 -v 1 >/dev/null || fail "set-feature 0x84 1"
nv get-feature "$A" "${Q[@]}" -f 0x84 -n 1 | grep -q "Namespace Write Protect: Write Protect$" \
    || fail "get-feature 0x84 after setting it"
if nv write "$A" "${Q[@]}" --lba "$lba" --file "$tmp/data" >/dev/null; then
    nv set-feature "$A" "${Q[@]}" -f 0x84 -n 1 -v 0 >/dev/null
    fail "a write to the write-protected namespace succeeded"
fi
wp=$err
nv set-feature "$A" "${Q[@]}" -f 0x84 -n 1 -v 0 >/dev/null || fail "set-feature 0x84 0"
[[ $wp == *"namespace is write protected (SCT 0 SC 0x20"* ]] || { err=$wp; fail "write while protected"; }
nv write "$A" "${Q[@]}" --lba "$lba" --file "$tmp/data" >/dev/null || fail "write after lifting protection"

wz="write-zeroes"
if nv write-zeroes "$A" "${Q[@]}" --lba "$lba" --count "$half" >/dev/null; then
    nv read "$A" "${Q[@]}" --lba "$lba" --count "$blocks" >"$tmp/back" || fail "read after write-zeroes"
    { head -c 32768 /dev/zero; tail -c 32768 "$tmp/data"; } | cmp -s - "$tmp/back" \
        || fail "after write-zeroes of the first half: not zeroes then the data"
elif [ "${NVME_BACKEND:-}" = file ] && [[ $err == *"invalid opcode (SCT 0 SC 0x01, DNR) for opcode 0x08"* ]]; then
    # nvmet_file_execute_write_zeroes is fallocate(FALLOC_FL_ZERO_RANGE),
    # which the guest's tmpfs lacks: EOPNOTSUPP, which nvmet answers with
    # Invalid Opcode although its ONCS lists Write Zeroes.
    wz="write-zeroes (Invalid Opcode from nvmet's file backend on tmpfs)"
else
    fail "write-zeroes"
fi
nv dsm "$A" "${Q[@]}" --range "$((lba + half)):$half" >/dev/null || fail "dsm"
nv flush "$A" "${Q[@]}" >"$tmp/f" || fail "flush: $(cat "$tmp/f")"
nv get-log "$A" "${Q[@]}" -i 2 -l 512 --raw-binary >"$tmp/smart" || fail "get-log 2"
[ "$(stat -c %s "$tmp/smart")" = 512 ] || fail "get-log 2 gave $(stat -c %s "$tmp/smart") bytes, not 512"
echo "admin: PASS version $ver, $nsqa I/O queues, ${bs}-byte blocks; write protection, $wz, dsm, flush, get-log"
