#!/usr/bin/env python3
"""A disk cache holding many module versions, for bench/module_pages.sh.

  module_fixture.py CACHE_DIR HOST MODULES VERSIONS

Writes MODULES modules (namespace ns<i % 20>, name m<i>, system aws) with VERSIONS versions
each, straight into the disk store's layout: each version a deterministic .tar.gz package
(a README of about 3 KB with a table and code, variables.tf with 12 inputs, outputs.tf, main.tf
with resources and a submodule, and an example) beside its module.json record. Module m<i>'s
README holds the word `word<i>`, so a search for it finds exactly that module.
"""

import gzip
import hashlib
import io
import json
import os
import sys
import tarfile


def package(i, version):
    readme = [f"# Module m{i}\n\nBuilds things for team {i % 7} with word{i} inside.\n\n"]
    readme.append("| Input | Meaning |\n|---|---|\n")
    readme += [f"| `in{j}` | what input {j} of module {i} sets |\n" for j in range(12)]
    readme.append("\n```hcl\nmodule \"m\" {\n  source = \"ns/m/aws\"\n}\n```\n\n")
    readme.append("Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 30 + "\n")
    variables = "".join(
        f'variable "in{j}" {{\n  type        = string\n  default     = "v{j}"\n'
        f'  description = "Input {j} of module {i}, version {version}."\n}}\n\n'
        for j in range(12)
    )
    outputs = "".join(f'output "out{j}" {{\n  value = "{j}"\n  description = "Output {j}."\n}}\n\n' for j in range(6))
    main = (
        'terraform {\n  required_providers {\n    aws = {\n      source  = "hashicorp/aws"\n'
        '      version = ">= 5.0"\n    }\n  }\n}\n\n'
        + "".join(f'resource "aws_s3_bucket" "b{j}" {{\n  bucket = "b{j}"\n}}\n\n' for j in range(5))
        + 'module "sub" {\n  source = "./modules/sub"\n}\n'
    )
    files = {
        "README.md": "".join(readme),
        "main.tf": main,
        "variables.tf": variables,
        "outputs.tf": outputs,
        "modules/sub/main.tf": 'variable "x" {\n  description = "Sub input."\n}\n',
        "examples/basic/main.tf": 'module "m" {\n  source = "../.."\n}\n',
    }
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in sorted(files):
            data = files[name].encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def main():
    cache, host, modules, versions = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    for i in range(modules):
        for v in range(versions):
            version = f"1.{v}.0"
            d = os.path.join(cache, "modules", host, f"ns{i % 20}", f"m{i}", "aws", version)
            os.makedirs(d, exist_ok=True)
            body = package(i, version)
            with open(os.path.join(d, "module.tar.gz"), "wb") as f:
                f.write(body)
            record = {
                "source": {"kind": "archive", "url": f"https://{host}/m{i}/{version}.tar.gz"},
                "sha256": hashlib.sha256(body).hexdigest(),
                "size": len(body),
                "fetched_at": 1764000000,
                "trust": "origin",
            }
            with open(os.path.join(d, "module.json"), "w") as f:
                json.dump(record, f)


if __name__ == "__main__":
    main()
