#!/usr/bin/env bash
# Build (or reuse) the Linux interop guest: a Debian 6.12 kernel plus a
# busybox initramfs carrying nvme-cli, fio, e2fsprogs and the NVMe/TCP host
# and target modules.  Nothing is installed into the host's /boot or
# /lib/modules: the kernel package is fetched with `apt-get download` and
# unpacked with `dpkg -x`.
#
# Outputs (git-ignored):
#   cache/vmlinuz            the kernel
#   cache/initramfs.cpio.gz  the base initramfs (binaries, libs, modules, /init)
#   cache/guest.key          what the two were built from; a rerun with the
#                            same key does nothing
#   cache/guest.env          KERNEL_VERSION=..., KERNEL_PKG=..., ...
#
# run.sh appends a small overlay cpio with the current guest/ scripts at every
# run, so editing guest/ never needs a rebuild.
#
# Environment:
#   INTEROP_CACHE        cache folder (default: tests/interop/cache)
#   INTEROP_KERNEL_PKG   exact kernel package (default: what the meta package
#                        linux-image-6.12-amd64 depends on)
#   INTEROP_REBUILD=1    rebuild even if the key matches
#   INTEROP_NO_APT=1     never call apt-get (fail if something is missing)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${INTEROP_CACHE:-$HERE/cache}
META_PKG=linux-image-6.12-amd64
export DEBIAN_FRONTEND=noninteractive

log() { printf 'build-guest: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (apt-get, mknod, ldconfig -r)"

# ---------------------------------------------------------------- host tools
# Host packages: qemu + socat run the guest, the rest is copied into it.
HOST_PKGS=(qemu-system-x86 socat cpio kmod xz-utils gzip busybox-static
           nvme-cli fio e2fsprogs python3 iproute2 procps coreutils)
HOST_CMDS=(qemu-system-x86_64 socat cpio depmod modprobe xz gzip busybox nvme
           fio mke2fs e2fsck python3 ss timeout ldconfig)

APT_UPDATED=0
apt_update_once() {
    [ "${INTEROP_NO_APT:-0}" = 1 ] && die "apt-get needed but INTEROP_NO_APT=1"
    if [ "$APT_UPDATED" = 0 ]; then
        log "apt-get update"
        timeout 300 apt-get update -q >/dev/null || die "apt-get update failed"
        APT_UPDATED=1
    fi
}

missing_pkgs() {
    local p
    for p in "${HOST_PKGS[@]}"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed' \
            || echo "$p"
    done
}

ensure_host_tools() {
    local miss
    miss=$(missing_pkgs | tr '\n' ' ')
    if [ -n "${miss// /}" ]; then
        apt_update_once
        log "apt-get install -y $miss"
        timeout 600 apt-get install -y -q --no-install-recommends $miss >/dev/null \
            || die "apt-get install failed: $miss"
        # fio ships a `fio --server` unit; never leave it running on the host.
        if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
            systemctl disable --now fio.service >/dev/null 2>&1 || true
        fi
    fi
    local c
    for c in "${HOST_CMDS[@]}"; do
        command -v "$c" >/dev/null || die "command not found after install: $c"
    done
}

# ------------------------------------------------------------ kernel package
resolve_kernel_pkg() {
    if [ -n "${INTEROP_KERNEL_PKG:-}" ]; then echo "$INTEROP_KERNEL_PKG"; return; fi
    apt-cache depends "$META_PKG" 2>/dev/null \
        | awk '/Depends: linux-image-6\.12/{print $2; exit}'
}

pkg_version() { # candidate version of a package (from the apt lists)
    apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/{print $2; exit}'
}

inst_version() {
    dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo none
}

ensure_host_tools

resolve() {
    KPKG=$(resolve_kernel_pkg || true)
    KVER_PKG=""
    [ -z "$KPKG" ] || KVER_PKG=$(pkg_version "$KPKG")
    [ "$KVER_PKG" != "(none)" ] || KVER_PKG=""
}
resolve
if [ -z "$KVER_PKG" ]; then   # empty or stale apt lists (clean machine)
    apt_update_once
    resolve
fi
[ -n "$KPKG" ] || die "cannot resolve $META_PKG (is bookworm-security in the apt sources?)"
[ -n "$KVER_PKG" ] || die "no candidate version for $KPKG"

SELF_SUM=$(sha256sum "$HERE/build-guest.sh" | cut -c1-16)
KEY="kernel=$KPKG=$KVER_PKG busybox=$(inst_version busybox-static) nvme-cli=$(inst_version nvme-cli) libnvme1=$(inst_version libnvme1) fio=$(inst_version fio) e2fsprogs=$(inst_version e2fsprogs) script=$SELF_SUM"

if [ "${INTEROP_REBUILD:-0}" != 1 ] && [ -s "$CACHE/vmlinuz" ] && [ -s "$CACHE/initramfs.cpio.gz" ] \
   && [ -s "$CACHE/guest.key" ] && [ "$(cat "$CACHE/guest.key")" = "$KEY" ]; then
    log "cached guest is current ($KPKG $KVER_PKG)"
    exit 0
fi

log "building guest: $KEY"
T0=$(date +%s)
mkdir -p "$CACHE/debs"

# Fetch the kernel .deb (kept in cache/debs so a rebuild need not refetch).
DEB=$(ls "$CACHE"/debs/"${KPKG}"_*.deb 2>/dev/null | grep -F "_${KVER_PKG//:/%3a}_" | head -1 || true)
if [ -z "$DEB" ]; then
    ( cd "$CACHE/debs" && timeout 600 apt-get download -q "$KPKG=$KVER_PKG" >/dev/null 2>&1 ) || {
        # Stale lists can point at a version the mirror no longer carries.
        apt_update_once
        KVER_PKG=$(pkg_version "$KPKG")
        ( cd "$CACHE/debs" && timeout 600 apt-get download -q "$KPKG=$KVER_PKG" >/dev/null 2>&1 ) \
            || die "apt-get download $KPKG failed"
        KEY="kernel=$KPKG=$KVER_PKG ${KEY#* }"
    }
    DEB=$(ls -t "$CACHE"/debs/"${KPKG}"_*.deb | head -1)
fi
# Only keep the .deb we use.
find "$CACHE/debs" -name '*.deb' ! -path "$DEB" -delete

WORK=$(mktemp -d /tmp/nvmeof-guest-build.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
KROOT=$WORK/kpkg
ROOT=$WORK/root

log "unpacking $(basename "$DEB")"
dpkg -x "$DEB" "$KROOT"
KVER=$(ls "$KROOT/lib/modules" | head -1)
[ -n "$KVER" ] && [ -f "$KROOT/boot/vmlinuz-$KVER" ] || die "unexpected kernel package layout"
depmod -b "$KROOT" "$KVER"

# ------------------------------------------------------------ guest rootfs
mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,lib/x86_64-linux-gnu,lib64,etc/nvme,proc,sys,dev,tmp,run,mnt,srv,root,var/tmp}
ln -s /proc/mounts "$ROOT/etc/mtab"
mknod -m 600 "$ROOT/dev/console" c 5 1
mknod -m 666 "$ROOT/dev/null" c 1 3

# busybox applets (skipping those that the real tools below replace)
install -m 755 /bin/busybox "$ROOT/bin/busybox"
REAL_TOOLS=" mke2fs mkfs.ext4 e2fsck fsck.ext4 nvme fio "
for a in $(/bin/busybox --list-full); do
    name=${a##*/}
    case "$REAL_TOOLS" in *" $name "*) continue ;; esac
    [ -e "$ROOT/$a" ] || ln -s /bin/busybox "$ROOT/$a"
done

copy_lib() { # copy a shared object to the same path inside the guest
    local lib=$1
    [ -e "$ROOT$lib" ] && return 0
    mkdir -p "$ROOT$(dirname "$lib")"
    cp -L "$lib" "$ROOT$lib"
}

copy_bin() { # copy an executable and every library ldd reports for it
    local bin dest lib
    bin=$(command -v "$1") || die "missing $1"
    bin=$(readlink -f "$bin")
    dest=${2:-$bin}
    mkdir -p "$ROOT$(dirname "$dest")"
    cp -L "$bin" "$ROOT$dest"
    for lib in $(ldd "$bin" | awk '/=> \//{print $3} /^\t\//{print $1}'); do
        copy_lib "$lib"
    done
}

copy_bin nvme /usr/sbin/nvme
copy_bin fio /usr/bin/fio
copy_bin mke2fs /usr/sbin/mke2fs
copy_bin e2fsck /usr/sbin/e2fsck
ln -s mke2fs "$ROOT/usr/sbin/mkfs.ext4"
ln -s e2fsck "$ROOT/usr/sbin/fsck.ext4"
cp /etc/mke2fs.conf "$ROOT/etc/mke2fs.conf"
# libc's NSS and gconv are not needed by these tools.

cat >"$ROOT/etc/ld.so.conf" <<'EOF'
/lib/x86_64-linux-gnu
/usr/lib/x86_64-linux-gnu
/usr/lib/x86_64-linux-gnu/ceph
EOF
ldconfig -r "$ROOT" 2>/dev/null || ldconfig -r "$ROOT"
echo "root:x:0:0:root:/root:/bin/sh" >"$ROOT/etc/passwd"
echo "root:x:0:" >"$ROOT/etc/group"
echo "interop" >"$ROOT/etc/hostname"

# ------------------------------------------------------------ kernel modules
# Wanted modules; their dependencies are resolved from the package's depmod.
MODULES=(nvme_tcp nvme_fabrics nvme_core nvmet nvmet_tcp configfs brd loop null_blk
         ext4 crc32c_generic crc32c_intel virtio_net)
MODDIR=$ROOT/lib/modules/$KVER
mkdir -p "$MODDIR"
for f in modules.order modules.builtin modules.builtin.modinfo; do
    cp "$KROOT/lib/modules/$KVER/$f" "$MODDIR/"
done
for m in "${MODULES[@]}"; do
    modprobe -D -d "$KROOT" -S "$KVER" "$m" | awk '$1=="insmod"{print $2}'
done | sort -u | while read -r ko; do
    rel=${ko#"$KROOT"/lib/modules/"$KVER"/}
    mkdir -p "$MODDIR/$(dirname "$rel")"
    cp "$ko" "$MODDIR/$rel"
    case "$rel" in
        *.xz) xz -d "$MODDIR/$rel" ;;
        *.zst) zstd -q -d --rm "$MODDIR/$rel" ;;
    esac
done
depmod -b "$ROOT" "$KVER"
NMODS=$(find "$MODDIR" -name '*.ko' | wc -l)

# ------------------------------------------------------------ init + scripts
install -m 755 "$HERE/guest/init" "$ROOT/init"
mkdir -p "$ROOT/guest"
cp -r "$HERE/guest/." "$ROOT/guest/"
rm -f "$ROOT/guest/init"

# ------------------------------------------------------------ pack
OUT=$WORK/out
mkdir -p "$OUT"
( cd "$ROOT" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet ) \
    | gzip -6 >"$OUT/initramfs.cpio.gz"
cp "$KROOT/boot/vmlinuz-$KVER" "$OUT/vmlinuz"

mkdir -p "$CACHE"
mv -f "$OUT/vmlinuz" "$CACHE/vmlinuz"
mv -f "$OUT/initramfs.cpio.gz" "$CACHE/initramfs.cpio.gz"
cat >"$CACHE/guest.env" <<EOF
KERNEL_PKG=$KPKG
KERNEL_PKG_VERSION=$KVER_PKG
KERNEL_VERSION=$KVER
MODULES=$NMODS
EOF
printf '%s\n' "$KEY" >"$CACHE/guest.key"
log "done in $(( $(date +%s) - T0 ))s: kernel $KVER ($KPKG $KVER_PKG), $NMODS modules, initramfs $(du -h "$CACHE/initramfs.cpio.gz" | cut -f1)"
