//! What the version policy costs one decision (`provender::policy::Policy::decide`) with 1,000
//! rules: the address asked for matched by a few of them (the rules of one namespace and the
//! catch-alls) among 1,000 naming other providers, modules, releases and repositories; with a
//! cooldown; and, as the floor, with no rule for the kind (what a mirror without a policy pays).
//!
//! `cargo bench --bench policy`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use provender::address::Version;
use provender::policy::{Approvals, DefaultAction, Kind, Policy, PolicySettings, Rule, RuleConfig};

fn rules(n: usize) -> Vec<Arc<Rule>> {
    (0..n)
        .map(|i| {
            let text = match i % 4 {
                0 => format!(
                    "name = \"r{i}\"\nproviders = [\"registry.terraform.io/ns{i}/*\"]\nversions = \">= 1.{i}.0\"\naction = \"deny\"\n"
                ),
                1 => format!(
                    "name = \"r{i}\"\nmodules = [\"registry.terraform.io/ns{i}/*/aws\"]\naction = \"hold\"\n"
                ),
                2 => format!(
                    "name = \"r{i}\"\nproviders = [\"*/acme{i}/type{i}\"]\nversions = \"{i}.0.0\"\naction = \"warn\"\n"
                ),
                _ => format!(
                    "name = \"r{i}\"\ngit = [\"github.com/org{i}/*\"]\naction = \"deny\"\n"
                ),
            };
            let c: RuleConfig = toml::from_str(&text).unwrap();
            Rule::new(&c, format!("bench rule {i}")).unwrap()
        })
        .chain(
            [
                "name = \"hc\"\nproviders = [\"registry.terraform.io/hashicorp/*\"]\naction = \"allow\"\nmin_age = \"1d\"\n",
                "name = \"aws-bad\"\nproviders = [\"registry.terraform.io/hashicorp/aws\"]\nversions = \"3.6.1\"\naction = \"deny\"\n",
            ]
            .iter()
            .map(|t| Rule::new(&toml::from_str(t).unwrap(), "bench".into()).unwrap()),
        )
        .collect()
}

fn policy(rules: Vec<Arc<Rule>>, min_age: Duration) -> Policy {
    let settings = PolicySettings {
        min_age,
        default: DefaultAction::Allow,
        rules,
        ..PolicySettings::default()
    };
    Policy::new(
        &settings,
        Approvals::in_memory(),
        provender::clock::system(),
    )
    .unwrap()
}

fn bench(c: &mut Criterion) {
    let aws = "registry.terraform.io/hashicorp/aws";
    let v = Version::parse("5.80.0").unwrap();
    let seen = Some(provender::clock::now_secs() - 30 * 86_400);
    let many = policy(rules(1000), Duration::from_secs(7 * 86_400));
    c.bench_function("decide, 1000 rules, matched address", |b| {
        b.iter(|| black_box(many.decide(Kind::Provider, black_box(aws), black_box(&v), seen)))
    });
    c.bench_function("decide, 1000 rules, unmatched address", |b| {
        b.iter(|| {
            black_box(many.decide(
                Kind::Provider,
                black_box("registry.terraform.io/someone/else"),
                black_box(&v),
                seen,
            ))
        })
    });
    let none = policy(Vec::new(), Duration::ZERO);
    c.bench_function("decide, no policy", |b| {
        b.iter(|| black_box(none.decide(Kind::Provider, black_box(aws), black_box(&v), seen)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
