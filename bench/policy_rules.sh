#!/usr/bin/env bash
# Writes a `[policy]` of N rules (default 1000) to stdout, for `AFTER_CONFIG` of
# bench/compare.sh: what a large organisation's rule set costs the request path. Two rules match
# the benchmark's providers (an allow with a cooldown, so every version's age is judged, and a
# deny of a version nobody asks for); the rest name other providers, modules, releases and
# repositories, and the global cooldown is on.
#
#   bench/policy_rules.sh 1000 > /tmp/policy.toml
#   AFTER_CONFIG=/tmp/policy.toml bench/compare.sh BEFORE target/release/provender
set -euo pipefail
n=${1:-1000}
printf '[policy]\nmin_age = "7d"\n\n'
printf '[[policy.rules]]\nname = "bench-allow"\nproviders = ["registry.terraform.io/bench/*"]\naction = "allow"\nmin_age = "1d"\n\n'
printf '[[policy.rules]]\nname = "bench-deny"\nproviders = ["registry.terraform.io/bench/small"]\nversions = "9.9.9"\naction = "deny"\nreason = "never asked for"\n\n'
for ((i = 2; i < n; i++)); do
    case $((i % 4)) in
        0) printf '[[policy.rules]]\nname = "r%d"\nproviders = ["registry.terraform.io/ns%d/*"]\nversions = ">= 1.%d.0"\naction = "deny"\n\n' "$i" "$i" "$i" ;;
        1) printf '[[policy.rules]]\nname = "r%d"\nmodules = ["registry.terraform.io/ns%d/*/aws"]\naction = "hold"\n\n' "$i" "$i" ;;
        2) printf '[[policy.rules]]\nname = "r%d"\nproviders = ["*/acme%d/type%d"]\nversions = "%d.0.0"\naction = "warn"\n\n' "$i" "$i" "$i" "$i" ;;
        3) printf '[[policy.rules]]\nname = "r%d"\ngit = ["github.com/org%d/*"]\naction = "deny"\n\n' "$i" "$i" ;;
    esac
done
