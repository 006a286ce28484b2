#!/usr/bin/env python3
"""nvmet-restore.py JSON > SCRIPT: what `nvmetcli restore JSON` does, as a
POSIX shell script of configfs writes, for the interop guest (which has no
python for nvmetcli itself). It follows nvmetcli's Root.restore
(nvmet/nvme.py): hosts first; then each subsystem: its namespaces (each
attribute group's values in the file's order, `enable`, then `ana_grpid`
again), its allowed hosts, its attributes; then each port: its attributes,
subsystem links, ANA groups (their `ana` group), referrals. Like nvmetcli
without abort_on_error, a write that fails is reported and skipped; the
script exits with the number of failures. A port that exists already keeps
its address and parameters (nvmet refuses them while the port is enabled:
nvmetcli would report each as an error)."""
import json
import shlex
import sys

N = "/sys/kernel/config/nvmet"
config = json.load(open(sys.argv[1]))
out = [
    "#!/bin/sh",
    "# written by tests/interop/nvmet-restore.py from export-nvmetcli's JSON",
    "failed=0",
    'w() { printf "%s" "$2" >"$1" 2>/dev/null || { echo "restore: cannot write \'$2\' to $1"; failed=$((failed + 1)); }; }',
    'd() { [ -d "$1" ] || mkdir "$1" || { echo "restore: cannot make $1"; failed=$((failed + 1)); }; }',
    'l() { [ -e "$2" ] || ln -s "$1" "$2" || { echo "restore: cannot link $2"; failed=$((failed + 1)); }; }',
]
q = shlex.quote


def attrs(path, node, groups):
    for g in groups:
        for name, value in node.get(g, {}).items():
            out.append("w %s %s" % (q("%s/%s_%s" % (path, g, name)), q(str(value))))
    if node.get("enable") is not None:
        out.append("w %s %s" % (q(path + "/enable"), q(str(node["enable"]))))


for h in config.get("hosts", []):
    out.append("d %s" % q("%s/hosts/%s" % (N, h["nqn"])))
for s in config.get("subsystems", []):
    sp = "%s/subsystems/%s" % (N, s["nqn"])
    out.append("d %s" % q(sp))
    for ns in s.get("namespaces", []):
        np = "%s/namespaces/%d" % (sp, ns["nsid"])
        out.append("d %s" % q(np))
        attrs(np, ns, ["device", "ana", "resv"])
        if "ana_grpid" in ns:
            out.append("w %s %s" % (q(np + "/ana_grpid"), q(str(ns["ana_grpid"]))))
    for h in s.get("allowed_hosts", []):
        out.append("l %s %s" % (q("%s/hosts/%s" % (N, h)), q("%s/allowed_hosts/%s" % (sp, h))))
    attrs(sp, s, ["attr"])
for p in config.get("ports", []):
    pp = "%s/ports/%d" % (N, p["portid"])
    out.append("if [ ! -d %s ]; then" % q(pp))
    out.append("d %s" % q(pp))
    attrs(pp, p, ["addr", "param"])
    out.append("fi")
    for s in p.get("subsystems", []):
        out.append("l %s %s" % (q("%s/subsystems/%s" % (N, s)), q("%s/subsystems/%s" % (pp, s))))
    for g in p.get("ana_groups", []):
        gp = "%s/ana_groups/%d" % (pp, g["grpid"])
        out.append("d %s" % q(gp))
        attrs(gp, g, ["ana"])
    for r in p.get("referrals", []):
        rp = "%s/referrals/%s" % (pp, r["name"])
        out.append("d %s" % q(rp))
        attrs(rp, r, ["addr"])
out.append('exit "$failed"')
print("\n".join(out))
