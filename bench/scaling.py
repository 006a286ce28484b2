#!/usr/bin/env python3
"""Per-core scaling of the target, for machines with at least 4 CPUs.

bench/run.sh measures on the 2-CPU machines the project is developed on,
where a second target core has to share a CPU with the probe. This script
gives the target cores of its own: the target runs on cores 0..N-1
(`--threads N`, N = 1, 2, 4, ... up to half the CPUs) and the probe on the
upper half of the CPUs with enough queues and threads to keep N cores busy,
so the table shows what one more target core buys. It also measures the cost
of header + data digests at 128 KiB with one dedicated core on each side.

Loopback only, RAM namespace written in full first, medians of --rounds
rounds. Usage: python3 bench/scaling.py [--rounds N] [--time S] [--json FILE]
(after `cargo build --release -p nvmeof-target -p nvmeof-tools`).
"""
import argparse, json, os, platform, resource, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (free_port, wait_port, proc_cpu, NQN, binaries)


class Target(bench.Target):
    """bench.Target pinned to an explicit core list."""

    def __init__(self, cores, extra):
        self.port = bench.free_port()
        cmd = [bench.TARGET, "serve", "--listen", f"127.0.0.1:{self.port}", "--nqn", bench.NQN] + list(extra)
        self.log = tempfile.NamedTemporaryFile(prefix="scaling-target-", suffix=".log", delete=False)
        self.p = subprocess.Popen(cmd, stdout=self.log, stderr=self.log, start_new_session=True,
                                  preexec_fn=pin(cores))
        bench.wait_port(self.port)


def pin(cores):
    """A preexec_fn pinning the child to `cores` (list of CPU numbers)."""
    return lambda: os.sched_setaffinity(0, cores)


def run_probe(t, cores, secs, *flags):
    """Probe pinned to `cores`; returns (IOPS, bytes/s, target CPU s, probe CPU s, I/Os,
    read latency p50, p99, p99.9 in µs)."""
    cmd = [bench.PROBE, f"127.0.0.1:{t.port}", "--nqn", bench.NQN, "--time", f"{secs}s", "--json",
           "--disable-sqflow"] + list(flags)
    c0 = t.cpu()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 60, preexec_fn=pin(cores))
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    c1 = t.cpu()
    if r.returncode != 0:
        raise RuntimeError(f"probe failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    u, s = ru1.ru_utime - ru0.ru_utime, ru1.ru_stime - ru0.ru_stime
    job = json.loads(r.stdout)["jobs"][0]
    ios = job["read"]["total_ios"] + job["write"]["total_ios"]
    iops = job["read"]["iops"] + job["write"]["iops"]
    bw = job["read"]["bw_bytes"] + job["write"]["bw_bytes"]
    pct = job["read"]["lat_ns"]["percentile"] if job["read"]["total_ios"] else {}
    lat = [pct.get(p, 0) / 1000 for p in ("50.000000", "99.000000", "99.900000")]
    return (iops, bw, c1 - c0, float(u) + float(s), ios, *lat)


def span(lo, n):
    return list(range(lo, lo + n))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--time", type=int, default=3, help="seconds per measurement")
    ap.add_argument("--json", help="write every round's figures here")
    ap.add_argument("--poll-us", type=int, default=0,
                    help="busy-poll window of target and probe in the scaling rows (default 0: off)")
    ap.add_argument("--scaling-only", action="store_true", help="skip the QD1 and 128 KiB rows")
    a = ap.parse_args()
    ncpu = os.cpu_count() or 1
    if ncpu < 4:
        sys.exit(f"scaling.py needs at least 4 CPUs (this machine has {ncpu}); bench/run.sh covers 2-CPU machines")
    half = ncpu // 2
    pcores = min(half, 8)
    probe_cores = span(half, pcores)
    ns = ["--ram", "512M"]
    raw, rows = {}, []
    print(f"# machine: {platform.machine()}, {ncpu} CPUs, {platform.release()}; target on cores 0..N-1, "
          f"probe on cores {half}..{half + pcores - 1} ({pcores} threads)", flush=True)

    poll = ["--poll-us", str(a.poll_us)] if a.poll_us else []
    counts = [n for n in (1, 2, 4, 8) if n <= half]
    queues = 2 * counts[-1]
    for rw in ("randread", "randwrite"):
        base = None
        for n in counts:
            key = f"4k-{rw}-{n}core"
            raw[key] = []
            for _ in range(a.rounds):
                t = Target(span(0, n), ns + ["--threads", str(n)] + poll)
                try:
                    run_probe(t, probe_cores, 10, "--rw", "write", "--bs", "1m", "--qd", "4", "--size", "512M", "--count", "512")
                    raw[key].append(run_probe(t, probe_cores, a.time, "--rw", rw, "--bs", "4k", "--qd", "32",
                                              "--queues", str(queues), "--threads", str(pcores), *poll))
                finally:
                    t.stop()
            iops = statistics.median(r[0] for r in raw[key])
            tcpu = statistics.median(r[2] / r[4] * 1e6 for r in raw[key])
            pcpu = statistics.median(r[3] / r[4] * 1e6 for r in raw[key])
            base = base or iops
            polled = f", polling {a.poll_us} µs on both sides" if poll else ""
            rows.append((f"4 KiB {rw}, {queues} queues × QD32, {n} target core(s){polled}",
                         f"{iops / 1e3:.0f}K IOPS", f"{iops / base:.2f}× 1 core; CPU s per 1M I/Os: target {tcpu:.2f}, probe {pcpu:.2f}"))
            print("| " + " | ".join(rows[-1]) + " |", flush=True)

    for poll in (() if a.scaling_only else ((), ("--poll-us", "50"))):
        key = f"4k-qd1{'-poll' if poll else ''}"
        raw[key] = []
        for _ in range(a.rounds):
            t = Target([0], ns + ["--threads", "1", *poll])
            try:
                run_probe(t, [half], 10, "--rw", "write", "--bs", "1m", "--qd", "4", "--size", "512M", "--count", "512")
                raw[key].append(run_probe(t, [half], a.time, "--rw", "randread", "--bs", "4k", "--qd", "1",
                                          "--threads", "1", *poll))
            finally:
                t.stop()
        p50, p99, p999 = (statistics.median(r[i] for r in raw[key]) for i in (5, 6, 7))
        rows.append((f"4 KiB randread QD1, 1 core each, polling {'on (--poll-us 50)' if poll else 'off'}",
                     f"p50 {p50:.1f} µs, p99 {p99:.1f} µs, p99.9 {p999:.1f} µs",
                     f"{statistics.median(r[0] for r in raw[key]) / 1e3:.0f}K IOPS"))
        print("| " + " | ".join(rows[-1]) + " |", flush=True)

    for rw in (() if a.scaling_only else ("read", "write")):
        plain = []
        for dg in ((), ("--digests",)):
            key = f"128k-{rw}{'-digests' if dg else ''}"
            raw[key] = []
            for _ in range(a.rounds):
                t = Target([0], ns + ["--threads", "1"])
                try:
                    run_probe(t, [half], 10, "--rw", "write", "--bs", "1m", "--qd", "4", "--size", "512M", "--count", "512")
                    raw[key].append(run_probe(t, [half], a.time, "--rw", rw, "--bs", "128k", "--qd", "16",
                                              "--threads", "1", *dg))
                finally:
                    t.stop()
            bw = statistics.median(r[1] for r in raw[key])
            note = "" if not dg else f"digest cost {100 * (1 - bw / plain[0]):.1f}%"
            plain.append(bw)
            rows.append((f"128 KiB sequential {rw} QD16, 1 core each{', header+data digests' if dg else ''}",
                         f"{bw / 1e9:.2f} GB/s", note))
            print("| " + " | ".join(rows[-1]) + " |", flush=True)

    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpus": ncpu, "kernel": platform.release(), "rounds": raw}, f, indent=1)


if __name__ == "__main__":
    main()
