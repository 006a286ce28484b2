#!/bin/bash
# exported-client.sh NVMEOF_BIN JSON: kernel-target step host-export. The
# guest applied `nvmeof-target export-nvmetcli exported.toml` (JSON) to nvmet
# as `nvmetcli restore` would; through nvmet's port 2 (NVME_ADDR:NVME_PORT2)
# the subsystem must show what the JSON names: serial number, model,
# firmware revision, IEEE OUI, a controller ID in its range, the
# namespace's UUID, NGUID and ANA group, and that group's state on port 2.
set -u
bin=$1 json=$2
nqn=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["subsystems"][0]["nqn"])' "$json") || exit 1
a=$NVME_ADDR:$NVME_PORT2
ctrl=$("$bin" --json identify "$a" --nqn "$nqn") || { echo "FAIL: identify controller of $nqn through $a"; exit 1; }
ns=$("$bin" --json identify "$a" --nqn "$nqn" --nsid 1) || { echo "FAIL: identify namespace 1"; exit 1; }
ana=$("$bin" --json ana-log "$a" --nqn "$nqn") || { echo "FAIL: ANA log"; exit 1; }
CTRL=$ctrl NS=$ns ANA=$ana python3 - "$json" <<'PY'
import json, os, sys
exported = json.load(open(sys.argv[1]))
s = exported["subsystems"][0]
n = s["namespaces"][0]
port = next(p for p in exported["ports"] if p["portid"] == 2)
ctrl, ns, ana = (json.loads(os.environ[k]) for k in ("CTRL", "NS", "ANA"))
a = s["attr"]
oui = int(a["ieee_oui"], 16)
checks = [
    ("serial", a["serial"], ctrl["sn"]),
    ("model", a["model"], ctrl["mn"]),
    ("firmware", a["firmware"], ctrl["fr"]),
    # Identify IEEE: the OUI least significant byte first
    ("ieee_oui", "%02x%02x%02x" % (oui & 0xFF, (oui >> 8) & 0xFF, oui >> 16), ctrl["ieee"]),
    ("cntlid in range", True, int(a["cntlid_min"]) <= ctrl["cntlid"] <= int(a["cntlid_max"])),
    ("uuid", n["device"]["uuid"].lower(), (ns.get("uuid") or "").lower()),
    ("nguid", n["device"]["nguid"].replace("-", "").lower(), ns["nguid"].replace("-", "").lower()),
    ("anagrpid", n["ana_grpid"], ns["anagrpid"]),
]
state = next(g["ana"]["state"] for g in port["ana_groups"] if g["grpid"] == n["ana_grpid"])
group = next((g for g in ana["groups"] if g["grpid"] == n["ana_grpid"]), {})
checks.append(("ANA group %d state on port 2" % n["ana_grpid"], state, group.get("state")))
checks.append(("ANA group %d namespaces" % n["ana_grpid"], [n["nsid"]], group.get("nsids")))
bad = ["%s: exported %r, nvmet %r" % (k, want, got) for k, want, got in checks if want != got]
if bad:
    print("FAIL: " + "; ".join(bad))
    sys.exit(1)
print("export: PASS nvmet serves what export-nvmetcli wrote (%s): SN %s, UUID %s, ANA group %d %s"
      % (s["nqn"], ctrl["sn"], ns["uuid"], n["ana_grpid"], state))
PY
