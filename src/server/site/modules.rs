//! The modules' pages and API: the list with its search and filters (`-/modules`), a module
//! version's documentation (`-/modules/<hostname>/<namespace>/<name>/<system>[/<version>]`,
//! the newest version without one, `?version=` from the page's selector), search across
//! providers and modules (`-/search`), and the same views as JSON under `-/api/v1/modules/`.

use http::Response;

use super::{PAGE_SIZE, Site, html, json, page_number};
use crate::address::{ModuleAddr, Version};
use crate::catalogue::{ModuleQuery, ProviderQuery};
use crate::error::Error;
use crate::server::pages::{ModuleVersionPage, ModulesPage, Paging, SearchPage};
use crate::server::respond::{Body, see_other};

/// Results of each kind shown on the search page.
const SEARCH_SHOWN: usize = 20;

impl Site {
    /// `-/modules`.
    pub(super) async fn modules_page(
        &self,
        query: Option<&str>,
        signed_in: bool,
    ) -> Result<Response<Body>, Error> {
        let parsed = ModuleQuery::parse(query);
        let list = self.catalogue.modules(&parsed, false).await?;
        let pages = list.summaries.len().div_ceil(PAGE_SIZE).max(1);
        let page = page_number(query).clamp(1, pages);
        let start = (page - 1) * PAGE_SIZE;
        let shown = &list.summaries[start..(start + PAGE_SIZE).min(list.summaries.len())];
        html(ModulesPage {
            chrome: self.chrome("Modules", "modules", signed_in),
            list: &list,
            shown,
            query: &parsed,
            paging: Paging { page, pages },
        })
    }

    /// `-/modules/<address>[/<version>]`.
    pub(super) async fn module_page(
        &self,
        path: &str,
        query: Option<&str>,
        signed_in: bool,
    ) -> Result<Response<Body>, Error> {
        let (addr, version) = module_path(path)?;
        let version = match version {
            Some(version) => version,
            None => {
                if let Some(chosen) = chosen_version(query) {
                    let chosen = Version::parse_lenient(&chosen)?;
                    return Ok(see_other(&format!(
                        "{}-/modules/{addr}/{chosen}",
                        self.base()
                    )));
                }
                let module = self.catalogue.module(&addr).await?;
                Version::parse_lenient(&module.module.latest)?
            }
        };
        let view = self.catalogue.module_version(&addr, &version).await?;
        html(ModuleVersionPage {
            chrome: self.chrome(format!("{addr} {version}"), "modules", signed_in),
            view: &view,
        })
    }

    /// `-/search?q=`: providers and modules.
    pub(super) async fn search_page(
        &self,
        query: Option<&str>,
        signed_in: bool,
    ) -> Result<Response<Body>, Error> {
        let modules = ModuleQuery::parse(query);
        let providers = ProviderQuery {
            q: modules.q.clone(),
            ..ProviderQuery::default()
        };
        let (provider_list, module_list) = tokio::try_join!(
            self.catalogue.providers(&providers),
            self.catalogue.modules(&modules, false)
        )?;
        html(SearchPage {
            chrome: self.chrome("Search", "", signed_in),
            q: &modules.q,
            providers: &provider_list,
            modules: &module_list,
            limit: SEARCH_SHOWN,
        })
    }

    /// `-/api/v1/modules/<address>[/<version>]`.
    pub(super) async fn module_api(&self, path: &str) -> Result<Response<Body>, Error> {
        match module_path(path)? {
            (addr, None) => json(&self.catalogue.module(&addr).await?),
            (addr, Some(version)) => json(&self.catalogue.module_version(&addr, &version).await?),
        }
    }
}

/// `<hostname>/<namespace>/<name>/<system>[/<version>]`.
fn module_path(path: &str) -> Result<(ModuleAddr, Option<Version>), Error> {
    let parts: Vec<&str> = path.split('/').collect();
    match parts.as_slice() {
        [h, n, m, s] => Ok((ModuleAddr::new(h, n, m, s)?, None)),
        [h, n, m, s, v] => Ok((
            ModuleAddr::new(h, n, m, s)?,
            Some(Version::parse_lenient(v)?),
        )),
        _ => Err(Error::NotFound(format!(
            "modules/{path}: expected <hostname>/<namespace>/<name>/<system>[/<version>]"
        ))),
    }
}

/// `version=` of a query (the page's version selector).
fn chosen_version(query: Option<&str>) -> Option<String> {
    url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .find(|(k, v)| k == "version" && !v.trim().is_empty())
        .map(|(_, v)| v.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_paths_are_checked() {
        let (addr, version) = module_path("registry.terraform.io/acme/vpc/aws/1.2.0").unwrap();
        assert_eq!(addr.to_string(), "registry.terraform.io/acme/vpc/aws");
        assert_eq!(version.unwrap().as_str(), "1.2.0");
        assert!(
            module_path("registry.terraform.io/acme/vpc/aws")
                .unwrap()
                .1
                .is_none()
        );
        assert!(module_path("registry.terraform.io/acme/vpc").is_err());
        assert!(module_path("registry.terraform.io/acme/vpc/a-b").is_err());
        assert!(module_path("registry.terraform.io/acme/vpc/aws/1.0/x").is_err());
        assert_eq!(
            chosen_version(Some("version=2.0.0")).as_deref(),
            Some("2.0.0")
        );
        assert_eq!(chosen_version(Some("version=")), None);
    }
}
