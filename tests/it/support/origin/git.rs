//! The fake origin's git server: real repositories served by `git http-backend` as a CGI.
//!
//! Each module gets a bare repository `<ns>/terraform-<system>-<name>.git` under a temporary
//! project root, filled with `git fast-import`: one commit per version on `main` (the version's
//! package files, see [`ModuleSpec::package_files`]), in the spec's order, each tagged
//! `v<version>` (a lightweight tag). Authors, committers, dates and messages are fixed, so the
//! commit IDs are the same in every run. A repository `endless.git` (one commit, tag
//! [`ENDLESS_GIT_REF`]) backs [`HostileModule::EndlessGit`] and [`HostileModule::OptionRef`];
//! `treebomb.git` backs [`HostileModule::TreeBombGit`]: a commit of five objects whose tree
//! names one 1 MiB blob of zeros 64 × 64 × 64 times, 256 GiB once archived. For the git door:
//! `hostile-refs.git`, whose branches and `HEAD` are named like options, and `deep.git`, a tree
//! deeper than git walks.
//!
//! Requests under `/git/` run `git http-backend` with the CGI environment (`PATH_INFO`,
//! `QUERY_STRING`, `REQUEST_METHOD`, `CONTENT_TYPE`, `CONTENT_LENGTH`, `HTTP_GIT_PROTOCOL`,
//! `HTTP_CONTENT_ENCODING`, `GIT_PROJECT_ROOT`, `GIT_HTTP_EXPORT_ALL`), the request body on
//! its stdin; its CGI headers (`Status:` included) become the response's, its output the
//! buffered body. Only the final fetch request to `endless.git` (the one saying `done`) is
//! answered by this module itself, with a pack that never ends.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use tempfile::TempDir;

use super::OriginBody;
use super::modules::{ENDLESS_GIT_REF, ModuleSpec};

/// The author and committer of every fixture commit.
const IDENTITY: &str = "provender test <test@provender.invalid>";

/// How many objects the endless pack announces: 100 000 objects of 1 MiB, about 100 GiB, is
/// endless for a test, and small enough for `git index-pack` to accept the header (2^32-1
/// overflows its arithmetic at once).
const ENDLESS_PACK_OBJECTS: u32 = 100_000;

/// A branch of `hostile-refs.git` named like an option of `git fetch`.
pub const OPTION_BRANCH: &str = "--upload-pack=x";

/// How deep the one file of `deep.git` lies.
pub const DEEP_TREE: usize = 5000;

/// The largest request body the git server reads (fetch requests are a few KiB).
const MAX_REQUEST_BODY: usize = 16 * 1024 * 1024;

/// The repositories and what their tags point at.
pub(super) struct GitRepos {
    /// Holds `repos/` (the CGI's `GIT_PROJECT_ROOT`) and `home/` (an empty `HOME`).
    dir: TempDir,
    state: Mutex<GitState>,
    /// Bytes the endless upload-pack answers have sent so far.
    pub(super) endless_sent: Arc<AtomicU64>,
}

struct GitState {
    /// `(ns, name, system, version)` → the commit its tag points at.
    commits: BTreeMap<(String, String, String, String), String>,
    /// Commits made by [`GitRepos::move_tag`], for their dates.
    moves: u64,
}

impl GitRepos {
    /// Creates one repository per spec, and `endless.git`. Blocking; panics on failure.
    pub(super) fn create(specs: &[ModuleSpec]) -> GitRepos {
        let dir = tempfile::Builder::new()
            .prefix("provender-git-origin-")
            .tempdir()
            .expect("create git project root");
        std::fs::create_dir(dir.path().join("repos")).expect("create repos dir");
        std::fs::create_dir(dir.path().join("home")).expect("create git home");
        let repos = GitRepos {
            dir,
            state: Mutex::new(GitState {
                commits: BTreeMap::new(),
                moves: 0,
            }),
            endless_sent: Arc::new(AtomicU64::new(0)),
        };
        let mut commits = BTreeMap::new();
        for spec in specs {
            let repo = repos.init(&spec.git_repo());
            let mut stream = Vec::new();
            for (index, version) in spec.versions.iter().enumerate() {
                let files = spec.package_files(version);
                let message = format!("{} {version}\n", spec.address());
                let parent = (index > 0).then(|| format!(":{index}"));
                fast_import_commit(
                    &mut stream,
                    index + 1,
                    super::modules::MTIME + 60 * index as u64,
                    &message,
                    parent.as_deref(),
                    &files,
                );
                stream.extend_from_slice(
                    format!("reset refs/tags/v{version}\nfrom :{}\n\n", index + 1).as_bytes(),
                );
            }
            repos.fast_import(&repo, &stream);
            for version in &spec.versions {
                let commit = repos.rev_parse(&repo, &format!("refs/tags/v{version}"));
                commits.insert(
                    (
                        spec.namespace.clone(),
                        spec.name.clone(),
                        spec.system.clone(),
                        version.clone(),
                    ),
                    commit,
                );
            }
        }
        let endless = repos.init("endless.git");
        let mut stream = Vec::new();
        let files = BTreeMap::from([(
            "main.tf".to_owned(),
            b"# The endless test repository: fetching it never ends.\n".to_vec(),
        )]);
        fast_import_commit(
            &mut stream,
            1,
            super::modules::MTIME,
            "endless\n",
            None,
            &files,
        );
        stream.extend_from_slice(
            format!("reset refs/tags/{ENDLESS_GIT_REF}\nfrom :1\n\n").as_bytes(),
        );
        repos.fast_import(&endless, &stream);
        repos.tree_bomb();
        repos.hostile_refs();
        repos.deep_tree();
        repos.state.lock().expect("git state").commits = commits;
        repos
    }

    /// The commit `v<version>` of this module points at now.
    pub(super) fn commit(
        &self,
        ns: &str,
        name: &str,
        system: &str,
        version: &str,
    ) -> Option<String> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .commits
            .get(&(
                ns.to_owned(),
                name.to_owned(),
                system.to_owned(),
                version.to_owned(),
            ))
            .cloned()
    }

    /// Commits exactly `files` on top of `main` and force-moves `v<version>` to that commit,
    /// which it returns.
    pub(super) fn move_tag(
        &self,
        spec: &ModuleSpec,
        version: &str,
        files: &BTreeMap<String, Vec<u8>>,
    ) -> String {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.moves += 1;
        let repo = self.dir.path().join("repos").join(spec.git_repo());
        let main = self.rev_parse(&repo, "refs/heads/main");
        let mut stream = Vec::new();
        fast_import_commit(
            &mut stream,
            1,
            super::modules::MTIME + 86_400 + 60 * state.moves,
            &format!("{} {version} (moved tag)\n", spec.address()),
            Some(&main),
            files,
        );
        stream.extend_from_slice(format!("reset refs/tags/v{version}\nfrom :1\n\n").as_bytes());
        self.fast_import(&repo, &stream);
        let commit = self.rev_parse(&repo, &format!("refs/tags/v{version}"));
        state.commits.insert(
            (
                spec.namespace.clone(),
                spec.name.clone(),
                spec.system.clone(),
                version.to_owned(),
            ),
            commit.clone(),
        );
        commit
    }

    fn project_root(&self) -> PathBuf {
        self.dir.path().join("repos")
    }

    /// A `git` command with an isolated environment (no user or system configuration).
    fn git(&self) -> Command {
        let mut command = Command::new("git");
        command
            .env_clear()
            .env(
                "PATH",
                std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_owned()),
            )
            .env("HOME", self.dir.path().join("home"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("LC_ALL", "C");
        command
    }

    /// Runs `command`, feeding it `stdin`; panics with its stderr on failure.
    fn run(&self, mut command: Command, stdin: &[u8]) -> Vec<u8> {
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let what = format!("{command:?}");
        let mut child = command
            .spawn()
            .unwrap_or_else(|err| panic!("cannot run {what}: {err}"));
        let mut input = child.stdin.take().expect("piped stdin");
        let stdin = stdin.to_vec();
        let writer = std::thread::spawn(move || {
            let _ = input.write_all(&stdin);
        });
        let output = child
            .wait_with_output()
            .unwrap_or_else(|err| panic!("wait for {what}: {err}"));
        let _ = writer.join();
        assert!(
            output.status.success(),
            "{what} failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        output.stdout
    }

    /// `git init --bare` at `repos/<name>`, serving any reachable commit by ID (as GitHub does).
    fn init(&self, name: &str) -> PathBuf {
        let repo = self.project_root().join(name);
        let mut command = self.git();
        command
            .args(["init", "--quiet", "--bare", "--initial-branch=main"])
            .arg(&repo);
        self.run(command, b"");
        let mut config = std::fs::OpenOptions::new()
            .append(true)
            .open(repo.join("config"))
            .expect("open repository config");
        config
            .write_all(b"[uploadpack]\n\tallowReachableSHA1InWant = true\n")
            .expect("write repository config");
        repo
    }

    /// `hostile-refs.git`: one commit on `main`, also the branches [`OPTION_BRANCH`] and
    /// `-x`, which its `HEAD` names: names a careless server would hand git as options.
    fn hostile_refs(&self) {
        let repo = self.init("hostile-refs.git");
        let mut stream = Vec::new();
        let files = BTreeMap::from([("main.tf".to_owned(), b"# hostile refs\n".to_vec())]);
        fast_import_commit(
            &mut stream,
            1,
            super::modules::MTIME,
            "refs\n",
            None,
            &files,
        );
        for branch in [OPTION_BRANCH, "-x"] {
            stream.extend_from_slice(format!("reset refs/heads/{branch}\nfrom :1\n\n").as_bytes());
        }
        self.fast_import(&repo, &stream);
        let mut command = self.git();
        command
            .arg("--git-dir")
            .arg(&repo)
            .args(["symbolic-ref", "HEAD", "refs/heads/-x"]);
        self.run(command, b"");
    }

    /// `deep.git`: one commit whose only file lies [`DEEP_TREE`] directories down, more than
    /// git's own `core.maxTreeDepth` lets it walk; this origin's configuration raises that limit
    /// for itself, so it serves the commit.
    fn deep_tree(&self) {
        let repo = self.init("deep.git");
        let path = format!("{}f", "a/".repeat(DEEP_TREE));
        let files = BTreeMap::from([(path, b"deep\n".to_vec())]);
        let mut stream = Vec::new();
        fast_import_commit(
            &mut stream,
            1,
            super::modules::MTIME,
            "deep\n",
            None,
            &files,
        );
        self.fast_import(&repo, &stream);
        let mut config = std::fs::OpenOptions::new()
            .append(true)
            .open(repo.join("config"))
            .expect("open repository config");
        config
            .write_all(b"[core]\n\tmaxTreeDepth = 1000000\n")
            .expect("write repository config");
    }

    /// `treebomb.git`: one blob of 1 MiB of zeros, a tree naming it 64 times, a tree naming that
    /// tree 64 times, and one more level, committed and tagged [`ENDLESS_GIT_REF`].
    fn tree_bomb(&self) {
        let repo = self.init("treebomb.git");
        let plumbing = |args: &[&str], stdin: &[u8]| {
            let mut command = self.git();
            command
                .arg("--git-dir")
                .arg(&repo)
                .args(args)
                .env("GIT_AUTHOR_NAME", "provender test")
                .env("GIT_AUTHOR_EMAIL", "test@provender.invalid")
                .env("GIT_AUTHOR_DATE", "1700000000 +0000")
                .env("GIT_COMMITTER_NAME", "provender test")
                .env("GIT_COMMITTER_EMAIL", "test@provender.invalid")
                .env("GIT_COMMITTER_DATE", "1700000000 +0000");
            let out = self.run(command, stdin);
            String::from_utf8(out)
                .expect("git prints ids")
                .trim()
                .to_owned()
        };
        let mut id = plumbing(&["hash-object", "-w", "--stdin"], &vec![0u8; 1 << 20]);
        let mut mode_kind = "100644 blob";
        for _ in 0..3 {
            let listing: String = (0..64)
                .map(|i| format!("{mode_kind} {id}\tx{i:02}\n"))
                .collect();
            id = plumbing(&["mktree"], listing.as_bytes());
            mode_kind = "040000 tree";
        }
        let commit = plumbing(&["commit-tree", &id, "-m", "tree bomb"], b"");
        plumbing(
            &[
                "update-ref",
                &format!("refs/tags/{ENDLESS_GIT_REF}"),
                &commit,
            ],
            b"",
        );
    }

    /// See [`super::FakeOrigin::git_big_repo`].
    pub(super) fn big_repo(&self, name: &str, bytes: usize) -> String {
        let repo = self.init(name);
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut data = Vec::with_capacity(bytes + 8);
        while data.len() < bytes {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            data.extend_from_slice(&state.to_le_bytes());
        }
        data.truncate(bytes);
        let files = BTreeMap::from([
            ("main.tf".to_owned(), b"# big\n".to_vec()),
            ("blob.bin".to_owned(), data),
        ]);
        let mut stream = Vec::new();
        fast_import_commit(&mut stream, 1, super::modules::MTIME, "big\n", None, &files);
        self.fast_import(&repo, &stream);
        self.rev_parse(&repo, "refs/heads/main")
    }

    /// See [`super::FakeOrigin::git_branch_commit`].
    pub(super) fn branch_commit(
        &self,
        repo: &str,
        branch: &str,
        files: &BTreeMap<String, Vec<u8>>,
    ) -> String {
        let repo = self.project_root().join(repo);
        let main = self.rev_parse(&repo, "refs/heads/main");
        let mut stream = Vec::new();
        fast_import_commit(
            &mut stream,
            1,
            super::modules::MTIME + 7 * 86_400,
            &format!("{branch}\n"),
            Some(&main),
            files,
        );
        stream.extend_from_slice(format!("reset refs/heads/{branch}\nfrom :1\n\n").as_bytes());
        // fast-import commits on `main` first: put `main` back.
        stream.extend_from_slice(format!("reset refs/heads/main\nfrom {main}\n\n").as_bytes());
        self.fast_import(&repo, &stream);
        self.rev_parse(&repo, &format!("refs/heads/{branch}"))
    }

    /// See [`super::FakeOrigin::git_scrub_branch`].
    pub(super) fn scrub_branch(&self, repo: &str, branch: &str) {
        let repo = self.project_root().join(repo);
        let mut command = self.git();
        command.arg("--git-dir").arg(&repo).args([
            "update-ref",
            "-d",
            &format!("refs/heads/{branch}"),
        ]);
        self.run(command, b"");
        let mut command = self.git();
        command.arg("--git-dir").arg(&repo).args([
            "-c",
            "gc.reflogExpire=now",
            "-c",
            "gc.reflogExpireUnreachable=now",
            "gc",
            "--quiet",
            "--prune=now",
        ]);
        self.run(command, b"");
    }

    fn fast_import(&self, repo: &Path, stream: &[u8]) {
        let mut command = self.git();
        command
            .arg("--git-dir")
            .arg(repo)
            .args(["fast-import", "--quiet", "--force"]);
        self.run(command, stream);
    }

    fn rev_parse(&self, repo: &Path, rev: &str) -> String {
        let mut command = self.git();
        command
            .arg("--git-dir")
            .arg(repo)
            .args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("{rev}^{{commit}}"));
        let out = self.run(command, b"");
        String::from_utf8(out)
            .expect("rev-parse prints hex")
            .trim()
            .to_owned()
    }

    /// Answers one request under `/git/` (`path_info` is the path after `/git`).
    pub(super) async fn serve(
        &self,
        req: Request<Incoming>,
        path_info: String,
    ) -> Response<OriginBody> {
        let header = |name: &str| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let method = req.method().as_str().to_owned();
        let query = req.uri().query().unwrap_or_default().to_owned();
        let content_type = header("content-type");
        let content_encoding = header("content-encoding");
        let git_protocol = header("git-protocol");
        let body = match Limited::new(req.into_body(), MAX_REQUEST_BODY)
            .collect()
            .await
        {
            Ok(collected) => collected.to_bytes(),
            Err(_) => return plain(StatusCode::BAD_REQUEST, "unreadable request body"),
        };

        if path_info == "/endless.git/git-upload-pack" && method == "POST" {
            let request = decoded(&body, &content_encoding);
            if contains(&request, b"0009done\n") {
                return endless_pack(
                    git_protocol.contains("version=2"),
                    contains(&request, b"deepen"),
                    contains(&request, b"side-band-64k") || git_protocol.contains("version=2"),
                    Arc::clone(&self.endless_sent),
                );
            }
        }

        let mut command = tokio::process::Command::new("git");
        command
            .arg("http-backend")
            .env_clear()
            .env(
                "PATH",
                std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_owned()),
            )
            .env("HOME", self.dir.path().join("home"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_PROJECT_ROOT", self.project_root())
            .env("GIT_HTTP_EXPORT_ALL", "1")
            .env("PATH_INFO", &path_info)
            .env("QUERY_STRING", &query)
            .env("REQUEST_METHOD", &method)
            .env("CONTENT_LENGTH", body.len().to_string())
            .env("REMOTE_ADDR", "127.0.0.1")
            .env("SERVER_PROTOCOL", "HTTP/1.1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (var, value) in [
            ("CONTENT_TYPE", &content_type),
            ("HTTP_GIT_PROTOCOL", &git_protocol),
            ("HTTP_CONTENT_ENCODING", &content_encoding),
        ] {
            if !value.is_empty() {
                command.env(var, value);
            }
        }
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(err) => {
                return plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("cannot run git http-backend: {err}"),
                );
            }
        };
        let mut stdin = child.stdin.take().expect("piped stdin");
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt as _;
            let _ = stdin.write_all(&body).await;
        });
        let output = match child.wait_with_output().await {
            Ok(output) => output,
            Err(err) => {
                return plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("git http-backend: {err}"),
                );
            }
        };
        let _ = writer.await;
        cgi_response(&output.stdout).unwrap_or_else(|| {
            plain(
                StatusCode::BAD_GATEWAY,
                &format!(
                    "git http-backend gave no CGI answer ({}): {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr)
                ),
            )
        })
    }
}

/// Appends one fast-import commit on `main` holding exactly `files`, marked `:mark`.
fn fast_import_commit(
    stream: &mut Vec<u8>,
    mark: usize,
    time: u64,
    message: &str,
    parent: Option<&str>,
    files: &BTreeMap<String, Vec<u8>>,
) {
    let data = |stream: &mut Vec<u8>, bytes: &[u8]| {
        stream.extend_from_slice(format!("data {}\n", bytes.len()).as_bytes());
        stream.extend_from_slice(bytes);
        stream.push(b'\n');
    };
    stream.extend_from_slice(
        format!(
            "commit refs/heads/main\nmark :{mark}\n\
             author {IDENTITY} {time} +0000\ncommitter {IDENTITY} {time} +0000\n"
        )
        .as_bytes(),
    );
    data(stream, message.as_bytes());
    if let Some(parent) = parent {
        stream.extend_from_slice(format!("from {parent}\n").as_bytes());
    }
    stream.extend_from_slice(b"deleteall\n");
    for (path, content) in files {
        stream.extend_from_slice(format!("M 100644 inline {path}\n").as_bytes());
        data(stream, content);
    }
    stream.push(b'\n');
}

/// A CGI answer (headers, an empty line, the body) as an HTTP response; `None` if malformed.
fn cgi_response(output: &[u8]) -> Option<Response<OriginBody>> {
    let (head, body) = match find(output, b"\r\n\r\n") {
        Some(at) => (&output[..at], &output[at + 4..]),
        None => {
            let at = find(output, b"\n\n")?;
            (&output[..at], &output[at + 2..])
        }
    };
    let head = std::str::from_utf8(head).ok()?;
    let mut response = Response::new(Full::new(Bytes::copy_from_slice(body)).boxed());
    for line in head.lines() {
        let (name, value) = line.split_once(':')?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value.split_whitespace().next()?.parse().ok()?;
            *response.status_mut() = StatusCode::from_u16(code).ok()?;
        } else {
            response.headers_mut().append(
                HeaderName::from_bytes(name.trim().as_bytes()).ok()?,
                HeaderValue::from_str(value).ok()?,
            );
        }
    }
    response
        .headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
    Some(response)
}

fn plain(status: StatusCode, message: &str) -> Response<OriginBody> {
    let mut response = Response::new(Full::new(Bytes::from(format!("{message}\n"))).boxed());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}

/// The request body as upload-pack sees it (git gzips larger requests).
fn decoded(body: &[u8], content_encoding: &str) -> Vec<u8> {
    if content_encoding.contains("gzip") {
        let mut out = Vec::new();
        if flate2::read::GzDecoder::new(body)
            .read_to_end(&mut out)
            .is_ok()
        {
            return out;
        }
    }
    body.to_vec()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    find(haystack, needle).is_some()
}

/// One pkt-line.
fn pkt(payload: &[u8]) -> Vec<u8> {
    let mut line = format!("{:04x}", payload.len() + 4).into_bytes();
    line.extend_from_slice(payload);
    line
}

/// One pack object, repeated forever by [`endless_pack`]: a blob of 1 MiB of incompressible
/// bytes, zlib-"compressed" with stored blocks, so the pack grows as fast as it is sent.
fn endless_object() -> &'static Bytes {
    static OBJECT: OnceLock<Bytes> = OnceLock::new();
    OBJECT.get_or_init(|| {
        const SIZE: usize = 1 << 20;
        let mut state: u64 = 0x2545_F491_4F6C_DD1D;
        let mut data = Vec::with_capacity(SIZE);
        while data.len() < SIZE {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            data.extend_from_slice(&state.to_le_bytes());
        }
        // Type 3 (blob), then the size in 4 + 7n bits, least significant first.
        let mut object = Vec::new();
        let mut size = SIZE;
        let mut byte = 0x80 | (3 << 4) | (size & 0x0f) as u8;
        size >>= 4;
        while size > 0 {
            object.push(byte);
            byte = 0x80 | (size & 0x7f) as u8;
            size >>= 7;
        }
        object.push(byte & 0x7f);
        let mut zlib = flate2::write::ZlibEncoder::new(object, flate2::Compression::none());
        zlib.write_all(&data).expect("zlib into memory");
        Bytes::from(zlib.finish().expect("finish zlib"))
    })
}

/// An upload-pack result that never ends: the protocol preamble, a pack header announcing
/// [`ENDLESS_PACK_OBJECTS`] objects, then the same blob object again and again (in side-band 1 pkt-lines
/// when the client speaks protocol v2 or asked for `side-band-64k`).
fn endless_pack(
    v2: bool,
    deepen: bool,
    sideband: bool,
    sent: Arc<AtomicU64>,
) -> Response<OriginBody> {
    let mut preamble = Vec::new();
    if v2 {
        preamble.extend(pkt(b"packfile\n"));
    } else {
        if deepen {
            // The (empty) list of shallow updates.
            preamble.extend_from_slice(b"0000");
        }
        preamble.extend(pkt(b"NAK\n"));
    }
    let mut header = b"PACK".to_vec();
    header.extend_from_slice(&2u32.to_be_bytes());
    header.extend_from_slice(&ENDLESS_PACK_OBJECTS.to_be_bytes());
    if sideband {
        let mut band = vec![1u8];
        band.extend_from_slice(&header);
        preamble.extend(pkt(&band));
    } else {
        preamble.extend_from_slice(&header);
    }

    let object = endless_object().clone();
    let chunk = if sideband { 65515 } else { 64 * 1024 };
    let state = (Some(Bytes::from(preamble)), 0usize);
    let stream = futures_util::stream::unfold(state, move |(preamble, offset)| {
        let object = object.clone();
        let sent = Arc::clone(&sent);
        async move {
            if let Some(preamble) = preamble {
                sent.fetch_add(preamble.len() as u64, Ordering::Relaxed);
                return Some((Ok::<_, Infallible>(Frame::data(preamble)), (None, offset)));
            }
            let mut data = Vec::with_capacity(chunk + 5);
            let mut offset = offset;
            while data.len() < chunk {
                let take = (chunk - data.len()).min(object.len() - offset);
                data.extend_from_slice(&object[offset..offset + take]);
                offset = (offset + take) % object.len();
            }
            let frame = if sideband {
                let mut band = vec![1u8];
                band.extend_from_slice(&data);
                pkt(&band)
            } else {
                data
            };
            sent.fetch_add(frame.len() as u64, Ordering::Relaxed);
            Some((Ok(Frame::data(Bytes::from(frame))), (None, offset)))
        }
    });
    let mut response = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/x-git-upload-pack-result"),
    );
    headers.insert(
        CACHE_CONTROL,
        HeaderValue::from_static("no-cache, max-age=0, must-revalidate"),
    );
    response
}
