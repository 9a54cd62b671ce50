#!/usr/bin/env python3
"""Time to first render of pages in headless Chromium, through chromedriver's WebDriver API.

  first_render.py CA_FILE URL [URL...]

For each URL, loads it in a fresh tab 5 times and prints `URL median_fcp_ms median_load_ms`:
the first contentful paint and the load event, from the page's own Performance API (Chromium
trusts the CA through --ignore-certificate-errors-spki-list being absent: the session accepts
insecure certificates instead, the bench's CA is a throw-away one on loopback).
"""

import json
import socket
import statistics
import subprocess
import sys
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(port, method, path, body=None):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.load(resp)["value"]


def main():
    urls = sys.argv[2:]
    port = free_port()
    driver = subprocess.Popen(["chromedriver", f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                call(port, "GET", "/status")
                break
            except OSError:
                time.sleep(0.1)
        caps = {
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "acceptInsecureCerts": True,
                    "goog:chromeOptions": {
                        "binary": "/usr/bin/chromium",
                        "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"],
                    },
                }
            }
        }
        session = call(port, "POST", "/session", caps)["sessionId"]
        script = {
            "script": "const p = performance.getEntriesByName('first-contentful-paint')[0];"
            " const n = performance.getEntriesByType('navigation')[0];"
            " return [p ? p.startTime : -1, n ? n.loadEventEnd : -1, document.title];",
            "args": [],
        }
        for url in urls:
            fcp, load = [], []
            for _ in range(5):
                call(port, "POST", f"/session/{session}/url", {"url": "about:blank"})
                call(port, "POST", f"/session/{session}/url", {"url": url})
                for _ in range(50):
                    got = call(port, "POST", f"/session/{session}/execute/sync", script)
                    if got[0] >= 0 and got[1] > 0:
                        break
                    time.sleep(0.05)
                if "provender" not in got[2]:
                    sys.exit(f"{url}: the page is {got[2]!r}")
                fcp.append(got[0])
                load.append(got[1])
            print(f"{url} {statistics.median(fcp):.1f} {statistics.median(load):.1f}")
        call(port, "DELETE", f"/session/{session}")
    finally:
        driver.terminate()


if __name__ == "__main__":
    main()
