//! A real browser for the page tests: Debian's `chromium`, headless, driven through
//! `chromedriver` (WebDriver) with the `fantoccini` client. Each [`Browser`] runs its own
//! chromedriver on a free loopback port with a fresh profile, and offers what the page tests
//! check beyond clicking: the browser's console, the resources a page loaded, the clipboard,
//! and an axe-core accessibility run inside the page.
//!
//! The test servers' certificates come from a throw-away CA the browser does not know, so the
//! session accepts them (`acceptInsecureCerts`); the pages are still served over real TLS.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use super::within;

/// Where `.ci/test` installs axe-core (npm), unless `AXE_CORE_JS` names the file.
const AXE_DEFAULT: &str = "target/ci-tools/axe/node_modules/axe-core/axe.min.js";

/// A headless Chromium session with its own chromedriver.
pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a browser session sized like a laptop screen.
    pub async fn start() -> Browser {
        let port = free_port();
        let profile = tempfile::Builder::new()
            .prefix("provender-chromium-")
            .tempdir()
            .unwrap();
        // In a process group of its own, with the browser it starts, so that a failed test
        // leaves no browser behind (see `Drop`).
        let driver = Command::new(program("CHROMEDRIVER", "chromedriver"))
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver runs (.ci/test installs it)");
        let mut chrome = json!({
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
        });
        // chromedriver finds Debian's chromium by itself; `CHROMIUM` names another.
        if let Ok(binary) = std::env::var("CHROMIUM") {
            chrome["binary"] = binary.into();
        }
        let capabilities = json!({
            "acceptInsecureCerts": true,
            "goog:loggingPrefs": { "browser": "ALL" },
            "goog:chromeOptions": chrome,
        });
        let capabilities = match capabilities {
            Value::Object(map) => map,
            _ => unreachable!(),
        };
        let url = format!("http://127.0.0.1:{port}");
        let mut last = None;
        for _ in 0..100 {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(capabilities.clone())
                .connect(&url)
                .await
            {
                Ok(client) => {
                    return Browser {
                        client,
                        driver,
                        _profile: profile,
                    };
                }
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no WebDriver session from chromedriver: {last:?}");
    }

    /// Opens `url` and waits for the page to load.
    pub async fn goto(&self, url: &str) {
        within("loading a page", self.client.goto(url))
            .await
            .unwrap_or_else(|e| panic!("loading {url}: {e}"));
    }

    /// Clicks the first element `css` selects and waits for the page it leads to to load.
    pub async fn click_to_page(&self, css: &str) {
        self.run("window.__provender_old_page = true;", vec![])
            .await;
        self.find(css).await.click().await.unwrap();
        for _ in 0..200 {
            let loaded = self
                .client
                .execute(
                    "return window.__provender_old_page !== true && document.readyState === 'complete';",
                    vec![],
                )
                .await;
            if loaded.ok().and_then(|v| v.as_bool()) == Some(true) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("clicking {css} led to no new page");
    }

    /// Chooses `value` in the `<select>` `css` selects.
    pub async fn select(&self, css: &str, value: &str) {
        self.find(css)
            .await
            .select_by_value(value)
            .await
            .unwrap_or_else(|e| panic!("{css} has no option {value}: {e}"));
    }

    /// The text of the first element `css` selects.
    pub async fn text(&self, css: &str) -> String {
        self.find(css).await.text().await.unwrap()
    }

    pub async fn find(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no element {css}: {e}"))
    }

    pub async fn find_all(&self, css: &str) -> Vec<fantoccini::elements::Element> {
        self.client.find_all(Locator::Css(css)).await.unwrap()
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page.
    pub async fn run(&self, script: &str, args: Vec<Value>) -> Value {
        self.client
            .execute(script, args)
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Messages the page wrote to the console since the last call, at `level` or above
    /// (`SEVERE` for errors, CSP violations and failed loads).
    pub async fn console(&self, level: &str) -> Vec<String> {
        let logs = self
            .client
            .issue_cmd(SessionPost {
                path: "se/log",
                body: json!({ "type": "browser" }),
            })
            .await
            .unwrap();
        logs.as_array()
            .into_iter()
            .flatten()
            .filter(|entry| entry["level"] == level)
            .map(|entry| entry["message"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// Every URL the current page loaded (itself and its resources).
    pub async fn loaded_urls(&self) -> Vec<String> {
        let urls = self
            .run(
                "return [location.href].concat(performance.getEntriesByType('resource').map(e => e.name));",
                vec![],
            )
            .await;
        urls.as_array()
            .unwrap()
            .iter()
            .map(|u| u.as_str().unwrap().to_string())
            .collect()
    }

    /// Lets the current page's origin read the clipboard (so a test can check what a copy
    /// button put there).
    pub async fn allow_clipboard(&self) {
        for name in ["clipboard-read", "clipboard-write"] {
            self.client
                .issue_cmd(SessionPost {
                    path: "permissions",
                    body: json!({ "descriptor": { "name": name }, "state": "granted" }),
                })
                .await
                .unwrap_or_else(|e| panic!("granting {name}: {e}"));
        }
    }

    /// The clipboard's text, as the page may read it.
    pub async fn clipboard(&self) -> String {
        let text = self
            .client
            .execute_async(
                "const done = arguments[arguments.length - 1];\
                 navigator.clipboard.readText().then(done, e => done('ERROR: ' + e));",
                vec![],
            )
            .await
            .unwrap();
        text.as_str().unwrap_or_default().to_string()
    }

    /// axe-core's violations on the current page at `serious` or `critical` impact, as
    /// `rule: nodes` lines.
    pub async fn serious_accessibility_violations(&self) -> Vec<String> {
        let source = std::fs::read_to_string(axe_path()).unwrap_or_else(|e| {
            panic!(
                "axe-core is needed at {} (.ci/test installs it with npm, or set AXE_CORE_JS): {e}",
                axe_path().display()
            )
        });
        // Injected by WebDriver, which the page's CSP does not govern.
        self.run(&source, vec![]).await;
        let result = self
            .client
            .execute_async(
                "const done = arguments[arguments.length - 1];\
                 axe.run(document, { resultTypes: ['violations'] })\
                   .then(r => done(r.violations), e => done([{ id: 'axe failed: ' + e, impact: 'critical', nodes: [] }]));",
                vec![],
            )
            .await
            .unwrap();
        result
            .as_array()
            .unwrap()
            .iter()
            .filter(|v| matches!(v["impact"].as_str(), Some("serious" | "critical")))
            .map(|v| {
                let nodes: Vec<String> = v["nodes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|n| n["html"].as_str().unwrap_or_default().to_string())
                    .collect();
                format!("{}: {}", v["id"], nodes.join(" | "))
            })
            .collect()
    }

    /// Saves a screenshot as `<name>.png` in the directory `PROVENDER_SCREENSHOTS` names, if
    /// it names one (the README's pictures are taken this way).
    pub async fn screenshot(&self, name: &str) {
        let Some(dir) = std::env::var_os("PROVENDER_SCREENSHOTS") else {
            return;
        };
        let png = self.client.screenshot().await.unwrap();
        let path = PathBuf::from(dir).join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }

    /// Ends the session (the browser quits), then chromedriver (on drop).
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The whole group: chromedriver and the browser it started. (Its group ID is its PID,
        // never 0 or 1, which would name other groups.)
        let group = self.driver.id() as libc::pid_t;
        if group > 1 {
            // SAFETY: kill(2) with a negative PID signals that process group and nothing else.
            unsafe { libc::kill(-group, libc::SIGKILL) };
        }
        let _ = self.driver.wait();
    }
}

fn program(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_string())
}

fn axe_path() -> PathBuf {
    match std::env::var_os("AXE_CORE_JS") {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(AXE_DEFAULT),
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `POST` to `session/<id>/<path>`: chromedriver's log endpoint (`se/log`, not in the W3C
/// protocol) and the W3C Permissions extension (`permissions`).
#[derive(Debug)]
struct SessionPost {
    path: &'static str,
    body: Value,
}

impl WebDriverCompatibleCommand for SessionPost {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/{}",
            session_id.unwrap_or_default(),
            self.path
        ))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(self.body.to_string()))
    }
}
