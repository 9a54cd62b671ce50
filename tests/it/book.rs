//! The user guide in `docs/` holds together: every chapter `SUMMARY.md` names exists, every
//! Markdown file under `docs/src` is a chapter of it, and every relative link of the book and of
//! README.md (to a chapter, a file, or a `#heading`) resolves. Heading anchors are computed as
//! mdBook computes heading ids (the heading's text, lowercased, whitespace to `-`, every
//! character but letters, digits, `_` and `-` dropped, repeats numbered `-1`, `-2`...), with
//! the Markdown extensions mdBook turns on. `{{#include FILE}}` is expanded as mdBook does
//! before the links are read. External links are not fetched; they must use https.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Component, Path, PathBuf};

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// The Markdown extensions mdBook's HTML renderer enables with its default configuration.
fn options() -> Options {
    Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_HEADING_ATTRIBUTES
        | Options::ENABLE_SMART_PUNCTUATION
        | Options::ENABLE_DEFINITION_LIST
        | Options::ENABLE_GFM
}

/// The id mdBook gives a heading whose text is `content`.
fn heading_id(content: &str) -> String {
    content
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c)
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// `id`, or the first of `id-1`, `id-2`... not used yet.
fn unique(id: String, used: &mut HashSet<String>) -> String {
    if used.insert(id.clone()) {
        return id;
    }
    (1..)
        .map(|n| format!("{id}-{n}"))
        .find(|candidate| used.insert(candidate.clone()))
        .expect("some suffix is free")
}

/// A link or image of a Markdown text: where it points, and the line it is on.
#[derive(Debug)]
struct Link {
    dest: String,
    line: usize,
}

/// The anchors of a Markdown text's headings (and definition terms), and its links.
fn parse(text: &str) -> (BTreeSet<String>, Vec<Link>) {
    let mut anchors = BTreeSet::new();
    let mut used = HashSet::new();
    let mut links = Vec::new();
    // The text of the heading being read, and its explicit id.
    let mut heading: Option<(String, Option<String>)> = None;
    for (event, range) in Parser::new_ext(text, options()).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { id, .. }) => {
                heading = Some((String::new(), id.map(|i| i.to_string())));
            }
            Event::Start(Tag::DefinitionListTitle) => heading = Some((String::new(), None)),
            Event::End(TagEnd::Heading(_) | TagEnd::DefinitionListTitle) => {
                if let Some((content, explicit)) = heading.take() {
                    let id = explicit.unwrap_or_else(|| unique(heading_id(&content), &mut used));
                    anchors.insert(id);
                }
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some((content, _)) = heading.as_mut() {
                    content.push_str(&t);
                }
            }
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                links.push(Link {
                    dest: dest_url.to_string(),
                    line: text[..range.start].matches('\n').count() + 1,
                });
            }
            _ => {}
        }
    }
    (anchors, links)
}

/// The chapter files `SUMMARY.md` names, in order, relative to `docs/src`; an empty link (a
/// draft chapter, which mdBook would create) is a problem.
fn summary_chapters(summary: &str, problems: &mut Vec<String>) -> Vec<String> {
    let (_, links) = parse(summary);
    let mut chapters = Vec::new();
    for link in links {
        if link.dest.is_empty() {
            problems.push(format!(
                "SUMMARY.md:{}: a chapter without a file (a draft)",
                link.line
            ));
        } else {
            if link.dest == "README.md" || link.dest.ends_with("/README.md") {
                problems.push(format!(
                    "SUMMARY.md:{}: {}: mdBook renders a README chapter as index.html, so links \
                     to it (README.html) would break; name the file otherwise",
                    link.line, link.dest
                ));
            }
            chapters.push(link.dest);
        }
    }
    chapters
}

/// `path` with `.` and `..` taken out, as far as they go.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// `text` with each `{{#include FILE}}` (also `FILE:anchor` and `FILE:lines`) replaced by the
/// file's text, read relative to `dir`; a file that cannot be read is a problem.
fn expand_includes(text: &str, dir: &Path, name: &str, problems: &mut Vec<String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{#include ") {
        let Some(len) = rest[start..].find("}}") else {
            break;
        };
        out.push_str(&rest[..start]);
        let arg = rest[start + "{{#include ".len()..start + len].trim();
        let file = arg.split(':').next().unwrap_or(arg);
        match std::fs::read_to_string(dir.join(file)) {
            Ok(included) => out.push_str(&included),
            Err(e) => problems.push(format!("{name}: {{{{#include {arg}}}}}: {file}: {e}")),
        }
        rest = &rest[start + len + 2..];
    }
    out.push_str(rest);
    out
}

/// Checks the book under `docs` (its `book.toml`'s directory) and the Markdown `extra` files
/// (README.md) that link into it; returns every problem found, each naming its file and line.
fn check(docs: &Path, extra: &[PathBuf]) -> Vec<String> {
    let mut problems = Vec::new();
    let src = docs.join("src");
    let summary_path = src.join("SUMMARY.md");
    let summary = match std::fs::read_to_string(&summary_path) {
        Ok(s) => s,
        Err(e) => return vec![format!("{}: {e}", summary_path.display())],
    };
    let chapters = summary_chapters(&summary, &mut problems);

    // Every Markdown file whose links to check, by its normalised path: the chapters and the
    // extras (SUMMARY.md's links are the chapters, checked above).
    let mut files: BTreeMap<PathBuf, String> = BTreeMap::new();
    let mut named = BTreeSet::new();
    for chapter in &chapters {
        let path = normalize(&src.join(chapter));
        if !named.insert(path.clone()) {
            problems.push(format!("SUMMARY.md names {chapter} twice"));
        }
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let dir = path.parent().unwrap_or(&src).to_path_buf();
                let text = expand_includes(&text, &dir, chapter, &mut problems);
                files.insert(path, text);
            }
            Err(e) => problems.push(format!("SUMMARY.md names {chapter}, which is missing: {e}")),
        }
    }
    for path in markdown_under(&src) {
        let path = normalize(&path);
        if path != normalize(&summary_path) && !named.contains(&path) {
            problems.push(format!(
                "{} is not a chapter of SUMMARY.md",
                path.strip_prefix(&src).unwrap_or(&path).display()
            ));
        }
    }
    for path in extra {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                files.insert(normalize(path), text);
            }
            Err(e) => problems.push(format!("{}: {e}", path.display())),
        }
    }

    // Paths are shown relative to the directory holding `docs`.
    let base = normalize(docs.parent().unwrap_or(docs));
    let shown = |p: &Path| p.strip_prefix(&base).unwrap_or(p).display().to_string();
    let parsed: BTreeMap<&PathBuf, (BTreeSet<String>, Vec<Link>)> =
        files.iter().map(|(p, text)| (p, parse(text))).collect();
    // Anchors of Markdown files linked to that are not checked themselves (SECURITY.md).
    let mut other_anchors: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    for (path, (_, links)) in &parsed {
        let dir = path.parent().unwrap_or(Path::new(""));
        for link in links {
            let at = format!("{}:{}: {}", shown(path), link.line, link.dest);
            let dest = link.dest.as_str();
            if dest.starts_with("https://") {
                continue;
            }
            if dest.contains("://") || dest.starts_with("mailto:") || dest.starts_with("//") {
                problems.push(format!("{at}: an external link must use https"));
                continue;
            }
            if dest.is_empty() || dest.starts_with('/') {
                problems.push(format!("{at}: links must be relative to the file"));
                continue;
            }
            let (file, anchor) = dest.split_once('#').unwrap_or((dest, ""));
            let target = if file.is_empty() {
                (*path).clone()
            } else {
                normalize(&dir.join(file))
            };
            if !target.exists() {
                problems.push(format!("{at}: {} does not exist", shown(&target)));
                continue;
            }
            if anchor.is_empty() {
                continue;
            }
            let anchors = match parsed.get(&target) {
                Some((anchors, _)) => anchors,
                None if target.extension().is_some_and(|e| e == "md") => {
                    other_anchors.entry(target.clone()).or_insert_with(|| {
                        parse(&std::fs::read_to_string(&target).unwrap_or_default()).0
                    })
                }
                None => {
                    problems.push(format!("{at}: an anchor into a file that is not Markdown"));
                    continue;
                }
            };
            if !anchors.contains(anchor) {
                problems.push(format!("{at}: {} has no heading #{anchor}", shown(&target)));
            }
        }
    }
    problems
}

/// Every `*.md` file under `dir`, at any depth.
fn markdown_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

#[test]
fn the_books_chapters_exist_and_every_link_of_the_book_and_the_readme_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let book = std::fs::read_to_string(root.join("docs/book.toml")).expect("docs/book.toml");
    assert!(
        book.contains("create-missing = false"),
        "book.toml must keep mdBook from creating missing chapters"
    );
    let problems = check(&root.join("docs"), &[root.join("README.md")]);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // README.md leads into the book.
    let (_, readme_links) = parse(&std::fs::read_to_string(root.join("README.md")).unwrap());
    let into_book = readme_links
        .iter()
        .filter(|l| l.dest.starts_with("docs/src/"))
        .count();
    assert!(
        into_book >= 10,
        "README.md links into the book {into_book} times"
    );
}

#[test]
fn heading_ids_are_mdbooks() {
    assert_eq!(
        heading_id("`--passes`: add more rustdoc passes"),
        "--passes-add-more-rustdoc-passes"
    );
    assert_eq!(heading_id("Über"), "über");
    assert_eq!(heading_id("中文標題 CJK title"), "中文標題-cjk-title");
    let (anchors, _) = parse(
        "# Every platform's `h1:` without a client download\n\n## Rules\n\n## Rules\n\n\
         ## Named {#custom}\n",
    );
    let want: BTreeSet<String> = [
        "every-platforms-h1-without-a-client-download",
        "rules",
        "rules-1",
        "custom",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(anchors, want);
}

/// Writes a small book: `files` as (path under the book's directory, text).
fn small_book(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

#[test]
fn the_checker_passes_a_sound_book() {
    let book = small_book(&[
        (
            "src/SUMMARY.md",
            "# Summary\n\n- [A](a.md)\n- [B](sub/b.md)\n",
        ),
        (
            "src/a.md",
            "# A\n\nSee [B's part](sub/b.md#the-part-two), [here](#a), \
             [the web](https://example.com/) and ![a picture](pic.png).\n\n\
             ```toml\n{{#include sub/conf.toml}}\n```\n",
        ),
        ("src/pic.png", "png"),
        (
            "src/sub/b.md",
            "# B\n\n## The part: two\n\nBack to [A](../a.md).\n",
        ),
        ("src/sub/conf.toml", "# not a heading: a comment\n"),
        ("README.md", "Read [the book](src/a.md#a).\n"),
    ]);
    let problems = check(book.path(), &[book.path().join("README.md")]);
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn the_checker_finds_each_kind_of_broken_link() {
    let book = small_book(&[
        (
            "src/SUMMARY.md",
            "# Summary\n\n- [A](a.md)\n- [Gone](gone.md)\n- [Draft]()\n- [Index](sub/README.md)\n",
        ),
        (
            "src/a.md",
            "# A\n\n[no file](nothere.md)\n[no heading](a.md#nowhere)\n[plain](http://example.com/)\n\
             [rooted](/a.md)\n\n{{#include missing.toml}}\n",
        ),
        ("src/orphan.md", "# Not in the summary\n"),
        ("src/sub/README.md", "# An index\n"),
        ("README.md", "[into the book](src/a.md#missing)\n"),
    ]);
    let problems = check(book.path(), &[book.path().join("README.md")]);
    let text = problems.join("\n");
    for expected in [
        "names gone.md, which is missing",
        "a chapter without a file",
        "sub/README.md: mdBook renders a README chapter as index.html",
        "orphan.md is not a chapter",
        "nothere.md does not exist",
        "has no heading #nowhere",
        "must use https",
        "must be relative",
        "missing.toml",
        "has no heading #missing",
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} not found in:\n{text}"
        );
    }
    assert_eq!(problems.len(), 10, "{text}");
}
