//! The pages' templates (`templates/`, checked and compiled with the binary by askama, which
//! escapes every value it inserts into HTML) and the values they are rendered from: the
//! catalogue's views, plus what each page adds (the snippets, the filters, paging).

use std::borrow::Borrow;

use askama::Template;

use crate::catalogue::{
    LockBlock, ModuleList, ModuleQuery, ModuleSummary, ModuleVersionView, Provider, ProviderEntry,
    ProviderList, ProviderQuery, ProviderSummary, ReleaseCatalogue, Status, UsageList, UsageQuery,
    VersionEntry, VersionView,
};

/// What every page's frame needs.
pub struct Chrome {
    /// The base path, ending in `/`.
    pub base: String,
    pub title: String,
    /// Which navigation entry is current: `start`, `providers`, `modules`, `releases`, `usage`,
    /// `policy`, `status` or ``.
    pub section: &'static str,
    pub signed_in: bool,
    /// Whether people have tokens of their own here (`terraform login`): the "Your tokens" link.
    pub login: bool,
    pub version: &'static str,
}

/// A configuration snippet with a copy button.
pub struct Snippet {
    pub id: &'static str,
    pub title: &'static str,
    pub intro: String,
    pub text: String,
}

/// A time in Unix seconds, or none, however a template holds it.
trait MaybeSecs {
    fn secs(self) -> Option<u64>;
}

impl MaybeSecs for &Option<u64> {
    fn secs(self) -> Option<u64> {
        *self
    }
}

impl MaybeSecs for Option<&u64> {
    fn secs(self) -> Option<u64> {
        self.copied()
    }
}

impl MaybeSecs for Option<u64> {
    fn secs(self) -> Option<u64> {
        self
    }
}

/// Formatting shared by the templates (which hand values over by reference).
trait Formats {
    /// Bytes, in binary units.
    fn size(&self, bytes: impl Borrow<u64>) -> String {
        bytesize::ByteSize::b(*bytes.borrow())
            .display()
            .iec()
            .to_string()
    }

    fn size_opt(&self, bytes: &Option<u64>) -> String {
        bytes.map(|b| self.size(b)).unwrap_or_default()
    }

    /// Unix seconds as a UTC time to the minute; nothing for `None`.
    fn time(&self, secs: impl MaybeSecs) -> String {
        let Some(secs) = secs.secs() else {
            return String::new();
        };
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        let text = humantime::format_rfc3339_seconds(at).to_string();
        // 2026-11-26T17:18:05Z -> 2026-11-26 17:18 UTC
        format!("{} {} UTC", &text[..10], &text[11..16])
    }

    /// The first 12 characters of a commit.
    fn short(&self, commit: &str) -> String {
        commit.chars().take(12).collect()
    }

    fn cached_platforms(&self, version: &VersionEntry) -> String {
        let cached: Vec<&str> = version.cached().map(|p| p.platform.as_str()).collect();
        format!(
            "{} of {}: {}",
            cached.len(),
            version.platforms.len(),
            cached.join(", ")
        )
    }
}

#[derive(Template)]
#[template(path = "start.html")]
pub struct StartPage {
    pub chrome: Chrome,
    pub snippets: Vec<Snippet>,
    pub ca_url: Option<String>,
    pub providers: usize,
    pub versions: usize,
    pub modules: usize,
}

/// Which part of a long list a page shows.
pub struct Paging {
    /// From 1.
    pub page: usize,
    pub pages: usize,
}

#[derive(Template)]
#[template(path = "providers.html")]
pub struct ProvidersPage<'a> {
    pub chrome: Chrome,
    pub list: &'a ProviderList,
    pub shown: &'a [ProviderSummary],
    pub query: &'a ProviderQuery,
    pub paging: Paging,
}

impl ProvidersPage<'_> {
    /// The link to page `n` of the same query.
    fn page_link(&self, n: usize) -> String {
        let q = self.query;
        page_link(
            &format!("{}-/providers", self.chrome.base),
            &[
                ("q", &q.q),
                ("hostname", &q.hostname),
                ("namespace", &q.namespace),
                ("trust", &q.trust),
                ("platform", &q.platform),
            ],
            n,
        )
    }
}

/// `page` with the query's non-empty `pairs` and `page=n`.
fn page_link(page: &str, pairs: &[(&str, &String)], n: usize) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    for (key, value) in pairs {
        if !value.is_empty() {
            query.append_pair(key, value);
        }
    }
    query.append_pair("page", &n.to_string());
    format!("{page}?{}", query.finish())
}

#[derive(Template)]
#[template(path = "provider.html")]
pub struct ProviderPage<'a> {
    pub chrome: Chrome,
    pub provider: &'a ProviderEntry,
}

impl ProviderPage<'_> {
    pub fn of(chrome: Chrome, provider: &Provider) -> ProviderPage<'_> {
        ProviderPage {
            chrome,
            provider: &provider.provider,
        }
    }
}

#[derive(Template)]
#[template(path = "version.html")]
pub struct VersionPage<'a> {
    pub chrome: Chrome,
    pub view: &'a VersionView,
    /// The platforms ticked for the lock-file block.
    pub ticked: Vec<String>,
    pub lock: Option<LockBlock>,
}

impl VersionPage<'_> {
    fn ticked(&self, platform: &str) -> bool {
        self.ticked.iter().any(|p| p == platform)
    }
}

#[derive(Template)]
#[template(path = "modules.html")]
pub struct ModulesPage<'a> {
    pub chrome: Chrome,
    pub list: &'a ModuleList,
    pub shown: &'a [ModuleSummary],
    pub query: &'a ModuleQuery,
    pub paging: Paging,
}

impl ModulesPage<'_> {
    /// The link to page `n` of the same query.
    fn page_link(&self, n: usize) -> String {
        let q = self.query;
        page_link(
            &format!("{}-/modules", self.chrome.base),
            &[
                ("q", &q.q),
                ("hostname", &q.hostname),
                ("namespace", &q.namespace),
                ("trust", &q.trust),
                ("source", &q.source),
            ],
            n,
        )
    }
}

/// A module version's page: its documentation.
#[derive(Template)]
#[template(path = "module_version.html")]
pub struct ModuleVersionPage<'a> {
    pub chrome: Chrome,
    pub view: &'a ModuleVersionView,
}

impl ModuleVersionPage<'_> {
    /// The id of a module's section (`module-root`, `module-examples-simple`): what a README's
    /// relative link to it points at.
    fn anchor(&self, path: &str) -> String {
        crate::module_docs::readme::anchor(path)
    }

    /// A module's heading: `This module`, `Submodule vpc`, `Example simple`.
    fn title(&self, path: &str) -> String {
        match path.split_once('/') {
            Some(("modules", name)) => format!("Submodule {name}"),
            Some(("examples", name)) => format!("Example {name}"),
            _ => "This module".into(),
        }
    }
}

/// `-/search`: providers and modules a query finds.
#[derive(Template)]
#[template(path = "search.html")]
pub struct SearchPage<'a> {
    pub chrome: Chrome,
    pub q: &'a str,
    pub providers: &'a ProviderList,
    pub modules: &'a ModuleList,
    /// How many of each are shown.
    pub limit: usize,
}

impl SearchPage<'_> {
    fn shown_providers(&self) -> &[ProviderSummary] {
        &self.providers.providers[..self.providers.providers.len().min(self.limit)]
    }

    fn shown_modules(&self) -> &[ModuleSummary] {
        &self.modules.summaries[..self.modules.summaries.len().min(self.limit)]
    }
}

#[derive(Template)]
#[template(path = "usage.html")]
pub struct UsagePage<'a> {
    pub chrome: Chrome,
    pub list: &'a UsageList,
    pub query: &'a UsageQuery,
}

impl UsagePage<'_> {
    /// The periods to choose from: (days, label, selected).
    fn periods(&self) -> Vec<(u64, String, bool)> {
        crate::catalogue::PERIODS
            .iter()
            .map(|&d| {
                let label = if d == 0 {
                    "every day kept".to_string()
                } else {
                    format!("last {d} days")
                };
                (d, label, d == self.query.days)
            })
            .collect()
    }
}

#[derive(Template)]
#[template(path = "published.html")]
pub struct PublishedPage<'a> {
    pub chrome: Chrome,
    pub list: &'a crate::catalogue::PublishedList,
}

#[derive(Template)]
#[template(path = "status.html")]
pub struct StatusPage<'a> {
    pub chrome: Chrome,
    pub status: &'a Status,
}

impl StatusPage<'_> {
    /// `cache.max_size` and how much of it provider archives use.
    fn limit(&self) -> String {
        match self.status.cache.max_size {
            Some(max) if max > 0 => format!(
                "{}, {:.0} % used",
                self.size(max),
                self.status.cache.provider_bytes as f64 * 100.0 / max as f64
            ),
            _ => "none".into(),
        }
    }
}

/// The version policy page: rules, what of the cache is refused or waived and who used it,
/// approvals and their audit trail; for an approver, the forms to waive, hold and revoke.
#[derive(Template)]
#[template(path = "policy.html")]
pub struct PolicyPage<'a> {
    pub chrome: Chrome,
    pub view: &'a crate::catalogue::PolicyView,
    /// The approval a form just recorded, to say so.
    pub recorded: Option<crate::policy::Approval>,
    /// The approver's client name, when the person may approve.
    pub approver: Option<String>,
    /// Whether the pages need a sign-in (else no one can approve here).
    pub authentication: bool,
}

impl PolicyPage<'_> {
    /// A form field's id unique on the page: `<what>-<n>`.
    fn field_id(&self, what: &str, n: impl Borrow<usize>) -> String {
        format!("{what}-{}", n.borrow())
    }
}

#[derive(Template)]
#[template(path = "sign_in.html")]
pub struct SignInPage {
    pub chrome: Chrome,
    /// Where to go once signed in.
    pub next: String,
    pub failure: Option<String>,
    /// Single sign-on's button: its words and where it goes.
    pub sso: Option<(String, String)>,
    /// Whether the mirror has tokens to sign in with.
    pub tokens: bool,
}

/// The page that takes a person on once single sign-on has set the session cookie: a
/// navigation from this server's own page, so the `SameSite=Strict` cookie goes with it (it
/// would not on the redirect chain the identity provider started).
#[derive(Template)]
#[template(path = "signed_in.html")]
pub struct SignedInPage {
    pub base: String,
    pub next: String,
}

/// The CLI releases page: what the cache holds of each CLI, and how to point installers here.
#[derive(Template)]
#[template(path = "releases.html")]
pub struct ReleasesPage<'a> {
    pub chrome: Chrome,
    pub view: &'a ReleaseCatalogue,
    /// `<mirror URL>releases`, what installers are given.
    pub remote: String,
    pub snippets: Vec<Snippet>,
}

/// A CLI's releases under `releases/<product>/`, newest first, as the vendors' release sites
/// list them: one `<li><a href="<version>/"><product>_<version></a></li>` per line, and no other
/// version-like text (tfenv takes every `x.y.z` on the page, the first as the latest; tenv
/// takes each link's target). Plain HTML: no styles, no scripts.
#[derive(Template)]
#[template(path = "release_list.html")]
pub struct ReleaseListPage {
    pub product: &'static str,
    pub versions: Vec<String>,
}

/// One release's files under `releases/<product>/<version>/`, each linked.
#[derive(Template)]
#[template(path = "release_files.html")]
pub struct ReleaseFilesPage {
    pub product: &'static str,
    pub version: String,
    pub files: Vec<String>,
}

#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    pub chrome: Chrome,
    pub message: String,
}

impl Formats for StartPage {}
impl Formats for ProvidersPage<'_> {}
impl Formats for ProviderPage<'_> {}
impl Formats for VersionPage<'_> {}
impl Formats for ModulesPage<'_> {}
impl Formats for ModuleVersionPage<'_> {}
impl Formats for SearchPage<'_> {}
impl Formats for StatusPage<'_> {}
impl Formats for PolicyPage<'_> {}
impl Formats for ReleasesPage<'_> {}
impl Formats for SignInPage {}
impl Formats for ErrorPage {}

#[cfg(test)]
mod tests {
    use super::*;

    fn chrome() -> Chrome {
        Chrome {
            base: "/".into(),
            title: "Test".into(),
            section: "",
            signed_in: false,
            login: false,
            version: "0",
        }
    }

    #[test]
    fn values_are_escaped_in_text_and_attributes() {
        let page = ErrorPage {
            chrome: chrome(),
            message: "<script>alert(\"x\")</script>".into(),
        };
        let html = page.render().unwrap();
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(
            html.contains("&#60;script&#62;alert(&#34;x&#34;)&#60;/script&#62;"),
            "{html}"
        );
        let sign_in = SignInPage {
            chrome: chrome(),
            next: "\"><img src=x onerror=alert(1)>".into(),
            failure: Some("<img src=y>".into()),
            sso: Some(("<img src=z>".into(), "\"><img src=w>".into())),
            tokens: true,
        };
        let html = sign_in.render().unwrap();
        assert!(!html.contains("<img"), "{html}");
    }

    #[test]
    fn release_listings_escape_and_hold_nothing_but_their_links() {
        let list = ReleaseListPage {
            product: "terraform",
            versions: vec!["1.11.4".into(), "1.10.0-rc1".into()],
        }
        .render()
        .unwrap();
        let lines: Vec<&str> = list.lines().filter(|l| l.starts_with("<li>")).collect();
        assert_eq!(
            lines,
            [
                r#"<li><a href="1.11.4/">terraform_1.11.4</a></li>"#,
                r#"<li><a href="1.10.0-rc1/">terraform_1.10.0-rc1</a></li>"#,
            ]
        );
        let files = ReleaseFilesPage {
            product: "tofu",
            version: "1.8.0".into(),
            files: vec!["\"><script>x</script>".into()],
        }
        .render()
        .unwrap();
        assert!(!files.contains("<script"), "{files}");
    }

    #[test]
    fn times_and_sizes_read_well() {
        let page = ErrorPage {
            chrome: chrome(),
            message: String::new(),
        };
        assert_eq!(page.time(Some(1_795_713_485)), "2026-11-26 17:18 UTC");
        assert_eq!(page.time(None::<u64>), "");
        assert_eq!(page.size(1536), "1.5 KiB");
    }
}

/// `terraform login`'s consent page: the signed-in person confirms that the CLI listening on
/// this computer gets a token in their name.
#[derive(Template)]
#[template(path = "login.html")]
pub struct LoginPage {
    pub chrome: Chrome,
    /// Who the token will sign in.
    pub person: String,
    /// The CLI's port on this computer.
    pub port: u16,
    /// How long the token will last, in words.
    pub lifetime: String,
    /// The authorization request's fields, carried through the form.
    pub fields: Vec<(&'static str, String)>,
}

/// After the consent page: cancelled, or the code handed to the CLI.
#[derive(Template)]
#[template(path = "login_done.html")]
pub struct LoginDonePage {
    pub chrome: Chrome,
    pub cancelled: bool,
}

/// "Your tokens": a person's tokens from `terraform login`, with a button to revoke each.
#[derive(Template)]
#[template(path = "tokens.html")]
pub struct TokensPage {
    pub chrome: Chrome,
    pub person: String,
    pub tokens: Vec<crate::auth::tokens::TokenView>,
    /// The token just revoked, to say so.
    pub revoked: Option<String>,
    /// The command that obtains a token here.
    pub login_command: String,
}

impl Formats for TokensPage {}
