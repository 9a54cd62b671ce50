#!/usr/bin/env python3
"""Helpers for bench/run.sh and bench/storage.sh: parse wrk output, and print the figures.

  report.py wrk FILE        -> "rps p50_ms p99_ms errors requests" from one `wrk --latency` output
  report.py table RESULTS   -> bench/run.sh's figures (markdown) from "name value" lines
  report.py storage RESULTS -> bench/storage.sh's figures (markdown): object store against disk
  report.py streams RESULTS -> bench/streams.sh's figures (markdown): archive streams against nginx
  report.py compare RESULTS -> bench/compare.sh's figures (markdown): two builds against nginx

RESULTS holds one "name value" pair per line; a name given several times (repeated runs) is
reported as the median of its values.
"""

import re
import statistics
import sys

UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def wrk(path):
    text = open(path).read()
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    dist = dict(
        (pct, float(v) * UNITS[u])
        for pct, v, u in re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s|m)\s*$", text, re.M)
    )
    errors = 0
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    if m:
        errors += int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        errors += sum(int(x) for x in m.groups())
    requests = int(re.search(r"(\d+) requests in", text).group(1))
    print(f"{rps:.1f} {dist['50']:.3f} {dist['99']:.3f} {errors} {requests}")


def load(path):
    values = {}
    for line in open(path):
        parts = line.split()
        if len(parts) == 2:
            values.setdefault(parts[0], []).append(float(parts[1]))
    return {k: statistics.median(v) for k, v in values.items()}, values


def table(path):
    r, raw = load(path)
    out = []
    verdicts = []

    def get(name):
        return r.get(name)

    def fmt(v, spec):
        return "-" if v is None else format(v, spec)

    def ratio(a, b):
        return None if a is None or b in (None, 0) else a / b

    def n_of(name):
        return len(raw.get(name, []))

    def name_of(doc):
        return "`:version.json`" if doc == "version" else "`index.json`"

    # Warm metadata.
    docs = [d for d in ("version", "index") if any(k.startswith(f"meta.{d}.") for k in r)]
    if docs:
        out.append("### Warm metadata (wrk, HTTP/1.1 keep-alive over TLS 1.3)\n")
        out.append("| document | conns | nginx req/s | provender req/s | ratio | nginx p50 / p99 ms "
                   "| provender p50 / p99 ms | p99 ratio | CPU µs/req nginx / provender | errors | target |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for d in docs:
            conns = sorted({int(k.split(".")[2][1:]) for k in r if k.startswith(f"meta.{d}.")})
            for c in conns:
                k = f"meta.{d}.c{c}"
                nr, pr = get(f"{k}.nginx.rps"), get(f"{k}.provender.rps")
                n50, n99 = get(f"{k}.nginx.p50"), get(f"{k}.nginx.p99")
                p50, p99 = get(f"{k}.provender.p50"), get(f"{k}.provender.p99")
                errs = int((get(f"{k}.nginx.errors") or 0) + (get(f"{k}.provender.errors") or 0))
                rps_ok = None not in (nr, pr) and pr >= nr
                p99_ok = None not in (n99, p99) and p99 <= n99
                met = rps_ok and p99_ok
                verdict = "met" if met else "missed (" + ", ".join(
                    w for w, ok in (("req/s", rps_ok), ("p99", p99_ok)) if not ok) + ")"
                verdicts.append((f"warm {name_of(d)}, {c} conns: req/s >= nginx, p99 <= nginx",
                                 met, verdict))
                name = name_of(d)
                out.append(
                    f"| {name} | {c} | {fmt(nr, '.0f')} | {fmt(pr, '.0f')} | "
                    f"{fmt(ratio(pr, nr), '.2f')} | {fmt(n50, '.2f')} / {fmt(n99, '.2f')} | "
                    f"{fmt(p50, '.2f')} / {fmt(p99, '.2f')} | {fmt(ratio(p99, n99), '.2f')} | "
                    f"{fmt(get(f'{k}.nginx.cpu_us'), '.1f')} / {fmt(get(f'{k}.provender.cpu_us'), '.1f')} | "
                    f"{errs} | {verdict} |"
                )
        out.append(f"\nMedian of {n_of(f'meta.{docs[0]}.c{conns[0]}.nginx.rps')} rounds; "
                   "ratio = provender / nginx. CPU µs/req: user + system CPU time of the "
                   "server's processes during the run, divided by the requests served (less "
                   "sensitive to other load than req/s).")
        sizes = []
        for doc, name in (("small.2.3.0.json", "`2.3.0.json`"), ("small.index.json", "`index.json`")):
            n, p = get(f"doc.{doc}.nginx.bytes"), get(f"doc.{doc}.provender.bytes")
            if n is not None and p is not None:
                sizes.append(f"{name} {n:.0f} B from nginx, {p:.0f} B from provender")
        if sizes:
            out.append("Response bodies: " + "; ".join(sizes) + ".")
        out.append("")

    # Warm archives.
    streams = sorted({int(k.split(".")[1][1:]) for k in r if k.startswith("dl.s")})
    if streams:
        size = get("size.big.mib")
        out.append(f"### Warm archive download ({fmt(size, '.0f')} MiB archive, curl)\n")
        out.append("| streams | nginx MiB/s | provender MiB/s | ratio | CPU s/GiB nginx / provender | target (>= 0.90) |")
        out.append("|---|---|---|---|---|---|")
        for s in streams:
            n, p = get(f"dl.s{s}.nginx.mibps"), get(f"dl.s{s}.provender.mibps")
            q = ratio(p, n)
            met = q is not None and q >= 0.9
            verdicts.append((f"warm archive, {s} stream(s): within 10% of nginx", met))
            out.append(f"| {s} | {fmt(n, '.0f')} | {fmt(p, '.0f')} | {fmt(q, '.2f')} | "
                       f"{fmt(get(f'dl.s{s}.nginx.cpu_s'), '.2f')} / {fmt(get(f'dl.s{s}.provender.cpu_s'), '.2f')} | "
                       f"{'met' if met else 'missed'} |")
        out.append(f"\nAggregate throughput of all streams; median of "
                   f"{n_of(f'dl.s{streams[0]}.nginx.mibps')} runs. CPU s/GiB: CPU time of the "
                   "server's processes per GiB served.\n")

    # Cold miss.
    if get("cold.direct.total") is not None:
        out.append("### Cold miss of the large archive (curl, one client)\n")
        out.append("| origin | path | time to first byte s | total s | MiB/s | total vs direct |")
        out.append("|---|---|---|---|---|---|")
        for origin, suffix in (("loopback, unlimited", ""), ("limited to 50 MiB/s", "_limited")):
            for key, label in (("direct", "straight from the origin"),
                               ("provender", "through provender, metadata warm"),
                               ("provender_allcold", "through provender, nothing cached")):
                name = f"cold.{key}{suffix if key != 'provender_allcold' else ''}"
                if key == "provender_allcold" and suffix:
                    continue
                if get(f"{name}.total") is None:
                    continue
                q = ratio(get(f"{name}.total"), get(f"cold.direct{suffix}.total"))
                out.append(f"| {origin} | {label} | {fmt(get(f'{name}.ttfb'), '.4f')} | "
                           f"{fmt(get(f'{name}.total'), '.3f')} | {fmt(get(f'{name}.mibps'), '.0f')} | "
                           f"{fmt(q, '.2f')} |")
        out.append("")
        for origin, suffix in (("loopback origin", ""), ("50 MiB/s origin", "_limited")):
            q = ratio(get(f"cold.provender{suffix}.total"), get(f"cold.direct{suffix}.total"))
            if q is None:
                continue
            met = q <= 1.1
            verdicts.append((f"cold miss ({origin}): total time within 10% of a direct download", met))
            out.append(f"{origin}: total-time ratio provender / direct {q:.2f} (target <= 1.10: "
                       f"{'met' if met else 'missed'}).  ")
        out.append(f"Median of {n_of('cold.direct.total')} runs (nothing cached: 1 run).\n")

    # h1 hashing.
    if any(k.startswith("h1.") for k in r):
        size = get("size.big.content.mib") or get("size.big.mib")
        out.append("### h1 hashing\n")
        out.append("| what | time s | MiB/s of uncompressed content |")
        out.append("|---|---|---|")
        for key, label in (
            ("h1.criterion.incompressible", "`h1_zip` in memory, incompressible (criterion)"),
            ("h1.criterion.compressible", "`h1_zip` in memory, compressible (criterion)"),
        ):
            if get(key) is not None:
                out.append(f"| {label} | - | {fmt(get(key), '.0f')} |")
        if get("h1.openssl_sha256") is not None:
            out.append(f"| floor: SHA-256 alone (`openssl speed -evp sha256`, 1 MiB blocks) | - | "
                       f"{fmt(get('h1.openssl_sha256'), '.0f')} |")
        for key, label in (
            ("h1.provender_fill", "provender cold fill: h1 step alone (`provender_h1_hash_duration_seconds`)"),
            ("h1.python", "reference: `bench/h1_reference.py` (CPython zipfile/zlib + OpenSSL SHA-256), same file"),
            ("h1.provender_seed", "`provender seed`, empty cache: discovery, metadata, signature, download, SHA-256, fsync, h1, commit"),
            ("h1.terraform_mirror", "`terraform providers mirror`: discovery, metadata, signature, download, SHA-256, unpack, h1"),
        ):
            t = get(f"{key}.s")
            if t is not None:
                out.append(f"| {label} | {fmt(t, '.3f')} | {fmt(size / t if size else None, '.0f')} |")
        q = ratio(get("h1.terraform_mirror.s"), get("h1.provender_seed.s"))
        q2 = ratio(get("h1.python.s"), get("h1.provender_fill.s"))
        out.append(f"\nThe large archive: {fmt(size, '.0f')} MiB of content. provender's h1 step is "
                   f"{fmt(q2, '.2f')}x as fast as the reference; end to end, `provender seed` takes "
                   f"{fmt(None if q is None else 1 / q, '.2f')}x the time of `terraform providers mirror`.\n")

    # Memory.
    if get("rss.idle") is not None:
        out.append("### Memory (provender VmRSS / VmHWM)\n")
        out.append("| state | KiB |")
        out.append("|---|---|")
        rows = [
            ("rss.idle", "idle, just started (VmRSS)"),
            ("rss.warm", "idle after the warm benchmarks (VmRSS)"),
            ("rss.dl.mid", f"peak, 100 concurrent downloads of the {fmt(get('size.mid.mib'), '.0f')} MiB archive (VmHWM)"),
            ("rss.dl.big", f"peak, 100 concurrent downloads of the {fmt(get('size.big.mib'), '.0f')} MiB archive (VmHWM)"),
            ("rss.cold.big", f"peak, 100 concurrent downloads of the {fmt(get('size.big.mib'), '.0f')} MiB archive sharing one cold fill (VmHWM, separate instance)"),
            ("rss.nginx.dl.big", f"nginx (all processes), 100 concurrent downloads of the {fmt(get('size.big.mib'), '.0f')} MiB archive (sum of VmHWM)"),
        ]
        for key, label in rows:
            if get(key) is not None:
                out.append(f"| {label} | {fmt(get(key), '.0f')} |")
        mid, big = get("rss.dl.mid"), get("rss.dl.big")
        if mid and big:
            grow = big - mid
            met = grow <= 0.1 * mid
            verdicts.append(("memory flat in archive size (peak within 10% for a 4x larger archive)", met))
            out.append(f"\nPeaks are medians of {n_of('rss.dl.big')} alternating runs. Growth from the "
                       f"{fmt(get('size.mid.mib'), '.0f')} MiB to the {fmt(get('size.big.mib'), '.0f')} MiB "
                       f"archive: {grow:+.0f} KiB, {100 * grow / mid:+.1f}% (target: within 10%: "
                       f"{'met' if met else 'missed'}).\n")
        for key, label in (("dl100.mid.mibps", "mid"), ("dl100.big.mibps", "big"),
                           ("dl100.cold.mibps", "big, cold")):
            if get(key) is not None:
                out.append(f"Aggregate throughput of the 100 downloads ({label}): {fmt(get(key), '.0f')} MiB/s.  ")
        out.append("")

    if verdicts:
        out.append("### Targets\n")
        out.append("| target | result |")
        out.append("|---|---|")
        for name, met, *text in verdicts:
            out.append(f"| {name} | {text[0] if text else ('met' if met else 'missed')} |")
    print("\n".join(out))


def storage(path):
    """bench/storage.sh: the s3 backend (Garage) against the disk backend; ratio = s3 / disk."""
    r, raw = load(path)
    out = []

    def get(name):
        return r.get(name)

    def fmt(v, spec):
        return "-" if v is None else format(v, spec)

    def ratio(a, b):
        return None if a is None or b in (None, 0) else a / b

    def n_of(name):
        return len(raw.get(name, []))

    size = get("size.big.mib")

    # Warm archives.
    streams = sorted({int(k.split(".")[1][1:]) for k in r if k.startswith("dl.s")})
    if streams:
        out.append(f"### Warm archive download ({fmt(size, '.0f')} MiB archive, curl)\n")
        out.append("| streams | disk MiB/s | object store MiB/s | ratio | object store + local tier MiB/s | ratio "
                   "| provender CPU s/GiB disk / object store "
                   "| Garage CPU s/GiB behind provender | Garage alone (pre-signed URL) MiB/s | Garage alone CPU s/GiB |")
        out.append("|---|---|---|---|---|---|---|---|---|---|")
        for s in streams:
            d, o, t = get(f"dl.s{s}.disk.mibps"), get(f"dl.s{s}.s3.mibps"), get(f"dl.s{s}.tier.mibps")
            out.append(f"| {s} | {fmt(d, '.0f')} | {fmt(o, '.0f')} | {fmt(ratio(o, d), '.2f')} | "
                       f"{fmt(t, '.0f')} | {fmt(ratio(t, d), '.2f')} | "
                       f"{fmt(get(f'dl.s{s}.disk.cpu_s'), '.2f')} / {fmt(get(f'dl.s{s}.s3.cpu_s'), '.2f')} | "
                       f"{fmt(get(f'dl.s{s}.s3.garage_s'), '.2f')} | {fmt(get(f'dl.s{s}.store.mibps'), '.0f')} | "
                       f"{fmt(get(f'dl.s{s}.store.garage_s'), '.2f')} |")
        d, o, g = get("warm.disk.ttfb"), get("warm.s3.ttfb"), get("warm.store.ttfb")
        t = get("warm.tier.ttfb")
        if d is not None and o is not None:
            out.append(f"| 1, time to first byte ms | {d * 1e3:.1f} | {o * 1e3:.1f} | {fmt(ratio(o, d), '.2f')} | "
                       f"{fmt(t and t * 1e3, '.1f')} | {fmt(ratio(t, d), '.2f')} | | | "
                       f"{fmt(g and g * 1e3, '.1f')} | |")
        out.append(f"\nAggregate throughput of all streams; median of {n_of(f'dl.s{streams[0]}.disk.mibps')} runs "
                   "(time to first byte: one download per run, new connection). ratio = object store / disk, and "
                   "object store with a local tier (`cache.local_max_size`, warm: served from its local copy) / disk. "
                   "CPU s/GiB: CPU time per GiB served, of provender and of Garage. \"Garage alone\": the same "
                   "object straight from Garage by the pre-signed URL of `cache.redirect_downloads` (plain HTTP, "
                   "no TLS, no provender).\n")

    # Warm metadata.
    docs = [d for d in ("version", "index") if any(k.startswith(f"meta.{d}.") for k in r)]
    if docs:
        out.append("### Warm metadata (wrk, HTTP/1.1 keep-alive over TLS 1.3)\n")
        out.append("| document | conns | disk req/s | object store req/s | ratio | disk p50 / p99 ms "
                   "| object store p50 / p99 ms | p99 ratio | provender CPU µs/req disk / object store "
                   "| Garage CPU µs/req | socket errors |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|")
        conns = []
        for d in docs:
            conns = sorted({int(k.split(".")[2][1:]) for k in r if k.startswith(f"meta.{d}.")})
            for c in conns:
                k = f"meta.{d}.c{c}"
                dr, orr = get(f"{k}.disk.rps"), get(f"{k}.s3.rps")
                d99, o99 = get(f"{k}.disk.p99"), get(f"{k}.s3.p99")
                errs = int(sum(raw.get(f"{k}.disk.errors", []) + raw.get(f"{k}.s3.errors", [])))
                name = "`:version.json`" if d == "version" else "`index.json`"
                out.append(
                    f"| {name} | {c} | {fmt(dr, '.0f')} | {fmt(orr, '.0f')} | {fmt(ratio(orr, dr), '.2f')} | "
                    f"{fmt(get(f'{k}.disk.p50'), '.2f')} / {fmt(d99, '.2f')} | "
                    f"{fmt(get(f'{k}.s3.p50'), '.2f')} / {fmt(o99, '.2f')} | {fmt(ratio(o99, d99), '.2f')} | "
                    f"{fmt(get(f'{k}.disk.cpu_us'), '.1f')} / {fmt(get(f'{k}.s3.cpu_us'), '.1f')} | "
                    f"{fmt(get(f'{k}.s3.garage_us'), '.2f')} | {errs} |")
        out.append(f"\nMedian of {n_of(f'meta.{docs[0]}.c{conns[0]}.disk.rps')} rounds; every answer was "
                   "2xx (the script stops on any other). Socket errors: all runs added up.\n")

    # Cold miss.
    if get("cold.direct.total") is not None:
        out.append(f"### Cold miss of the {fmt(size, '.0f')} MiB archive (curl, one client, loopback origin)\n")
        out.append("| path | time to first byte s | total s | MiB/s | total vs direct | stored (from request) s "
                   "| stored vs disk |")
        out.append("|---|---|---|---|---|---|---|")
        direct = get("cold.direct.total")
        for key, label in (("direct", "straight from the origin"),
                           ("disk", "through provender, disk backend"),
                           ("s3", "through provender, object store")):
            n = f"cold.{key}"
            if get(f"{n}.total") is None:
                continue
            out.append(f"| {label} | {fmt(get(f'{n}.ttfb'), '.4f')} | {fmt(get(f'{n}.total'), '.3f')} | "
                       f"{fmt(get(f'{n}.mibps'), '.0f')} | {fmt(ratio(get(f'{n}.total'), direct), '.2f')} | "
                       f"{fmt(get(f'{n}.commit'), '.3f')} | "
                       f"{fmt(ratio(get(f'{n}.commit'), get('cold.disk.commit')), '.2f')} |")
        out.append("")
        out.append("| after the client's last byte, until stored | disk | object store |")
        out.append("|---|---|---|")
        after = {}
        for key in ("disk", "s3"):
            n = f"cold.{key}"
            if raw.get(f"{n}.commit"):
                after[key] = statistics.median(c - t for c, t in zip(raw[f"{n}.commit"], raw[f"{n}.total"]))
        for label, values in (
                ("time s", (after.get("disk"), after.get("s3"))),
                ("of which the h1 step s (`provender_h1_hash_duration_seconds`)",
                 (get("cold.disk.h1"), get("cold.s3.h1"))),
                ("provender CPU s", (get("cold.disk.after_cpu"), get("cold.s3.after_cpu"))),
                ("Garage CPU s", (None, get("cold.s3.after_garage_cpu")))):
            out.append(f"| {label} | {fmt(values[0], '.3f')} | {fmt(values[1], '.3f')} |")
        out.append(f"\nMedian of {n_of('cold.direct.total')} runs, the order of the two backends alternating. "
                   "\"Stored\": from the archive request until provender has no fill in progress "
                   "(`provender_fills_in_flight` 0: downloaded, verified, fsynced, h1 computed, archive and "
                   "record written to the backend), polled every 10 ms.\n")

    # Fresh replica.
    if get("replica.first.total") is not None:
        out.append("### A fresh replica on the same bucket (new process, empty local directory, origin unreachable)\n")
        out.append("| request (new connection each) | disk, warm | object store, warm | fresh replica | replica / object store warm |")
        out.append("|---|---|---|---|---|")
        for key, label in (("index", "`big/index.json`, total ms"), ("version", "`big/1.0.0.json`, total ms")):
            d, o, p = (get(f"first.{key}.{s}") for s in ("disk", "s3", "replica"))
            out.append(f"| {label} | {fmt(d and d * 1e3, '.1f')} | {fmt(o and o * 1e3, '.1f')} | "
                       f"{fmt(p and p * 1e3, '.1f')} | {fmt(ratio(p, o), '.2f')} |")
        for key, label, scale, spec in (("ttfb", "archive, time to first byte ms", 1e3, ".1f"),
                                        ("total", "archive, total s", 1, ".3f"),
                                        ("mibps", "archive, MiB/s", 1, ".0f")):
            d, o = get(f"warm.disk.{key}"), get(f"warm.s3.{key}")
            p, p2 = get(f"replica.first.{key}"), get(f"replica.second.{key}")
            out.append(f"| {label} | {fmt(d and d * scale, spec)} | {fmt(o and o * scale, spec)} | "
                       f"{fmt(p and p * scale, spec)} (second: {fmt(p2 and p2 * scale, spec)}) | "
                       f"{fmt(ratio(p, o), '.2f')} |")
        out.append(f"\nMedian of {n_of('replica.first.total')} fresh replicas (warm columns: the warm "
                   "archive runs above). The replica's origin refuses connections, so each answer came "
                   "from the bucket.\n")

    # Memory.
    if get("rss.disk.idle") is not None:
        out.append("### Memory (VmRSS / VmHWM, KiB)\n")
        out.append("| state | disk | object store |")
        out.append("|---|---|---|")
        for key, label in (("idle", "provender idle, just started (VmRSS)"),
                           ("warm", "provender idle after the warm benchmarks (VmRSS)"),
                           ("dl", "provender peak, 100 concurrent downloads of the archive (VmHWM)")):
            out.append(f"| {label} | {fmt(get(f'rss.disk.{key}'), '.0f')} | {fmt(get(f'rss.s3.{key}'), '.0f')} |")
        if get("rss.replica") is not None:
            out.append(f"| fresh replica after serving the documents and the archive twice (VmRSS) | - | "
                       f"{fmt(get('rss.replica'), '.0f')} |")
        if get("rss.garage") is not None:
            out.append(f"| Garage, peak over the run (VmHWM) | - | {fmt(get('rss.garage'), '.0f')} |")
        out.append("")
        d, o = get("dl100.disk.mibps"), get("dl100.s3.mibps")
        if d is not None and o is not None:
            out.append(f"Aggregate throughput of the 100 downloads: disk {d:.0f} MiB/s, object store "
                       f"{o:.0f} MiB/s ({fmt(ratio(o, d), '.2f')}x).  ")
        if get("garage.data.mib") is not None:
            out.append(f"Garage's data directory after warming: {fmt(get('garage.data.mib'), '.0f')} MiB.")
        out.append("")
    print("\n".join(out))


def streams(path):
    r, raw = load(path)
    out = ["| downloads | nginx MiB/s | provender MiB/s | ratio | CPU s/GiB nginx / provender | runs |",
           "|---|---|---|---|---|---|"]
    labels = {("h1", 1): "1, HTTP/1.1", ("h1", 4): "4, HTTP/1.1, one connection each",
              ("h2", 1): "1, HTTP/2", ("h2", 4): "4, HTTP/2, one connection each",
              ("mux", 4): "4, multiplexed on one HTTP/2 connection"}
    for (proto, n), label in labels.items():
        key = f"streams.{proto}.{n}"
        ng, pv = r.get(f"{key}.nginx.mibps"), r.get(f"{key}.provender.mibps")
        if ng is None or pv is None:
            continue
        cn, cp = r.get(f"{key}.nginx.cpu_s"), r.get(f"{key}.provender.cpu_s")
        runs = len(raw[f"{key}.provender.mibps"])
        out.append(f"| {label} | {ng:.0f} | {pv:.0f} | {pv / ng:.2f} | {cn:.2f} / {cp:.2f} | {runs} |")
    out.append("")
    out.append("Aggregate throughput of all downloads, median of the runs; ratio = provender / nginx. "
               "CPU s/GiB: CPU time of the server's processes per GiB served.")
    print("\n".join(out))


def compare(path):
    r, raw = load(path)

    def cell(v, spec):
        return "-" if v is None else format(v, spec)

    def ratio(a, b):
        return None if a is None or not b else a / b

    out = ["### Warm metadata: CPU µs per request (wrk, HTTP/1.1 keep-alive over TLS 1.3)", "",
           "| document | conns | nginx | before | after | before / nginx | after / nginx | goal | req/s nginx / before / after |",
           "|---|---|---|---|---|---|---|---|---|"]
    for doc, name in (("version", "`<version>.json`"), ("index", "`index.json`")):
        for c in (64, 256):
            k = f"meta.{doc}.c{c}"
            n, b, a = (r.get(f"{k}.{s}.cpu_us") for s in ("nginx", "before", "after"))
            if n is None:
                continue
            rps = " / ".join(cell(r.get(f"{k}.{s}.rps"), ".0f") for s in ("nginx", "before", "after"))
            out.append(f"| {name} | {c} | {cell(n, '.1f')} | {cell(b, '.1f')} | {cell(a, '.1f')} "
                       f"| {cell(ratio(b, n), '.2f')} | {cell(ratio(a, n), '.2f')} | ≤ 0.80 | {rps} |")
    out += ["", "### Warm archive: aggregate MiB/s (CPU s/GiB)", "",
            "| downloads | nginx | before | after | before / nginx | after / nginx | goal |",
            "|---|---|---|---|---|---|---|"]
    labels = {"h1": "4 on 4 HTTP/1.1 connections", "h2": "4 on 4 HTTP/2 connections",
              "mux": "4 streams on one HTTP/2 connection"}
    for fig, label in labels.items():
        k = f"archive.{fig}"
        m = {s: r.get(f"{k}.{s}.mibps") for s in ("nginx", "before", "after")}
        c = {s: r.get(f"{k}.{s}.cpu_s") for s in ("nginx", "before", "after")}
        if m["nginx"] is None:
            continue
        cells = " | ".join(f"{cell(m[s], '.0f')} ({cell(c[s], '.2f')})" for s in ("nginx", "before", "after"))
        out.append(f"| {label} | {cells} | {cell(ratio(m['before'], m['nginx']), '.2f')} "
                   f"| {cell(ratio(m['after'], m['nginx']), '.2f')} | ≥ 1.00 |")
    d_total, d_ttfb = r.get("cold.direct.total"), r.get("cold.direct.ttfb")
    if d_total is not None:
        out += ["", "### Cold miss: the archive through an empty cache against a direct download", "",
                "| | total s | first byte s | total / direct (goal ≤ 1.5) | first byte / direct (goal ≤ 2) "
                "| provender CPU s (with the h1 pass) |",
                "|---|---|---|---|---|---|",
                f"| direct from the origin | {d_total:.3f} | {d_ttfb:.4f} | 1.00 | 1.00 | - |"]
        for s in ("before", "after"):
            t, f, cpu = r.get(f"cold.{s}.total"), r.get(f"cold.{s}.ttfb"), r.get(f"cold.{s}.cpu_s")
            out.append(f"| {s} | {cell(t, '.3f')} | {cell(f, '.4f')} | {cell(ratio(t, d_total), '.2f')} "
                       f"| {cell(ratio(f, d_ttfb), '.2f')} | {cell(cpu, '.2f')} |")
    runs = len(raw.get("meta.version.c64.after.cpu_us", []))
    out += ["", f"Medians of the runs ({runs} round(s) of wrk). Ratios are to nginx serving "
            "`terraform providers mirror` output (metadata, archive) or to a direct download "
            "from the same origin (cold miss). CPU: user + system time of the server's processes."]
    print("\n".join(out))


if __name__ == "__main__":
    modes = {"wrk": wrk, "table": table, "storage": storage, "streams": streams, "compare": compare}
    if len(sys.argv) != 3 or sys.argv[1] not in modes:
        sys.exit(__doc__)
    modes[sys.argv[1]](sys.argv[2])
