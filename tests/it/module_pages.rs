//! Modules people can read: a module version's page in a real browser (its README rendered
//! and made safe, inputs, outputs, resources, required providers linked to the cache, module
//! calls, submodules and examples, the copy-ready `module` block, the version selector), a
//! package that cannot all be parsed, a module in a package's subdirectory, search by a word of
//! a README or an input's name, the JSON API, and the documentation kept beside the package.
//! Published modules and modules imported at a sealed site are covered in `publishing.rs` and
//! `modules.rs`.

use http::StatusCode;
use serde_json::Value;

use crate::pages::{check_page, clipboard_becomes, rows, snippet};
use crate::support::browser::Browser;
use crate::support::http::get;
use crate::support::https_client;
use crate::support::origin::{FakeOrigin, ModuleSource, ModuleSpec, ProviderSpec};
use crate::support::pki::TestCa;
use crate::support::provender::{REGISTRY, TestMirror};

/// A README with what real ones hold: a table, code, relative links to a submodule, an
/// example and a file, pictures from elsewhere and from the package, and things that must
/// never run or load.
const README: &str = r#"# VPC

Builds a **virtual network** with quokkaword subnets across zones.

| Setting | Meaning |
|---------|---------|
| `name`  | the network's name |

```hcl
module "vpc" {
  source = "acme/vpc/test"
}
```

See [the subnets submodule](modules/subnets), [the simple example](./examples/simple/README.md),
[the licence](LICENSE) and [the docs](https://docs.example.com/vpc).

![architecture](https://images.example.com/arch.png) ![local diagram](docs/diagram.png)

<script>window.pwned = "script";</script>
<img src="https://images.example.com/x.png" onerror="window.pwned = 'img'">
<a href="javascript:window.pwned='link'">click</a>
<iframe src="https://frames.example.com/"></iframe>
"#;

const VARIABLES: &str = r#"
variable "name" {
  type        = string
  description = "The network's name, shown in the console."
}

variable "cidr" {
  type        = string
  default     = "10.0.0.0/16"
  description = "The address range."
}

variable "secret_tag" {
  type      = string
  default   = "x"
  sensitive = true
}
"#;

const MAIN: &str = r#"
terraform {
  required_version = ">= 1.5"
  required_providers {
    foo = {
      source  = "acme/foo"
      version = ">= 1.0"
    }
    absent = {
      source = "acme/absent"
    }
  }
}

resource "foo_network" "this" {
  name = var.name
}

data "foo_zones" "all" {}

module "subnets" {
  source = "./modules/subnets"
}

output "network_id" {
  value       = foo_network.this.id
  description = "The network's ID."
}
"#;

fn vpc() -> ModuleSpec {
    ModuleSpec::new("acme", "vpc", "test", &["1.0.0", "1.1.0"])
        .with_file("README.md", README)
        .with_file("main.tf", MAIN)
        .with_file("variables.tf", VARIABLES)
        .with_file("LICENSE", "MIT")
        .with_file(
            "modules/subnets/main.tf",
            "variable \"subnet_cidrs\" {\n  type        = list(string)\n  description = \"One per zone.\"\n}\n",
        )
        .with_file(
            "examples/simple/main.tf",
            "module \"vpc\" {\n  source = \"../..\"\n  name   = \"demo\"\n}\n",
        )
        .with_file("examples/simple/README.md", "The smallest use.")
}

async fn download(client: &reqwest::Client, mirror: &TestMirror, module: &str, version: &str) {
    let url = mirror.url(&format!(
        "v1/modules/{REGISTRY}/{module}/{version}/download"
    ));
    let answer = get(client, &url).await;
    assert_eq!(
        answer.status,
        StatusCode::OK,
        "{module} {version}: {}",
        answer.text()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_module_version_page_shows_its_documentation_and_nothing_runs_or_loads() {
    let ca = TestCa::new();
    let origin = FakeOrigin::start_with_modules(
        &ca,
        &[REGISTRY],
        vec![ProviderSpec::new(
            "acme",
            "foo",
            &["1.0.0"],
            &[("linux", "amd64")],
        )],
        vec![
            vpc(),
            ModuleSpec::new("acme", "broken", "test", &["0.1.0"])
                .with_file("broken.tf", "variable \"half\" {\n  type = \n")
                .with_file(
                    "main.tf",
                    "variable \"whole\" {\n  description = \"Still shown.\"\n}\n",
                ),
            ModuleSpec::new("acme", "netsub", "test", &["2.0.0"])
                .source(ModuleSource::Subdir("net".into())),
        ],
    )
    .await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    for (module, version) in [
        ("acme/vpc/test", "1.0.0"),
        ("acme/vpc/test", "1.1.0"),
        ("acme/broken/test", "0.1.0"),
        ("acme/netsub/test", "2.0.0"),
    ] {
        download(&client, &mirror, module, version).await;
    }
    // The provider the module needs, cached: the page links to it.
    let foo = format!("{REGISTRY}/acme/foo/terraform-provider-foo_1.0.0_linux_amd64.zip");
    assert_eq!(get(&client, &mirror.url(&foo)).await.status, 200);

    // The JSON API first: the same data the page shows.
    let address = format!("{REGISTRY}/acme/vpc/test");
    let version_api = mirror.url(&format!("-/api/v1/modules/{address}/1.1.0"));
    // The archive's record is committed as its last bytes go out, and the catalogue's view
    // follows the store within moments.
    let view: Value = crate::support::poll(std::time::Duration::from_secs(15), async || {
        let api = get(&client, &version_api).await;
        assert_eq!(api.status, StatusCode::OK, "{}", api.text());
        let view: Value = api.json();
        let cached = view["providers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["cached"] == true);
        cached.then_some(view)
    })
    .await
    .expect("the cached provider is known to the module's page");
    let root = &view["docs"]["root"];
    let inputs: Vec<(&str, bool)> = root["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["name"].as_str().unwrap(),
                i["required"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        inputs,
        [("name", true), ("cidr", false), ("secret_tag", false)]
    );
    assert_eq!(
        root["inputs"][0]["description"],
        "The network's name, shown in the console."
    );
    assert_eq!(root["inputs"][2]["sensitive"], true);
    assert_eq!(root["outputs"][0]["name"], "network_id");
    assert_eq!(root["resources"][0]["type"], "foo_network");
    assert_eq!(root["data_sources"][0]["type"], "foo_zones");
    assert_eq!(root["module_calls"][0]["source"], "./modules/subnets");
    assert_eq!(root["required_version"], ">= 1.5");
    assert_eq!(view["docs"]["submodules"][0]["path"], "modules/subnets");
    assert_eq!(view["docs"]["examples"][0]["path"], "examples/simple");
    let providers: Vec<(&str, bool)> = view["providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["source"].as_str().unwrap(),
                p["cached"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        providers,
        [
            (format!("{REGISTRY}/acme/absent").as_str(), false),
            (format!("{REGISTRY}/acme/foo").as_str(), true),
        ]
    );
    assert_eq!(view["versions"], serde_json::json!(["1.1.0", "1.0.0"]));
    let block =
        format!("module \"vpc\" {{\n  source  = \"{address}\"\n  version = \"1.1.0\"\n}}\n");
    assert_eq!(view["module_block"], block.as_str());
    // Kept beside the package, for every replica and the next start.
    let stored = mirror
        .cache_dir
        .join(format!("modules/{address}/1.1.0/docs.json"));
    let kept: Value = serde_json::from_slice(&std::fs::read(&stored).unwrap()).unwrap();
    assert_eq!(kept["docs"]["root"]["inputs"][0]["name"], "name");

    // The page, in the browser.
    let browser = Browser::start().await;
    browser
        .goto(&mirror.url(&format!("-/modules/{address}")))
        .await;
    browser.allow_clipboard().await;
    let heading = browser.text("h1").await;
    assert_eq!(heading, format!("{address} 1.1.0"), "the newest version");
    let readme = browser.find(".readme").await.html(true).await.unwrap();
    assert!(
        readme.contains("<strong>virtual network</strong>"),
        "{readme}"
    );
    assert!(
        readme.contains("<table>") && readme.contains("<pre><code>"),
        "{readme}"
    );
    assert!(
        readme.contains("[image: architecture]") && readme.contains("[image: local diagram]"),
        "{readme}"
    );
    for absent in [
        "<script",
        "<img",
        "<iframe",
        "javascript:",
        "images.example.com",
        "LICENSE\"",
    ] {
        assert!(!readme.contains(absent), "{absent} in {readme}");
    }
    let pwned = browser
        .run("return window.pwned === undefined;", vec![])
        .await;
    assert_eq!(pwned, Value::Bool(true), "something in the README ran");
    // Relative links lead to the sections of the page; links to the web stay.
    let hrefs = browser
        .run(
            "return Array.from(document.querySelectorAll('.readme a')).map(a => a.getAttribute('href'));",
            vec![],
        )
        .await;
    assert_eq!(
        hrefs,
        serde_json::json!([
            "#module-modules-subnets",
            "#module-examples-simple",
            null,
            "https://docs.example.com/vpc",
            null
        ])
    );
    for id in ["module-modules-subnets", "module-examples-simple"] {
        assert!(
            !browser.find_all(&format!("section#{id}")).await.is_empty(),
            "{id}"
        );
    }
    let mut inputs = Vec::new();
    for row in browser
        .find_all("table[aria-labelledby='module-root-inputs'] tbody tr")
        .await
    {
        inputs.push(row.text().await.unwrap());
    }
    assert!(
        inputs[0].starts_with("name")
            && inputs[0].contains("The network's name, shown in the console."),
        "{inputs:?}"
    );
    assert!(inputs[2].contains("sensitive"), "{inputs:?}");
    let providers = browser.text("#module-root").await;
    assert!(
        providers.contains("acme/absent (not in this cache)"),
        "{providers}"
    );
    let foo_link = browser
        .find(&format!(
            "#module-root a[href$='-/providers/{REGISTRY}/acme/foo']"
        ))
        .await;
    assert_eq!(
        foo_link.text().await.unwrap(),
        format!("{REGISTRY}/acme/foo")
    );
    let sub = browser.text("#module-modules-subnets").await;
    assert!(
        sub.contains("subnet_cidrs") && sub.contains("One per zone."),
        "{sub}"
    );
    let example = browser.text("#module-examples-simple").await;
    assert!(example.contains("The smallest use."), "{example}");
    // The module block, copied as shown.
    assert_eq!(snippet(&browser, "module-block").await, block);
    browser
        .find("button[data-copy='module-block']")
        .await
        .click()
        .await
        .unwrap();
    clipboard_becomes(&browser, &block).await;
    check_page(&browser, &mirror, "module-version").await;
    browser
        .run(
            "document.getElementById('module-root').scrollIntoView();",
            vec![],
        )
        .await;
    browser.screenshot("module-readme").await;
    // The version selector.
    browser.select("#version", "1.0.0").await;
    browser
        .click_to_page(".version-select button[type='submit']")
        .await;
    assert_eq!(browser.text("h1").await, format!("{address} 1.0.0"));
    let url = browser.run("return location.pathname;", vec![]).await;
    assert!(
        url.as_str()
            .unwrap()
            .ends_with(&format!("-/modules/{address}/1.0.0")),
        "{url}"
    );

    // A package with a file that does not parse: what could be read, and what could not.
    browser
        .goto(&mirror.url(&format!("-/modules/{REGISTRY}/acme/broken/test/0.1.0")))
        .await;
    let text = browser.text("#module-root").await;
    assert!(text.contains("broken.tf: not valid HCL"), "{text}");
    assert!(
        text.contains("whole") && text.contains("Still shown."),
        "{text}"
    );
    check_page(&browser, &mirror, "module-broken").await;
    // A module in a subdirectory of its package: that directory only.
    let net = get(
        &client,
        &mirror.url(&format!(
            "-/api/v1/modules/{REGISTRY}/acme/netsub/test/2.0.0"
        )),
    )
    .await
    .json();
    assert_eq!(net["docs"]["root"]["inputs"][0]["name"], "greeting");
    assert_eq!(
        net["docs"]["root"]["readme"],
        Value::Null,
        "the package's README is not the module's"
    );

    // Search: a word of a README, an input of a submodule, filters, and across kinds.
    browser.goto(&mirror.url("-/modules?q=quokkaword")).await;
    let found = rows(&browser).await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with(&address), "{found:?}");
    assert!(
        found[0].contains("Builds a virtual network"),
        "the summary: {found:?}"
    );
    check_page(&browser, &mirror, "modules-search").await;
    let by_input = get(&client, &mirror.url("-/api/v1/modules?q=subnet_cidrs"))
        .await
        .json();
    let names: Vec<&str> = by_input["summaries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["address"].as_str().unwrap())
        .collect();
    assert_eq!(names, [address.as_str()]);
    let filtered = get(
        &client,
        &mirror.url("-/api/v1/modules?q=quokkaword&source=git"),
    )
    .await
    .json();
    assert_eq!(filtered["summaries"].as_array().unwrap().len(), 0);
    browser
        .goto(&mirror.url("-/modules?q=nothing-has-this-word"))
        .await;
    assert!(browser.text("main").await.contains("No module matches."));
    browser.goto(&mirror.url("-/search?q=acme")).await;
    let results = browser.text("main").await;
    assert!(
        results.contains(&format!("{REGISTRY}/acme/foo"))
            && results.contains(&address)
            && results.contains(&format!("{REGISTRY}/acme/broken/test")),
        "{results}"
    );
    check_page(&browser, &mirror, "search").await;
    // The header's search box leads there too.
    browser.goto(&mirror.url("-/providers")).await;
    browser
        .find("header input[name='q']")
        .await
        .send_keys("quokkaword\u{E007}")
        .await
        .unwrap();
    crate::support::poll(std::time::Duration::from_secs(5), async || {
        let url = browser
            .run("return location.pathname + location.search;", vec![])
            .await;
        url.as_str()
            .unwrap()
            .ends_with("-/search?q=quokkaword")
            .then_some(())
    })
    .await
    .expect("the header's search box searches");
    assert!(browser.text("main").await.contains(&address));
    browser.close().await;

    // Unknown modules and versions are JSON 404s; bad addresses too.
    for path in [
        format!("-/api/v1/modules/{REGISTRY}/acme/vpc/test/9.9.9"),
        format!("-/api/v1/modules/{REGISTRY}/acme/nothing/test"),
        format!("-/api/v1/modules/{REGISTRY}/acme/vpc"),
    ] {
        let answer = get(&client, &mirror.url(&path)).await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{path}");
        assert!(answer.json()["error"]["message"].is_string(), "{path}");
    }
}
