#!/usr/bin/env python3
"""Builds a static origin registry for the benchmarks.

Writes, under OUT, exactly what an origin provider registry serves (remote service discovery
and the provider registry protocol), as plain files a static web server can serve:

  .well-known/terraform.json                               {"providers.v1": "/v1/providers/"}
  v1/providers/bench/<type>/versions                        version list (JSON, no extension)
  v1/providers/bench/<type>/<ver>/download/<os>/<arch>      download metadata (JSON, no extension)
  files/bench/<type>/<ver>/terraform-provider-<type>_<ver>_<os>_<arch>.zip
  files/bench/<type>/<ver>/terraform-provider-<type>_<ver>_SHA256SUMS
  files/bench/<type>/<ver>/terraform-provider-<type>_<ver>_SHA256SUMS.sig   (binary, detached)

Download metadata names its files with host-relative URLs ("/files/..."), so they resolve
against whichever name the client used to reach the origin. SHA256SUMS is signed with a
throw-away key generated with gpg in GNUPGHOME (which the caller creates and cleans up).

Providers:
  bench/small  several versions x 5 platforms, small archives (metadata benchmarks)
  bench/mid    1.0.0 linux_amd64, --mid-mib MiB of incompressible payload
  bench/big    1.0.0 linux_amd64, --big-mib MiB of incompressible payload
  bench/wide   1.0.0 on 12 platforms, --wide-mib MiB each (only with --wide-mib)
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import zipfile

NAMESPACE = "bench"
PROTOCOLS = ["5.0"]
SMALL_VERSIONS = ["1.0.0", "1.1.0", "1.2.0", "1.3.0", "2.0.0", "2.1.0", "2.2.0", "2.3.0"]
SMALL_PLATFORMS = [
    ("darwin", "amd64"),
    ("darwin", "arm64"),
    ("linux", "amd64"),
    ("linux", "arm64"),
    ("windows", "amd64"),
]
LINUX = [("linux", "amd64")]
# As many platforms as a large provider (hashicorp/aws) offers.
WIDE_PLATFORMS = [
    ("darwin", "amd64"), ("darwin", "arm64"),
    ("freebsd", "386"), ("freebsd", "amd64"), ("freebsd", "arm"),
    ("linux", "386"), ("linux", "amd64"), ("linux", "arm"), ("linux", "arm64"),
    ("windows", "386"), ("windows", "amd64"), ("windows", "arm64"),
]
TIMESTAMP = (2024, 1, 2, 3, 4, 6)
CHUNK = 1 << 20


def gpg(home, *args, stdin=None):
    cmd = ["gpg", "--batch", "--yes", "--no-tty", "--pinentry-mode", "loopback",
           "--passphrase", ""] + list(args)
    out = subprocess.run(cmd, env=dict(os.environ, GNUPGHOME=home), input=stdin,
                         capture_output=True)
    if out.returncode != 0:
        sys.exit("gpg %s failed:\n%s" % (" ".join(args), out.stderr.decode(errors="replace")))
    return out.stdout


def signing_key(home):
    """Generates the key once; returns (long key id, fingerprint, armored public key)."""
    listing = gpg(home, "--with-colons", "--list-secret-keys").decode()
    if "sec:" not in listing:
        gpg(home, "--quick-gen-key", "provender bench <bench@provender.invalid>",
            "rsa2048", "sign", "never")
        listing = gpg(home, "--with-colons", "--list-secret-keys").decode()
    rows = [line.split(":") for line in listing.splitlines()]
    key_id = next(r[4] for r in rows if r[0] == "sec").upper()
    fpr = next(r[9] for r in rows if r[0] == "fpr")
    armor = gpg(home, "--armor", "--export", fpr).decode()
    return key_id, fpr, armor


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    mode = "w" if isinstance(data, str) else "wb"
    with open(path, mode) as f:
        f.write(data)


def build_zip(path, type_, version, os_, arch, payload_bytes):
    """The plugin executable entry plus, if asked, an incompressible payload.bin."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    script = (
        "#!/bin/sh\n"
        "# Benchmark fixture, not a real provider plugin.\n"
        f"echo 'terraform-provider-{type_} {version} ({os_}_{arch}) is a benchmark fixture' >&2\n"
        "exit 1\n"
    ).encode()
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        info = zipfile.ZipInfo(f"terraform-provider-{type_}_v{version}", TIMESTAMP)
        info.external_attr = (0o100755 << 16)
        info.create_system = 3
        info.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(info, script)
        if payload_bytes:
            info = zipfile.ZipInfo("payload.bin", TIMESTAMP)
            info.external_attr = (0o100644 << 16)
            info.create_system = 3
            info.compress_type = zipfile.ZIP_DEFLATED
            with z.open(info, "w", force_zip64=payload_bytes >= (1 << 31)) as f:
                left = payload_bytes
                while left:
                    n = min(CHUNK, left)
                    f.write(os.urandom(n))
                    left -= n
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def provider(out, home, key, type_, versions, platforms, payload_bytes):
    key_id, fpr, armor = key
    base = f"{out}/v1/providers/{NAMESPACE}/{type_}"
    listing = {
        "versions": [
            {
                "version": v,
                "protocols": PROTOCOLS,
                "platforms": [{"os": o, "arch": a} for o, a in platforms],
            }
            for v in versions
        ]
    }
    write(f"{base}/versions", json.dumps(listing))
    for v in versions:
        files = f"/files/{NAMESPACE}/{type_}/{v}"
        sums_name = f"terraform-provider-{type_}_{v}_SHA256SUMS"
        lines = []
        for o, a in platforms:
            name = f"terraform-provider-{type_}_{v}_{o}_{a}.zip"
            sha = build_zip(f"{out}{files}/{name}", type_, v, o, a, payload_bytes)
            lines.append((name, sha))
            meta = {
                "protocols": PROTOCOLS,
                "os": o,
                "arch": a,
                "filename": name,
                "download_url": f"{files}/{name}",
                "shasums_url": f"{files}/{sums_name}",
                "shasums_signature_url": f"{files}/{sums_name}.sig",
                "shasum": sha,
                "signing_keys": {
                    "gpg_public_keys": [
                        {
                            "key_id": key_id,
                            "ascii_armor": armor,
                            "trust_signature": "",
                            "source": "Benchmark",
                            "source_url": None,
                        }
                    ]
                },
            }
            write(f"{base}/{v}/download/{o}/{a}", json.dumps(meta))
        sums = "".join(f"{sha}  {name}\n" for name, sha in sorted(lines))
        sums_path = f"{out}{files}/{sums_name}"
        write(sums_path, sums)
        sig = gpg(home, "--local-user", fpr, "--digest-algo", "SHA256", "--detach-sign",
                  "--output", "-", sums_path)
        write(sums_path + ".sig", sig)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--gnupghome", required=True)
    p.add_argument("--big-mib", type=int, required=True)
    p.add_argument("--mid-mib", type=int, required=True)
    p.add_argument("--wide-mib", type=int, default=0)
    args = p.parse_args()
    key = signing_key(args.gnupghome)
    write(f"{args.out}/.well-known/terraform.json", json.dumps({"providers.v1": "/v1/providers/"}))
    provider(args.out, args.gnupghome, key, "small", SMALL_VERSIONS, SMALL_PLATFORMS, 16 << 10)
    provider(args.out, args.gnupghome, key, "mid", ["1.0.0"], LINUX, args.mid_mib << 20)
    provider(args.out, args.gnupghome, key, "big", ["1.0.0"], LINUX, args.big_mib << 20)
    if args.wide_mib:
        provider(args.out, args.gnupghome, key, "wide", ["1.0.0"], WIDE_PLATFORMS,
                 args.wide_mib << 20)


if __name__ == "__main__":
    main()
