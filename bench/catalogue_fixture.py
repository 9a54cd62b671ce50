#!/usr/bin/env python3
"""A static mirror directory with many small provider versions, for bench/pages.sh.

  catalogue_fixture.py OUT HOST PROVIDERS VERSIONS

Writes PROVIDERS providers (namespace ns<i % 20>, type p<i>) with VERSIONS versions each, one
linux_amd64 zip per version, in the layout `terraform providers mirror` writes: index.json,
<version>.json listing the zip with its h1: and zh: hashes, and the zip. `provender import
--allow-unverified OUT` admits it.
"""

import hashlib
import io
import json
import os
import sys
import zipfile

sys.path.insert(0, os.path.dirname(__file__))
from h1_reference import h1  # noqa: E402


def main():
    out, host, providers, versions = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    for i in range(providers):
        ns, type_ = f"ns{i % 20}", f"p{i}"
        d = os.path.join(out, host, ns, type_)
        os.makedirs(d, exist_ok=True)
        listed = {}
        for v in range(versions):
            version = f"1.{v}.0"
            name = f"terraform-provider-{type_}_{version}_linux_amd64.zip"
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
                z.writestr(f"terraform-provider-{type_}_v{version}", f"{ns}/{type_} {version}\n" * 8)
            path = os.path.join(d, name)
            with open(path, "wb") as f:
                f.write(buf.getvalue())
            zh = "zh:" + hashlib.sha256(buf.getvalue()).hexdigest()
            doc = {"archives": {"linux_amd64": {"url": name, "hashes": [h1(path)[0], zh]}}}
            with open(os.path.join(d, f"{version}.json"), "w") as f:
                json.dump(doc, f, indent=2, sort_keys=True)
            listed[version] = {}
        with open(os.path.join(d, "index.json"), "w") as f:
            json.dump({"versions": listed}, f, indent=2, sort_keys=True)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main()
