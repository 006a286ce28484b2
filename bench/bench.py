#!/usr/bin/env python3
"""Benchmark driver for bench/run.sh.

Runs on loopback only (127.0.0.1). Target pinned to core 0, client to core 1
(taskset), as SPDK's nvmf_tgt/spdk_nvme_perf were measured. Every number is
the median of --rounds rounds taken in this same run, next to the baselines.
"""
import argparse, json, os, platform, re, signal, socket, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.path.join(ROOT, "build/release/nvmeof-target")
PROBE = os.path.join(ROOT, "build/release/nvmeof-probe")
PINGPONG = os.path.join(ROOT, "build/release/examples/cache_line_pingpong")
NQN = "nqn.2026-11.io.nvmeof:bench"
CLK = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} not listening")


def proc_cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def cpu_ticks():
    """(stolen, total) jiffies of all CPUs from /proc/stat: the hypervisor's
    share of this machine's time, a measure of how noisy a round was."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[7], sum(v[:8])


def taskset(core):
    ncpu = os.cpu_count() or 1
    return ["taskset", "-c", str(core % ncpu)]


def target_cores(extra):
    """Core list for the target: core 0, or cores 0..N-1 for `--threads N` > 1
    (on a 2-core machine the second one is shared with the probe)."""
    extra = list(extra)
    n = int(extra[extra.index("--threads") + 1]) if "--threads" in extra else 1
    ncpu = os.cpu_count() or 1
    return ["taskset", "-c", ",".join(str(i) for i in range(min(max(n, 1), ncpu)))]


class Target:
    def __init__(self, args, extra=()):
        self.port = free_port()
        cmd = target_cores(extra) + [TARGET, "serve", "--listen", f"127.0.0.1:{self.port}", "--nqn", NQN] + list(extra)
        self.log = tempfile.NamedTemporaryFile(prefix="bench-target-", suffix=".log", delete=False)
        self.p = subprocess.Popen(cmd, stdout=self.log, stderr=self.log, start_new_session=True)
        wait_port(self.port)
        if "--ram" in extra:
            # Reads must not come from never-written (shared zero) memory: write
            # the whole namespace once with non-zero data.
            size = extra[extra.index("--ram") + 1]
            probe(self, 2, "--rw", "write", "--bs", "1m", "--qd", "4", "--size", size)

    def cpu(self):
        return proc_cpu(self.p.pid)

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        os.unlink(self.log.name)


# Cache-line round trips between the target's and the probe's cores, in ns,
# one before each baseline and probe run (see sample_line_rtt), with what ran after it.
LINE_RTT = []
# Above this the two cores do not share a last-level cache (the AMD EPYC VM:
# ~25 ns on SMT siblings, ~55 ns within a CCX, 310-370 ns otherwise).
FAR_NS = 120


def sample_line_rtt(label):
    """Appends to LINE_RTT, with `label` (what runs next), the round trip of
    one cache line between cores 0 and 1 (ns, 100 ms of ping-pong; nan if it
    fails). On a VM it shows where the hypervisor has put
    the two vCPUs at that moment: on the AMD EPYC VM ~25 ns (SMT siblings),
    ~55 ns (one core complex) or 310-370 ns, seconds apart, and loopback
    throughput moved with it (128 KiB polled reads 2.1-4.0 GB/s far apart,
    4.2-4.8 near)."""
    try:
        r = subprocess.run([PINGPONG, "0", str(1 % (os.cpu_count() or 1)), "100"],
                           capture_output=True, text=True, timeout=10)
        ns = float(r.stdout.strip()) if r.returncode == 0 else float("nan")
    except (OSError, ValueError, subprocess.TimeoutExpired):
        ns = float("nan")
    LINE_RTT.append((ns, label))


def probe(t, secs, *flags):
    """Runs the probe on core 1; returns (report json, probe cpu seconds, target cpu seconds)."""
    sample_line_rtt(" ".join(map(str, flags)))
    out = tempfile.NamedTemporaryFile(prefix="bench-time-", delete=False)
    out.close()
    cmd = taskset(1) + ["/usr/bin/time", "-f", "%U %S", "-o", out.name, PROBE, f"127.0.0.1:{t.port}",
                        "--nqn", NQN, "--time", f"{secs}s", "--json", "--disable-sqflow"] + list(flags)
    c0 = t.cpu()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 60)
    c1 = t.cpu()
    if r.returncode != 0:
        raise RuntimeError(f"probe failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    with open(out.name) as f:
        u, s = f.read().split()[-2:]
    os.unlink(out.name)
    return json.loads(r.stdout), float(u) + float(s), c1 - c0


def idle_cpu(t, secs, poll):
    """Target and probe CPU (% of one core) while a controller stays connected
    and does one 4 KiB read per second (keep-alive traffic included)."""
    cmd = taskset(1) + [PROBE, f"127.0.0.1:{t.port}", "--nqn", NQN, "--rw", "randread", "--bs", "4k",
                        "--qd", "1", "--rate", "1", "--time", f"{secs + 3}s", "-q"] + (["--poll-us", "50"] if poll else [])
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        time.sleep(1.5)
        c0, p0 = t.cpu(), proc_cpu(p.pid)
        time.sleep(secs)
        c1, p1 = t.cpu(), proc_cpu(p.pid)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return 100 * (c1 - c0) / secs, 100 * (p1 - p0) / secs


def attach_loop(size):
    """(device, backing file) of a loop device with direct I/O over a new
    `size`-byte file in /var/tmp, or None where that is not allowed (not root,
    no losetup, no loop driver)."""
    if os.geteuid() != 0 or not any(os.access(os.path.join(d, "losetup"), os.X_OK)
                                    for d in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/sbin", "/sbin"]):
        return None
    backing = os.path.join("/var/tmp" if os.path.isdir("/var/tmp") else tempfile.gettempdir(),
                           f"nvmeof-bench-loop-{os.getpid()}.img")
    with open(backing, "wb") as f:
        chunk = os.urandom(1 << 20)
        for _ in range(size >> 20):
            f.write(chunk)
    r = subprocess.run(["losetup", "-f", "--show", "--direct-io=on", backing], capture_output=True, text=True,
                       env=dict(os.environ, PATH=os.environ.get("PATH", "") + ":/usr/sbin:/sbin"))
    if r.returncode != 0:
        print(f"block device rows skipped: losetup: {r.stderr.strip()}", file=sys.stderr)
        os.unlink(backing)
        return None
    return r.stdout.strip(), backing


def side(rep, name):
    return rep["jobs"][0][name]


def iperf3(secs):
    sample_line_rtt("iperf3")
    port = free_port()
    srv = subprocess.Popen(taskset(0) + ["iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        # No probe connection: "-1" makes the server serve exactly one client.
        time.sleep(0.5)
        r = subprocess.run(taskset(1) + ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(secs), "-J"],
                           capture_output=True, text=True, timeout=secs + 30)
        return json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"] / 8
    finally:
        srv.kill()
        srv.wait()


def sockperf(secs, size, spin=False):
    """p50 one-way latency (half the round trip) of sockperf's TCP ping-pong.

    spin: both ends busy-poll non-blocking sockets with recvfrom instead of
    sleeping in epoll: the round trip of a polled exchange on this machine
    with nothing but the kernel's TCP in it, the floor of the QD1 polling row.
    """
    sample_line_rtt(f"sockperf {size}{' spin' if spin else ''}")
    port = free_port()
    addr = ["--tcp", "-i", "127.0.0.1", "-p", str(port)]
    feed = None
    if spin:
        # sockperf takes its recvfrom loop (-F r) only with a feed file.
        feed = tempfile.NamedTemporaryFile("w", prefix="bench-sockperf-", suffix=".feed", delete=False)
        feed.write(f"T:127.0.0.1:{port}\n")
        feed.close()
        addr = ["-f", feed.name, "-F", "r", "--nonblocked"]
    srv = subprocess.Popen(taskset(0) + ["sockperf", "sr", *addr],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        time.sleep(0.5)
        r = subprocess.run(taskset(1) + ["sockperf", "pp", *addr, "-t", str(secs), "-m", str(size)],
                           capture_output=True, text=True, timeout=secs + 30)
        m = re.search(r"percentile 50\.000 =\s*([\d.]+)", r.stdout + r.stderr)
        return float(m.group(1)) if m else float("nan")
    finally:
        srv.kill()
        srv.wait()
        if feed:
            os.unlink(feed.name)


def med(xs):
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def paired(res, num, den, scale=1.0):
    """Median over rounds of num/den taken in the same round. Neighbours on a
    shared VM slow whole stretches of a run; a ratio of two measurements made
    minutes apart picks that up, one of back-to-back measurements much less."""
    return med([scale * a / b for a, b in zip(res[num], res[den]) if b])


# 4 KiB QD32 shapes: (queues, depth per queue). SPDK's figure is one queue at
# QD32; 2 × 16 keeps 32 commands in flight too; 2 × 32 (64 in flight) is shown
# as well, but compared with SPDK only as a separate line.
SHAPES = ((1, 32), (2, 16), (2, 32))
# Region of the cache-resident 4 KiB rows: fits the 32 MiB L3 of these VMs (512 KiB L2 per core).
HOT = "16M"


def shape_label(nq, qd):
    if nq == 1:
        return f"1 queue × QD{qd}"
    return f"{nq} queues × QD{qd} ({nq * qd} in flight)"


def digest_pair(t, secs, record, key, rw, *flags):
    """Measures one 128 KiB configuration plain and with digests as four runs of
    secs / 2 in the order plain, digests, digests, plain, and records the mean
    of each pair under `key` and `key`_dig. Throughput on a shared VM moves in
    phases of seconds to minutes (the same command 2-5 GB/s on the AMD EPYC
    VM); a plain run followed by a digested one put all of a drift between them
    on the digest cost, which this order cancels."""
    bw = {False: [], True: []}
    for dig in (False, True, True, False):
        rep, _, _ = probe(t, secs / 2, "--rw", rw, "--bs", "128k", "--qd", "16", *flags,
                          *(["--digests"] if dig else []))
        bw[dig].append(side(rep, rw)["bw_bytes"])
    record(key, sum(bw[False]) / 2)
    record(key + "_dig", sum(bw[True]) / 2)


def digest_cost(res, rw, suffix=""):
    """Throughput lost to header + data digests at 128 KiB, in % (suffix "_poll": polling on)."""
    return 100 * (1 - paired(res, f"seq{rw}_128k{suffix}_dig", f"seq{rw}_128k{suffix}"))


# 128 KiB rows: key suffix → label.
SEQ_CFGS = (("", "polling off"), ("_poll", "polling on both sides"))


def source_revision():
    """The commit the binaries were built from, "-dirty" when the checkout has
    changes git tracks (an A/B run of uncommitted code must not read as the
    commit's), or "unknown" outside a git checkout."""
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def read_first(path):
    """First word of a file (a sysctl), or "?"."""
    try:
        with open(path) as f:
            return f.read().split()[0]
    except (OSError, IndexError):
        return "?"


# The system's TCP congestion control, and whether the 128 KiB pairs with
# polling are measured again with CUBIC per connection (`--congestion cubic`):
# when the system's is another algorithm and CUBIC is loaded.
SYSTEM_CC = read_first("/proc/sys/net/ipv4/tcp_congestion_control")
try:
    with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as f:
        CUBIC_PAIR = SYSTEM_CC != "cubic" and "cubic" in f.read().split()
except OSError:
    CUBIC_PAIR = False
CUBIC_SUF = ("_poll_cubic", "polling on both sides, CUBIC on both sides (--congestion cubic)")
# The 128 KiB configurations whose digest cost is reported.
DIGEST_CFGS = SEQ_CFGS + ((CUBIC_SUF,) if CUBIC_PAIR else ())


def near_goals(res, far, spdk):
    """The goal lines again from the rounds measured with the two vCPUs near
    each other (`far` false). Where the hypervisor puts the vCPUs moves
    loopback figures a lot (QD1 p50 ~11 against ~17 µs, 4 KiB QD32 reads
    ~530K against ~310K IOPS on the AMD EPYC VM), so a run's medians mix two
    machines; this line says what the code does on the faster one."""
    yes = lambda ok: "holds" if ok else "does not hold"

    def near(key):
        """(this key's figures from near rounds, "n of N rounds")."""
        v = [x for x, f in zip(res.get(key, []), far.get(key, [])) if not f and x == x]
        return v, f"{len(v)} of {len(res.get(key, []))} rounds"

    parts = []
    for rw in ("randread", "randwrite"):
        k = f"{rw}_qd32_q1_poll_iops"
        v, n = near(k)
        if not v:
            parts.append(f"4 KiB QD32 {rw} (1 queue, polling): no round near")
            continue
        both = [4096 * a / b for a, b, fa, fb in zip(res[k], res["iperf3"], far[k], far["iperf3"])
                if not fa and not fb and b]
        ratio = (f"{med(both):.2f}× iperf3 in the {len(both)} with iperf3 near too — {yes(med(both) >= 0.94)}"
                 if both else "no round with iperf3 near too")
        parts.append(f"4 KiB QD32 {rw} (1 queue, polling) {med(v) / 1e3:.0f}K IOPS ({n}) — "
                     f"{yes(med(v) >= spdk[rw])}; bytes {ratio}")
    (p50, n), (p999, _) = near("qd1_poll_50.000000"), near("qd1_poll_99.900000")
    if p50:
        parts.append(f"QD1 read with polling p50 {med(p50):.2f} µs ({n}) — {yes(med(p50) <= 12)}, "
                     f"p99.9 {med(p999):.1f} µs — {yes(med(p999) <= 100)}")
    else:
        parts.append("QD1 read with polling: no round near")
    return (f"- The same goals from the rounds run with the vCPUs near each other only (no cache-line sample "
            f"above {FAR_NS} ns just before or after the run; medians): " + "; ".join(parts) + ".")


def goals(M, res, steal, far):
    """The goals of the performance issue, checked against this run (medians).
    SPDK's figures come from the issue (SPDK v25.09, one core each for
    nvmf_tgt and spdk_nvme_perf, measured on another machine of this kind).
    `far` (per key and round, vCPUs far apart) adds the goals of the rounds
    run near, where the machine sampled its placement."""
    out = ["## Goals", "",
           "SPDK reference (from the issue, another machine of this kind, nvmf_tgt and spdk_nvme_perf on one "
           "core each, polling): 4 KiB QD32 randread 424K / randwrite ~440K IOPS, QD1 p50 12.2 µs, "
           "128 KiB read 1.5× iperf3.", ""]
    yes = lambda ok: "**holds**" if ok else "**does not hold**"
    # The iperf3 baseline moves with the other guests on the host: when its
    # rounds spread by more than 30%, ratios against it say little.
    ip = res["iperf3"]
    unstable = len(ip) > 1 and min(ip) > 0 and max(ip) / min(ip) > 1.3
    if unstable:
        out += [f"**The iperf3 baseline was unstable in this run** (rounds "
                f"{' / '.join(f'{x / 1e9:.2f}' for x in ip)} GB/s, spread > 30%): the ratios to iperf3 below "
                "are not reliable; rerun on a quieter machine before reading them.", ""]
    caveat = " (unstable baseline)" if unstable else ""
    spdk = {"randread": 424e3, "randwrite": 440e3}
    for rw in ("randread", "randwrite"):
        # Key of each configuration's IOPS → its label; 32 commands in flight, as SPDK's run.
        cfgs = {f"{rw}_qd{qd}_q{nq}_{suf}_iops": f"{shape_label(nq, qd)}, {lab}"
                for suf, lab in (("t1", "polling off"), ("poll", "polling on"))
                for nq, qd in SHAPES if nq * qd == 32}
        best = max(cfgs, key=lambda k: M[k])
        iops = M[best]
        ratio = paired(res, best, "iperf3", 4096)
        q64 = max(M[f"{rw}_qd32_q2_{suf}_iops"] for suf in ("t1", "poll"))
        out.append(f"- 4 KiB QD32 {rw} IOPS ≥ SPDK's {spdk[rw] / 1e3:.0f}K (32 commands in flight): best "
                   f"{iops / 1e3:.0f}K ({cfgs[best]}) — {yes(iops >= spdk[rw])}; 1 queue with polling, "
                   f"SPDK's shape: {M[f'{rw}_qd32_q1_poll_iops'] / 1e3:.0f}K. With 2 queues × QD32 (64 in "
                   f"flight): {q64 / 1e3:.0f}K.")
        hot = f"{rw}_qd32_q1_hot_poll_iops"
        out.append(f"- 4 KiB QD32 {rw} bytes/s ≥ 0.94× iperf3 (same configuration): {ratio:.2f}× — "
                   f"{yes(ratio >= 0.94)}{caveat}. The same shape as SPDK's on a {HOT}iB region that stays in "
                   f"the CPU caches: {paired(res, hot, 'iperf3', 4096):.2f}× iperf3 ({M[hot] / 1e3:.0f}K IOPS).")
    for rw in ("read", "write"):
        # As for 4 KiB: the better configuration (SPDK's figure polls on both cores).
        r = {lab: paired(res, f"seq{rw}_128k{suf}", "iperf3") for suf, lab in SEQ_CFGS}
        best = max(r, key=r.get)
        out.append(f"- 128 KiB sequential {rw} ≥ 1.5× iperf3: best {r[best]:.2f}× ({best}) — "
                   f"{yes(r[best] >= 1.5)}{caveat}; "
                   + ", ".join(f"{lab} {v:.2f}×" for lab, v in r.items()) + ".")
    p50, p999 = M["qd1_poll_50.000000"], M["qd1_poll_99.900000"]
    out.append(f"- 4 KiB QD1 read with polling p50 ≤ 12 µs: {p50:.2f} µs — {yes(p50 <= 12)}; "
               f"p99.9 ≤ 100 µs: {p999:.1f} µs — {yes(p999 <= 100)}. Without polling: p50 "
               f"{M['qd1_nopoll_50.000000']:.1f} µs round trip (sockperf ping-pong 64 B: "
               f"{2 * M['sockperf64']:.1f} µs round trip, reported as {M['sockperf64']:.1f} µs one-way). "
               f"The floor with polling, TCP alone: a busy-polled sockperf ping-pong took "
               f"{2 * M['sockperf64_spin']:.1f} µs round trip with 64 B each way and "
               f"{2 * M['sockperf4k_spin']:.1f} µs with 4 KiB each way (a QD1 read sends 72 B and gets 4 KiB back).")
    if LINE_RTT and any(x == x for x, _ in LINE_RTT):
        out.append(near_goals(res, far, spdk))
    tc = res["idle_nopoll"][0][0]
    out.append(f"- Idle target CPU ~0% without polling: {tc:.1f}% of a core — {yes(tc < 1)}.")
    for rw in ("read", "write"):
        # Judged in each configuration: with polling both sides are CPU-bound,
        # so every cycle the digests take shows in the throughput.
        c = {lab: digest_cost(res, rw, suf) for suf, lab in DIGEST_CFGS}
        out.append(f"- Header + data digests cost ≤ 10% at 128 KiB {rw}: "
                   + "; ".join(f"{lab} {v:.1f}% — {yes(v <= 10)}" for lab, v in c.items()) + "."
                   + (" The reads go over the namespace many times, and the RAM namespace keeps the CRC32C "
                      "of every 4 KiB block a digested read has seen (a write drops those of its blocks), "
                      "so these rows show data read again; the first read of data since it was written still "
                      "computes the CRC from the bytes." if rw == "read" else ""))
    # io_uring is the default engine where it is faster (config.rs IoEngine::FILE_DEFAULT / BLOCK_DEFAULT).
    for kind, default in (("file", "uring"), ("block", "uring")):
        if f"{kind}_threads_randread" in M:
            r = [paired(res, f"{kind}_uring_{rw}", f"{kind}_threads_{rw}") for rw in ("randread", "randwrite")]
            # Faster: ahead on one workload and not behind (beyond 5% noise) on the other.
            faster = ("uring" if max(r) > 1 and min(r) >= 0.95 else
                      "threads" if min(r) < 1 and max(r) <= 1 / 0.95 else "neither")
            out.append(f"- Default I/O engine of {kind} namespaces is the faster one (ahead on reads or writes, "
                       f"not behind by more than 5% on the other): default {default}, "
                       f"io_uring/threads {r[0]:.2f}× reads, {r[1]:.2f}× writes — {yes(faster == default)}.")
    out += ["", "Ratios are medians of per-round ratios (each round measures the baseline and both sides of a "
            "comparison close together), so they can differ from the ratio of the medians in the table.",
            "", "CPU time stolen by the hypervisor per round (a measure of noise from other guests): "
            + ", ".join(f"{x:.1f}%" for x in steal) + "."]
    rtt = [x for x, _ in LINE_RTT if x == x]
    if rtt:
        far = sum(x > FAR_NS for x in rtt)
        out += ["", "Round trip of one cache line between cores 0 and 1 (`cache_line_pingpong`, 100 ms before "
                "each baseline and probe run; where the hypervisor placed the two vCPUs, which moves every loopback "
                f"figure): median {med(rtt):.0f} ns, {min(rtt):.0f}–{max(rtt):.0f} ns, "
                f"{far} of {len(rtt)} samples above {FAR_NS} ns."]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--time", type=int, default=5, help="seconds per measurement")
    ap.add_argument("--quick", action="store_true", help="1 round, 2 s each (smoke test of the script)")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs/benchmarks.md"))
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.time = 1, 2
    T = a.time
    rows = []  # (name, value, unit, note)
    res = {}

    # Per result key and round, the cache-line samples around its runs:
    # LINE_RTT[start:end] were taken before them (a key recorded without new
    # runs, as the digested half of a pair, shares the runs of the key before
    # it) and LINE_RTT[end], the next one, right after them.
    spans = {}
    runs_start, runs_end = 0, 0  # LINE_RTT[runs_start:runs_end]: the samples behind the last result

    def record(key, v):
        nonlocal runs_start, runs_end
        res.setdefault(key, []).append(v)
        if len(LINE_RTT) > runs_end:
            runs_start, runs_end = runs_end, len(LINE_RTT)
        spans.setdefault(key, []).append((runs_start, runs_end))

    ram = ["--ram", "512M", "--block-size", "512"]
    probe_poll = ["--poll-us", "50"]
    steal = []  # % of CPU time stolen by the hypervisor, per round
    for rnd in range(a.rounds):
        print(f"round {rnd + 1}/{a.rounds}", file=sys.stderr)
        st0, tot0 = cpu_ticks()
        record("iperf3", iperf3(T))
        record("sockperf64", sockperf(T, 64))
        record("sockperf4k", sockperf(T, 4096))
        record("sockperf64_spin", sockperf(T, 64, spin=True))
        record("sockperf4k_spin", sockperf(T, 4096, spin=True))
        for poll in (False, True):
            t = Target(a, ram + (["--poll-us", "50"] if poll else []) + ["--threads", "1"])
            try:
                rep, _, _ = probe(t, T, "--rw", "randread", "--bs", "4k", "--qd", "1",
                                  *(probe_poll if poll else []))
                lat = side(rep, "read")["lat_ns"]
                tag = "poll" if poll else "nopoll"
                for p in ("50.000000", "99.000000", "99.900000"):
                    record(f"qd1_{tag}_{p}", lat["percentile"][p] / 1000)
                record(f"qd1_{tag}_iops", side(rep, "read")["iops"])
                if poll:
                    for rw in ("randread", "randwrite"):
                        for nq, qd in SHAPES:
                            rep, pcpu, tcpu = probe(t, T, "--rw", rw, "--bs", "4k", "--qd", str(qd),
                                                    "--queues", str(nq), *probe_poll)
                            s = side(rep, "read" if rw == "randread" else "write")
                            key = f"{rw}_qd{qd}_q{nq}_poll"
                            record(key + "_iops", s["iops"])
                            record(key + "_tcpu", tcpu / s["total_ios"] * 1e6)
                            record(key + "_pcpu", pcpu / s["total_ios"] * 1e6)
                    # SPDK's shape again on a region small enough to stay in
                    # the CPU caches: how much of the rows above is the copy
                    # of cold namespace memory (the goal's iperf3 baseline
                    # sends one hot buffer over and over).
                    for rw in ("randread", "randwrite"):
                        rep, _, _ = probe(t, T, "--rw", rw, "--bs", "4k", "--qd", "32", "--size", HOT,
                                          *probe_poll)
                        s = side(rep, "read" if rw == "randread" else "write")
                        record(f"{rw}_qd32_q1_hot_poll_iops", s["iops"])
                    for rw in ("read", "write"):
                        digest_pair(t, T, record, f"seq{rw}_128k_poll", rw, *probe_poll)
            finally:
                t.stop()
        for threads in (1, 2):
            t = Target(a, ram + ["--threads", str(threads)])
            try:
                for nq, qd in SHAPES:
                    for rw in ("randread", "randwrite"):
                        # 2 target cores: reads on 2 queues × QD32 only.
                        if threads == 2 and (rw == "randwrite" or (nq, qd) != (2, 32)):
                            continue
                        rep, pcpu, tcpu = probe(t, T, "--rw", rw, "--bs", "4k", "--qd", str(qd),
                                                "--queues", str(nq))
                        s = side(rep, "read" if rw == "randread" else "write")
                        ios = s["total_ios"]
                        key = f"{rw}_qd{qd}_q{nq}_t{threads}"
                        record(key + "_iops", s["iops"])
                        record(key + "_tcpu", tcpu / ios * 1e6)
                        record(key + "_pcpu", pcpu / ios * 1e6)
                for rw in ("read", "write"):
                    if threads == 1:
                        digest_pair(t, T, record, f"seq{rw}_128k", rw)
            finally:
                t.stop()
        # The default socket send buffer against the kernel's autotuning
        # (--send-buffer 0 on both sides), polling off as the rows above.
        t = Target(a, ram + ["--threads", "1", "--send-buffer", "0"])
        try:
            for rw in ("read", "write"):
                rep, _, _ = probe(t, T, "--rw", rw, "--bs", "128k", "--qd", "16", "--send-buffer", "0")
                record(f"seq{rw}_128k_autotuned", side(rep, rw)["bw_bytes"])
        finally:
            t.stop()
        # The 128 KiB pairs with polling again under CUBIC on both sides
        # (--congestion cubic), where the system's algorithm is another one:
        # BBR on loopback (minimum RTT 1-2 µs, paced by TCP's own timer) moves
        # digested writes with polling by 10-20 points between runs.
        if CUBIC_PAIR:
            cc = ["--congestion", "cubic"]
            t = Target(a, ram + ["--threads", "1", *probe_poll, *cc])
            try:
                for rw in ("read", "write"):
                    digest_pair(t, T, record, f"seq{rw}_128k_poll_cubic", rw, *probe_poll, *cc)
            finally:
                t.stop()
        # File backend: worker threads and io_uring through the page cache (the
        # default, buffered_io), and io_uring with O_DIRECT where the filesystem
        # supports it (--buffered-io false).
        img = os.path.join(tempfile.gettempdir(), "nvmeof-bench.img")
        for engine, flags in (("threads", []), ("uring", []), ("uring_direct", ["--buffered-io", "false"])):
            t = Target(a, ["--file", img, "--size", "1G", "--io-engine", engine.split("_")[0], *flags,
                           "--threads", "1"])
            try:
                probe(t, 1, "--rw", "write", "--bs", "1m", "--qd", "4", "--size", "256M")  # populate
                for rw in ("randread", "randwrite"):
                    # Write back what the previous run dirtied, so that its
                    # writeback does not run inside this engine's measurement.
                    os.sync()
                    rep, _, _ = probe(t, T, "--rw", rw, "--bs", "4k", "--qd", "32", "--size", "256M")
                    s = side(rep, "read" if rw == "randread" else "write")
                    record(f"file_{engine}_{rw}", s["iops"])
            finally:
                t.stop()
        os.unlink(img)
        # Block device (O_DIRECT), worker threads vs io_uring: a loop device with
        # direct I/O over a file on disk, where root may attach one.
        loop = attach_loop(256 << 20)
        if loop:
            dev, backing = loop
            try:
                for engine in ("threads", "uring"):
                    t = Target(a, ["--block", dev, "--io-engine", engine, "--threads", "1"])
                    try:
                        for rw in ("randread", "randwrite"):
                            rep, _, _ = probe(t, T, "--rw", rw, "--bs", "4k", "--qd", "32")
                            s = side(rep, "read" if rw == "randread" else "write")
                            record(f"block_{engine}_{rw}", s["iops"])
                    finally:
                        t.stop()
            finally:
                subprocess.run(["losetup", "-d", dev], check=False)
                os.unlink(backing)
        st1, tot1 = cpu_ticks()
        steal.append(100 * (st1 - st0) / max(tot1 - tot0, 1))
    # Idle: once, after the rounds (nothing to take a median of at ~0%).
    for poll in (False, True):
        t = Target(a, ["--ram", "64M"] + (["--poll-us", "50"] if poll else []) + ["--threads", "1"])
        try:
            record(f"idle_{'poll' if poll else 'nopoll'}", idle_cpu(t, T, poll))
        finally:
            t.stop()

    # Whether each round's figure was measured with the two vCPUs far apart:
    # a sample above FAR_NS before or right after its runs. Samples before
    # the runs alone missed moves during them: in one run, a QD1 round took
    # 17.2 µs p50 after a 56 ns sample, against 11.5-12.7 µs in the others.
    far = {k: [any(x > FAR_NS for x, _ in LINE_RTT[s:e + 1]) for s, e in v] for k, v in spans.items()}
    M = {k: med(v) for k, v in res.items() if not k.startswith("idle_")}
    gb = lambda b: b / 1e9
    ip = M["iperf3"]
    lines = []
    add = lambda name, val, note="": lines.append(f"| {name} | {val} | {note} |")
    add("iperf3 single stream (baseline)", f"{gb(ip):.2f} GB/s")
    # sockperf reports half the round trip; the probe's latencies are whole round trips.
    add("sockperf ping-pong 64 B p50, one-way = round trip / 2 (baseline)", f"{M['sockperf64']:.1f} µs",
        f"round trip {2 * M['sockperf64']:.1f} µs")
    add("sockperf ping-pong 4 KiB p50, one-way = round trip / 2 (baseline)", f"{M['sockperf4k']:.1f} µs",
        f"round trip {2 * M['sockperf4k']:.1f} µs")
    for k, size in (("sockperf64_spin", "64 B"), ("sockperf4k_spin", "4 KiB")):
        add(f"sockperf ping-pong {size} p50, both ends busy-polling (-F recvfrom --nonblocked), one-way (baseline)",
            f"{M[k]:.1f} µs", f"round trip {2 * M[k]:.1f} µs")
    for tag, label in (("nopoll", "polling off"), ("poll", "polling on (--poll-us 50) on both sides")):
        tc, pc = res[f"idle_{tag}"][0]
        add(f"Idle CPU, 1 controller connected doing 1 read/s, {label}",
            f"target {tc:.1f}% / probe {pc:.1f}% of a core", f"over {T} s")
    for tag, label in (("nopoll", "polling off"), ("poll", "polling on (--poll-us 50)")):
        add(f"4 KiB randread QD1, {label}",
            f"p50 {M[f'qd1_{tag}_50.000000']:.1f} µs, p99 {M[f'qd1_{tag}_99.000000']:.1f} µs, "
            f"p99.9 {M[f'qd1_{tag}_99.900000']:.1f} µs", f"{M[f'qd1_{tag}_iops']:.0f} IOPS")
    for suffix, label in (("t1", "1 target core"), ("poll", "polling on both sides")):
        for rw in ("randread", "randwrite"):
            for nq, qd in SHAPES:
                k = f"{rw}_qd{qd}_q{nq}_{suffix}"
                iops = M[k + "_iops"]
                add(f"4 KiB {rw}, {shape_label(nq, qd)}, {label}", f"{iops / 1e3:.0f}K IOPS",
                    f"{gb(iops * 4096):.2f} GB/s = {paired(res, k + '_iops', 'iperf3', 4096):.2f}× iperf3; "
                    f"CPU s per 1M I/Os: "
                    f"target {M[k + '_tcpu']:.2f}, probe {M[k + '_pcpu']:.2f}")
    for rw in ("randread", "randwrite"):
        k = f"{rw}_qd32_q1_hot_poll_iops"
        add(f"4 KiB {rw}, 1 queue × QD32, polling on both sides, {HOT}iB region (stays in the CPU caches)",
            f"{M[k] / 1e3:.0f}K IOPS",
            f"{gb(M[k] * 4096):.2f} GB/s = {paired(res, k, 'iperf3', 4096):.2f}× iperf3; "
            f"{paired(res, k, f'{rw}_qd32_q1_poll_iops'):.2f}× the 512 MiB region")
    k = "randread_qd32_q2_t2"
    add("4 KiB randread, 2 queues × QD32, 2 target cores (0-1, core 1 shared with the probe)",
        f"{M[k + '_iops'] / 1e3:.0f}K IOPS",
        f"scaling 1→2 cores: {paired(res, k + '_iops', 'randread_qd32_q2_t1_iops'):.2f}×; CPU s per 1M I/Os: "
        f"target {M[k + '_tcpu']:.2f}, probe {M[k + '_pcpu']:.2f}")
    for suf, label in DIGEST_CFGS:
        for rw in ("read", "write"):
            b = M[f"seq{rw}_128k{suf}"]
            bd = M[f"seq{rw}_128k{suf}_dig"]
            # iperf3 runs with the system's algorithm: the CUBIC rows are
            # compared with the same rows under it instead.
            vs = (f"{paired(res, f'seq{rw}_128k{suf}', f'seq{rw}_128k_poll'):.2f}× the same with {SYSTEM_CC}"
                  if suf == CUBIC_SUF[0] else f"{paired(res, f'seq{rw}_128k{suf}', 'iperf3'):.2f}× iperf3")
            add(f"128 KiB sequential {rw} QD16, {label}", f"{gb(b):.2f} GB/s", vs)
            add(f"128 KiB sequential {rw} QD16, {label}, header+data digests", f"{gb(bd):.2f} GB/s",
                f"digest cost {digest_cost(res, rw, suf):.1f}%")
    for rw in ("read", "write"):
        k = f"seq{rw}_128k_autotuned"
        add(f"128 KiB sequential {rw} QD16, polling off, SO_SNDBUF left to the kernel's autotuning "
            f"(--send-buffer 0 on both sides)", f"{gb(M[k]):.2f} GB/s",
            f"default send buffer / autotuning: {paired(res, f'seq{rw}_128k', k):.2f}×")
    for rw in ("randread", "randwrite"):
        th, ur, di = M[f"file_threads_{rw}"], M[f"file_uring_{rw}"], M[f"file_uring_direct_{rw}"]
        add(f"4 KiB {rw} QD32, file backend (256 MiB region; threads and io_uring through the page cache, "
            f"io_uring O_DIRECT where the filesystem allows it)",
            f"threads {th / 1e3:.0f}K / io_uring {ur / 1e3:.0f}K / io_uring O_DIRECT {di / 1e3:.0f}K IOPS",
            f"io_uring/threads {paired(res, f'file_uring_{rw}', f'file_threads_{rw}'):.2f}× (page cache); "
            f"O_DIRECT/threads {paired(res, f'file_uring_direct_{rw}', f'file_threads_{rw}'):.2f}×")
    if "block_threads_randread" in M:
        for rw in ("randread", "randwrite"):
            th, ur = M[f"block_threads_{rw}"], M[f"block_uring_{rw}"]
            add(f"4 KiB {rw} QD32, block device (loop device with direct I/O over a 256 MiB file, O_DIRECT)",
                f"threads {th / 1e3:.0f}K / io_uring {ur / 1e3:.0f}K IOPS",
                f"io_uring/threads {paired(res, f'block_uring_{rw}', f'block_threads_{rw}'):.2f}×")
    else:
        add("4 KiB QD32, block device", "not measured", "needs root, losetup and the loop driver")
    table = "| measurement | median | notes |\n|---|---|---|\n" + "\n".join(lines)
    table += "\n\n" + goals(M, res, steal, far)
    # CPU-time keys go with their IOPS key.
    hit = sorted(k for k, v in far.items() if any(v) and not k.endswith(("_pcpu", "_tcpu")))
    if LINE_RTT:
        table += ("\n\nResults with at least one round measured while the vCPUs were far apart (a sample above "
                  f"{FAR_NS} ns before or right after one of its runs; rounds far / rounds, keys of the `.json` file): "
                  + (", ".join(f"{k} {sum(far[k])}/{len(far[k])}" for k in hit) or "none") + ".")
    print(table)
    cpu = ""
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except Exception:
        pass
    # The iperf3 baseline moves with these: on one machine here a single
    # stream ran 2.7 GB/s with BBR (loopback has no fq qdisc, so BBR paces
    # with TCP's own timer) and 8.0 GB/s with cubic.
    try:
        l2 = int(subprocess.run(["getconf", "LEVEL2_CACHE_SIZE"], capture_output=True, text=True).stdout.strip() or 0)
    except (OSError, ValueError):
        l2 = 0
    tcp = f"TCP congestion control {SYSTEM_CC}"
    if l2 > 0:
        tcp += f", L2 {l2 >> 10} KiB per core"
    # It caps the default socket send buffer (208 KiB on a stock kernel).
    tcp += f", net.core.wmem_max {read_first('/proc/sys/net/core/wmem_max')}"
    rev = source_revision()
    with open(a.out, "w") as f:
        f.write("# Benchmarks\n\nProduced by `bench/run.sh` (loopback, RAM namespace 512 MiB written in full "
                "before measuring, target pinned to "
                "core 0 (cores 0-1 for the 2-core row) and probe to core 1; medians of "
                f"{a.rounds} rounds of {T} s, baselines measured in the same run). Target and probe "
                "run with their defaults unless a row says otherwise: 128 KiB in-capsule data, so 128 KiB "
                "writes travel in the command capsule without an R2T; a socket send buffer (SO_SNDBUF) of "
                "a quarter of the per-core L2 cache on both sides. The probe connects with "
                "`--disable-sqflow`, so reads complete with the C2HData SUCCESS flag and no response "
                "capsule, the wire shape of SPDK's target (`c2h_success`, on by default) in the SPDK "
                "figures. The 128 KiB rows with and without digests run as halves of "
                f"{T} s in the order plain, digests, digests, plain, so a drift of the machine during "
                "the pair does not land on the digest cost. Every round's figures are in the "
                f"`.json` file beside this one.\n\n"
                f"Machine: {platform.node()}, {os.cpu_count()} CPUs ({cpu}), {platform.release()}, {tcp}, "
                f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Source: commit {rev}.\n\n{table}\n")
    # Every round's figures, for checking the medians and ratios above.
    raw = os.path.splitext(a.out)[0] + ".json"
    with open(raw, "w") as f:
        # [ns, probe flags] per probe run, in run order.
        # far_rounds: per key, whether each round ran with the vCPUs far apart.
        # source_revision: the commit measured (see source_revision).
        json.dump({**res, "line_rtt_ns": LINE_RTT, "far_rounds": far, "source_revision": rev}, f, indent=1, sort_keys=True)
    print(f"\nwritten to {a.out} and {raw}", file=sys.stderr)


if __name__ == "__main__":
    main()
