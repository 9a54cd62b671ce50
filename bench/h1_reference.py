#!/usr/bin/env python3
"""A reference implementation of Terraform's `h1:` package hash, for comparison.

  h1_reference.py ZIP  ->  "<h1:...> <seconds> <uncompressed bytes>"

The same computation as Go's `dirhash.Hash1` over a zip's entries (Terraform's `HashZip`):
SHA-256 of every entry's uncompressed content, lines "<hex>  <name>\\n" sorted by name, then
"h1:" + base64(SHA-256 of those lines). Inflate is CPython's zlib and SHA-256 is OpenSSL's
(hashlib), both C, so this is a fair yardstick for the hashing work itself. Seconds cover
reading and hashing, not interpreter start-up.
"""

import base64
import hashlib
import sys
import time
import zipfile

CHUNK = 1 << 20


def h1(path):
    lines = []
    total = 0
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            h = hashlib.sha256()
            with z.open(info) as f:
                for block in iter(lambda: f.read(CHUNK), b""):
                    h.update(block)
                    total += len(block)
            lines.append((info.filename, h.hexdigest()))
    lines.sort()
    summary = hashlib.sha256("".join(f"{d}  {n}\n" for n, d in lines).encode()).digest()
    return "h1:" + base64.b64encode(summary).decode(), total


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    start = time.perf_counter()
    digest, total = h1(sys.argv[1])
    print(f"{digest} {time.perf_counter() - start:.4f} {total}")
