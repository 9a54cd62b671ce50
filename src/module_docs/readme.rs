//! A module's README as HTML that loads nothing and runs nothing.
//!
//! Markdown is rendered by `pulldown-cmark` (tables, strikethrough, task lists) and the HTML,
//! including any raw HTML the README holds, cleaned by `ammonia` (an allow-list of tags and
//! attributes: no scripts, styles, frames, forms or event handlers). On top of that:
//! - images are not shown: each becomes its alternative text, `[image: ...]` (a picture from
//!   elsewhere would be a request the reader did not make; one from the package would need the
//!   package served as files);
//! - links to the web (`http`, `https`, `mailto`) stay, opened without a referrer
//!   (`rel="noopener noreferrer nofollow"`); a relative link to a submodule or example of the
//!   package points at its section of the page; any other relative link becomes plain text.

use std::borrow::Cow;
use std::collections::HashSet;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
use serde::{Deserialize, Serialize};

/// Most bytes of a README's text kept for search.
const MAX_TEXT: usize = 32 << 10;

/// A rendered README.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Readme {
    /// Safe HTML (see the module's header).
    pub html: String,
    /// Its words as plain text (at most 32 KiB), for search.
    pub text: String,
    /// Its first paragraph's text (headings, tables and code are not paragraphs).
    pub first_paragraph: String,
}

impl Readme {
    /// Its first paragraph's text, cut at `max` characters: a summary for lists.
    pub fn summary(&self, max: usize) -> String {
        let first = self
            .first_paragraph
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        match first.char_indices().nth(max) {
            Some((cut, _)) => format!("{}…", first[..cut].trim_end()),
            None => first,
        }
    }
}

/// The page anchor of a module's section: `module-` and its path with `/` as `-`
/// (`module-examples-simple`), `module-root` for the root.
pub fn anchor(path: &str) -> String {
    match path {
        "" => "module-root".into(),
        path => format!("module-{}", path.replace('/', "-")),
    }
}

/// Renders `markdown`, the README of the module at `module_path` in its package (`""` for the
/// root), which relative links are resolved against.
pub fn render(markdown: &str, module_path: &str) -> Readme {
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let mut text = String::new();
    let mut in_image = 0usize;
    // The first paragraph: `None` before it, `Some(false)` inside it, `Some(true)` after.
    let mut first_paragraph = String::new();
    let mut first_done: Option<bool> = None;
    let events: Vec<Event> = Parser::new_ext(markdown, options)
        .filter_map(|event| {
            match &event {
                Event::Start(Tag::Paragraph) if first_done.is_none() => first_done = Some(false),
                Event::End(TagEnd::Paragraph) if first_done == Some(false) => {
                    first_done = Some(true)
                }
                _ => {}
            }
            match &event {
                Event::Text(t) | Event::Code(t) => {
                    if text.len() < MAX_TEXT {
                        text.push_str(t);
                    }
                    if first_done == Some(false) && in_image == 0 && first_paragraph.len() < 1024 {
                        first_paragraph.push_str(t);
                    }
                }
                Event::SoftBreak | Event::HardBreak => {
                    text.push(' ');
                    if first_done == Some(false) {
                        first_paragraph.push(' ');
                    }
                }
                Event::End(
                    TagEnd::Paragraph
                    | TagEnd::Heading(_)
                    | TagEnd::Item
                    | TagEnd::CodeBlock
                    | TagEnd::TableRow,
                ) => text.push_str("\n\n"),
                _ => {}
            }
            match event {
                // The page's own headings come first: the README's sit below them.
                Event::Start(Tag::Heading {
                    level,
                    id,
                    classes,
                    attrs,
                }) => Some(Event::Start(Tag::Heading {
                    level: below_the_page(level),
                    id,
                    classes,
                    attrs,
                })),
                Event::End(TagEnd::Heading(level)) => {
                    Some(Event::End(TagEnd::Heading(below_the_page(level))))
                }
                Event::Start(Tag::Image { .. }) => {
                    in_image += 1;
                    Some(Event::Text("[image: ".into()))
                }
                Event::End(TagEnd::Image) => {
                    in_image = in_image.saturating_sub(1);
                    Some(Event::Text("]".into()))
                }
                // Inside an image, only its alternative text.
                Event::Html(_) | Event::InlineHtml(_) if in_image > 0 => None,
                other => Some(other),
            }
        })
        .collect();
    let mut html = String::new();
    pulldown_cmark::html::push_html(&mut html, events.into_iter());
    let base = module_path.to_string();
    let html = ammonia::Builder::default()
        .rm_tags(["img"])
        .url_schemes(HashSet::from(["http", "https", "mailto"]))
        .link_rel(Some("noopener noreferrer nofollow"))
        .url_relative(ammonia::UrlRelative::Custom(Box::new(Relative(base))))
        .clean(&html)
        .to_string();
    let mut end = text.len().min(MAX_TEXT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    Readme {
        html,
        text: text.trim().to_string(),
        first_paragraph: first_paragraph.trim().to_string(),
    }
}

/// A README heading's level on the page, where it sits under the module's section (`h2`) and
/// its README heading (`h3`): `#` becomes `h4`, and so on down to `h6`.
fn below_the_page(level: pulldown_cmark::HeadingLevel) -> pulldown_cmark::HeadingLevel {
    use pulldown_cmark::HeadingLevel::*;
    match level {
        H1 => H4,
        H2 => H5,
        _ => H6,
    }
}

/// The README's module, which its relative links are resolved against.
struct Relative(String);

impl ammonia::UrlRelativeEvaluate<'_> for Relative {
    fn evaluate<'url>(&self, url: &'url str) -> Option<Cow<'url, str>> {
        relative(&self.0, url).map(Cow::Owned)
    }
}

/// Where a relative link of the README of the module at `base` goes on the module's page: the
/// section of the submodule or example it names, or nowhere.
fn relative(base: &str, url: &str) -> Option<String> {
    let path = url.split(['#', '?']).next().unwrap_or_default();
    if path.is_empty() {
        return None;
    }
    let mut parts: Vec<&str> = if path.starts_with('/') {
        Vec::new()
    } else {
        base.split('/').filter(|p| !p.is_empty()).collect()
    };
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            part => parts.push(part),
        }
    }
    match parts.as_slice() {
        [] => Some(format!("#{}", anchor(""))),
        [kind @ ("modules" | "examples"), name, ..] => {
            Some(format!("#{}", anchor(&format!("{kind}/{name}"))))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_markdown_tables_and_code() {
        let r = render(
            "# Title\n\nSome *text*.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```hcl\nmodule \"x\" {}\n```\n",
            "",
        );
        assert!(r.html.contains("<h4>Title</h4>"), "{}", r.html);
        assert!(r.html.contains("<em>text</em>"));
        assert!(
            r.html.contains("<table>") && r.html.contains("<td>2</td>"),
            "{}",
            r.html
        );
        assert!(r.html.contains("<pre><code>module \"x\" {}"), "{}", r.html);
        assert!(r.text.contains("Some text") && r.text.contains("module \"x\""));
        assert_eq!(r.summary(100), "Some text.");
        assert_eq!(r.summary(4), "Some…");
    }

    #[test]
    fn nothing_loads_and_nothing_runs() {
        let r = render(
            concat!(
                "![diagram](https://evil.example/x.png) ![local](docs/d.png)\n\n",
                "<script>alert(1)</script><img src=x onerror=alert(2)>\n\n",
                "<a href=\"javascript:alert(3)\">js</a> <p style=\"background:url(https://evil.example)\" onclick=\"x()\">p</p>\n\n",
                "<iframe src=\"https://evil.example\"></iframe><form action=\"https://evil.example\"><input></form>\n\n",
                "[web](https://example.com/docs) [file](docs/usage.md) [sub](./modules/subnets) [ex](examples/simple/main.tf)\n",
            ),
            "",
        );
        let html = &r.html;
        for bad in [
            "<script",
            "alert(1)",
            "<img",
            "onerror",
            "javascript:",
            "style=",
            "onclick",
            "<iframe",
            "<form",
            "<input",
            "evil.example",
        ] {
            assert!(!html.contains(bad), "{bad} in {html}");
        }
        assert!(
            html.contains("[image: diagram]") && html.contains("[image: local]"),
            "{html}"
        );
        assert!(
            html.contains(
                "<a href=\"https://example.com/docs\" rel=\"noopener noreferrer nofollow\">web</a>"
            ),
            "{html}"
        );
        assert!(
            html.contains("<a rel=\"noopener noreferrer nofollow\">file</a>"),
            "a relative link to a file keeps its text, without a target: {html}"
        );
        assert!(!html.contains("docs/usage.md"), "{html}");
        assert!(html.contains("href=\"#module-modules-subnets\""), "{html}");
        assert!(html.contains("href=\"#module-examples-simple\""), "{html}");
    }

    #[test]
    fn links_resolve_from_the_readme_s_own_module() {
        assert_eq!(
            relative("examples/simple", "../../modules/a"),
            Some("#module-modules-a".into())
        );
        assert_eq!(
            relative("examples/simple", "../.."),
            Some("#module-root".into())
        );
        assert_eq!(relative("", "../../etc/passwd"), None);
        assert_eq!(relative("", "#usage"), None);
        assert_eq!(relative("", "LICENSE"), None);
    }
}
