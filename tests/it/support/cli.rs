//! The `provender` command line in tests: running the real binary (`provender`, its peak
//! memory), its configuration files and site keys, the operator commands most tests use
//! (`seed`, `import`, `export --bundle`, `ls --json`), and helpers to look at or tamper with
//! what they leave behind.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::TIMEOUT;
use super::pki::TestCa;
use super::provender::{REGISTRY, files_under};

/// A provender configuration file for a cache directory, reaching the origin at `origin`.
/// Every configuration in one `dir` shares one site key ([`site_key`]): exports sign bundles
/// with it and imports trust it, as two sites that exchanged public keys would.
pub fn config_file(
    dir: &Path,
    name: &str,
    cache: &Path,
    origin: SocketAddr,
    ca: &TestCa,
    extra: &str,
) -> PathBuf {
    let ca_file = ca.write_ca(dir);
    let (key_file, public) = site_key(dir);
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "[cache]\ndir = \"{}\"\n\n[upstream]\nallowed_hosts = [\"{REGISTRY}\"]\nca_file = \"{}\"\n{extra}\n\n[upstream.hosts.\"{REGISTRY}\"]\nconnect_to = \"{origin}\"\n\n[bundles]\nsigning_key_file = \"{}\"\ntrusted_keys = [\"{public}\"]\n",
            cache.display(),
            ca_file.display(),
            key_file.display(),
        ),
    )
    .unwrap();
    path
}

/// The site key of `dir` (`dir/site.key`, made with `provender keygen` on first use) and its
/// public key.
pub fn site_key(dir: &Path) -> (PathBuf, String) {
    let key = dir.join("site.key");
    if !key.exists() {
        let made = Command::new(env!("CARGO_BIN_EXE_provender"))
            .args(["keygen", "--output"])
            .arg(&key)
            .stdin(Stdio::null())
            .output()
            .expect("run provender keygen");
        assert!(made.status.success(), "keygen: {made:?}");
        let printed = String::from_utf8(made.stdout).unwrap();
        let public = std::fs::read_to_string(dir.join("site.key.pub")).unwrap();
        assert!(
            printed.contains(public.trim()),
            "keygen prints the public key: {printed}"
        );
    }
    let public = std::fs::read_to_string(dir.join("site.key.pub")).unwrap();
    (key, public.trim().to_string())
}

/// A configuration for an offline cache: the origin it names (a closed port) is never dialled.
pub fn sealed_config(dir: &Path, name: &str, cache: &Path, ca: &TestCa) -> PathBuf {
    let nowhere = "127.0.0.1:9".parse().unwrap();
    config_file(dir, name, cache, nowhere, ca, "offline = true")
}

/// What one `provender` command did.
pub struct Run {
    pub args: Vec<String>,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn ok(&self) -> &Run {
        assert_eq!(
            self.code,
            Some(0),
            "provender {:?} failed\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.args,
            self.stdout,
            self.stderr
        );
        self
    }

    pub fn fails(&self, code: i32) -> &Run {
        assert_eq!(
            self.code,
            Some(code),
            "provender {:?}: expected exit {code}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.args,
            self.stdout,
            self.stderr
        );
        self
    }

    pub fn out(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Runs the real `provender` binary without blocking the runtime (the origin keeps serving).
pub async fn provender(args: &[&str]) -> Run {
    let owned: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let argv = owned.clone();
    let output = tokio::time::timeout(
        TIMEOUT * 4,
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_provender"))
                .args(&argv)
                .env_clear()
                .env("PATH", std::env::var("PATH").unwrap_or_default())
                .stdin(Stdio::null())
                .output()
                .expect("run provender")
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("provender {owned:?} did not finish"))
    .expect("provender runner");
    Run {
        args: owned,
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Starts `argv` from a small process and reports its peak resident memory, in KiB, to the file
/// named first. Forking straight from the test process would not do: Linux carries a process's
/// memory high-water mark across `exec`, and a forked child starts with its parent's (the busy
/// test process's) resident set.
const PEAK_MEMORY_RUNNER: &str = r#"
import os, signal, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(str(usage.ru_maxrss))
if os.WIFSIGNALED(status):
    signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
    os.kill(os.getpid(), os.WTERMSIG(status))
sys.exit(os.WEXITSTATUS(status))
"#;

/// Runs the real `provender` binary like [`provender`], and also returns its peak resident
/// memory in bytes (from `wait4` on exactly that process, started by [`PEAK_MEMORY_RUNNER`]).
#[cfg(target_os = "linux")]
pub async fn provender_with_peak_memory(args: &[&str]) -> (Run, u64) {
    let owned: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let report = tempfile::NamedTempFile::new().expect("a file for the peak memory");
    let output = tokio::time::timeout(
        TIMEOUT * 4,
        tokio::process::Command::new("python3")
            .arg("-c")
            .arg(PEAK_MEMORY_RUNNER)
            .arg(report.path())
            .arg(env!("CARGO_BIN_EXE_provender"))
            .args(&owned)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("provender {owned:?} did not finish"))
    .expect("run provender under python3");
    let max_rss_kib: u64 = std::fs::read_to_string(report.path())
        .expect("the peak memory report")
        .trim()
        .parse()
        .expect("a number of KiB");
    let run = Run {
        args: owned,
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    (run, max_rss_kib * 1024)
}

/// `provender seed --config <cfg>` for each of `platforms` and of `providers`
/// (`SOURCE[@CONSTRAINT]`).
pub async fn seed(cfg: &str, platforms: &[&str], providers: &[&str]) -> Run {
    let mut args = vec!["seed", "--config", cfg];
    for p in platforms {
        args.extend(["--platform", p]);
    }
    for p in providers {
        args.extend(["--provider", p]);
    }
    provender(&args).await
}

/// The cached module versions `provender ls --json` lists, as `host/ns/name/system@version`
/// with each one's row.
pub async fn listed_modules(cfg: &str) -> Vec<(String, serde_json::Value)> {
    let ls = provender(&["ls", "--config", cfg, "--json"]).await;
    ls.ok();
    let rows: Vec<serde_json::Value> = serde_json::from_str(&ls.stdout).unwrap();
    rows.into_iter()
        .filter(|r| r["kind"] == "module")
        .map(|r| {
            let shown = format!(
                "{}@{}",
                r["module"].as_str().unwrap(),
                r["version"].as_str().unwrap()
            );
            (shown, r)
        })
        .collect()
}

/// `provender import --config <cfg> <source>`.
pub async fn import(cfg: &str, source: &Path) -> Run {
    provender(&["import", "--config", cfg, path_str(source)]).await
}

/// `provender import --config <cfg> --allow-unverified <source>`.
pub async fn import_unverified(cfg: &str, source: &Path) -> Run {
    provender(&[
        "import",
        "--config",
        cfg,
        "--allow-unverified",
        path_str(source),
    ])
    .await
}

/// `provender export --config <cfg> --bundle <bundle>`, which must succeed.
pub async fn export_bundle(cfg: &str, bundle: &Path) {
    provender(&["export", "--config", cfg, "--bundle", path_str(bundle)])
        .await
        .ok();
}

/// A temporary path as a command-line argument.
pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("temporary paths are UTF-8")
}

/// Every file under `dir` with its bytes: a snapshot to compare a cache before and after.
pub fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    files_under(dir)
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

/// The names of the `.zip` files under `dir`, sorted.
pub fn zips(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = files_under(dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "zip"))
        .map(|p| p.file_name().unwrap().to_string_lossy().to_string())
        .collect();
    names.sort();
    names
}

/// Rewrites the bundle's tar at `bundle` into `out`, changing the entry named `target` with `change`.
pub fn tamper(bundle: &Path, out: &Path, target: &str, change: impl Fn(&mut Vec<u8>)) {
    let mut archive = tar::Archive::new(std::fs::File::open(bundle).unwrap());
    let mut builder = tar::Builder::new(std::fs::File::create(out).unwrap());
    let mut found = false;
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().to_string_lossy().to_string();
        let mut body = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut body).unwrap();
        if path == target {
            change(&mut body);
            found = true;
        }
        let mut header = entry.header().clone();
        header.set_size(body.len() as u64);
        header.set_cksum();
        builder.append(&header, &body[..]).unwrap();
    }
    builder.finish().unwrap();
    assert!(found, "no entry {target} in the bundle");
}
