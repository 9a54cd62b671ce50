#!/usr/bin/env python3
"""Steady background load for bench/pages.sh: requests at a fixed rate, as people and dashboards
make them, rather than as fast as possible.

  load.py CA RATE SECONDS URL...

Sends RATE requests per second in all (the URLs in turn, over keep-alive HTTPS connections, one
thread per URL), for SECONDS, and prints "<requests> <failures>". Any answer but 200 is a failure.
"""

import http.client
import ssl
import sys
import threading
import time
import urllib.parse


def worker(ctx, url, interval, until, counts, lock):
    u = urllib.parse.urlsplit(url)
    path = u.path + (f"?{u.query}" if u.query else "")
    conn = None
    next_at = time.monotonic()
    while time.monotonic() < until:
        ok = False
        try:
            if conn is None:
                conn = http.client.HTTPSConnection(u.hostname, u.port, context=ctx, timeout=30)
            conn.request("GET", path)
            resp = conn.getresponse()
            resp.read()
            ok = resp.status == 200
        except (OSError, http.client.HTTPException):
            conn = None
        with lock:
            counts[0] += 1
            counts[1] += 0 if ok else 1
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))


def main():
    ca, rate, seconds, urls = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
    ctx = ssl.create_default_context(cafile=ca)
    counts, lock = [0, 0], threading.Lock()
    until = time.monotonic() + seconds
    interval = len(urls) / rate
    threads = [
        threading.Thread(target=worker, args=(ctx, u, interval, until, counts, lock)) for u in urls
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(counts[0], counts[1])


if __name__ == "__main__":
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    main()
