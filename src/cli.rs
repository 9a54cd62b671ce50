//! Command-line interface: argument parsing, logging set-up, exit codes.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::ops::{EXIT_CONFIG, EXIT_UNAVAILABLE, runtime};
use crate::server::{Server, StartError};

#[derive(Parser)]
#[command(
    name = "provender",
    version,
    about = "A read-through caching mirror for Terraform and OpenTofu providers"
)]
struct Cli {
    /// Log line format on stderr: human-readable text, or one JSON object per line.
    #[arg(long, global = true, value_enum, env = "PROVENDER_LOG_FORMAT", default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the mirror server (built-in defaults when no config file is given).
    Serve {
        /// Configuration file (TOML); see config.toml.example.
        #[arg(long, short, env = "PROVENDER_CONFIG")]
        config: Option<PathBuf>,
    },
    #[command(flatten)]
    Ops(Box<crate::ops::OpsCommand>),
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve { config } => {
            init_logging("info", cli.log_format);
            serve(config)
        }
        Command::Ops(command) => {
            // Operator commands print their own summary; keep routine log lines out of it.
            init_logging("warn", cli.log_format);
            crate::ops::run(*command)
        }
    }
}

fn init_logging(default_level: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PROVENDER_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => logs.json().init(),
    }
}

fn serve(config_path: Option<PathBuf>) -> ExitCode {
    let settings = match crate::config::load(config_path.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("provender: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let setups = settings.clone();
    runtime.block_on(async move {
        let server = match Server::bind(settings).await {
            Ok(s) => s,
            Err(e @ StartError::Bind { .. }) => {
                eprintln!("provender: {e}");
                return ExitCode::from(EXIT_UNAVAILABLE);
            }
            Err(e @ StartError::Setup(_)) => {
                eprintln!("provender: {e}");
                return ExitCode::from(EXIT_CONFIG);
            }
        };
        announce(&server, &setups);
        match server.run(shutdown_signal()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("provender: {e:#}");
                ExitCode::FAILURE
            }
        }
    })
}

/// Logs where the mirror listens, then each client's set-up for it, once: the start page's
/// snippets (the CLI block, git's `insteadOf` and CA lines, the `.netrc` line, the installers'
/// base URL), one log line each.
fn announce(server: &Server, settings: &crate::config::Settings) {
    let url = server.base_url();
    tracing::info!(
        "provender {} listening on {} (mirror base URL {url})",
        env!("CARGO_PKG_VERSION"),
        server.local_addr()
    );
    let ca = server
        .ca_file()
        .map(|ca| std::path::absolute(ca).unwrap_or_else(|_| ca.clone()));
    let ca_shown = ca.as_ref().map(|ca| ca.display().to_string());
    for snippet in crate::server::site::snippets(settings, url, ca_shown.as_deref()) {
        tracing::info!(
            "client set-up: {}: {}\n\n{}",
            snippet.title,
            snippet.intro,
            snippet.text
        );
    }
    if let Some(ca) = ca_shown {
        tracing::info!(
            "client set-up: the server uses a self-signed certificate. Trust its CA, e.g.:\n\n  \
             export SSL_CERT_FILE={ca}\n\n(SSL_CERT_FILE replaces the system roots for the CLI; \
             to keep them, add the CA to the system trust store instead. Git reads its own \
             setting: see the git lines.)\n"
        );
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutdown requested");
}

#[cfg(test)]
mod tests {
    use crate::server::site::snippets;

    fn settings(more: &str) -> crate::config::Settings {
        let toml = format!("[cache]\ndir = \"/nonexistent/provender\"\n{more}");
        crate::config::Config::from_toml(&toml)
            .unwrap()
            .validate()
            .unwrap()
    }

    /// The set-ups `serve` logs at start, one per client, by title: text.
    fn set_ups(more: &str, ca: Option<&str>) -> Vec<(&'static str, String)> {
        let url = url::Url::parse("https://mirror.example.com/").unwrap();
        snippets(&settings(more), &url, ca)
            .into_iter()
            .map(|s| (s.title, s.text))
            .collect()
    }

    fn text_of(set_ups: &[(&'static str, String)], title: &str) -> Option<String> {
        set_ups
            .iter()
            .find(|(t, _)| t.contains(title))
            .map(|(_, text)| text.clone())
    }

    #[test]
    fn each_door_adds_its_clients_set_up() {
        // Only the CLI blocks when nothing else is on.
        let plain = set_ups("", None);
        assert!(text_of(&plain, "git").is_none());
        assert!(text_of(&plain, "Installers").is_none());
        assert!(text_of(&plain, "netrc").is_none());
        assert!(
            text_of(&plain, "Providers: Terraform")
                .unwrap()
                .contains("url = \"https://mirror.example.com/\"")
        );

        let doors = "[git]\nallowed_hosts = [\"github.com\"]\n\n[releases]\nenabled = true\n\n\
                     [auth]\ntokens = [\"a-token-of-at-least-thirty-two-chars\"]\n";
        let all = set_ups(doors, Some("/etc/provender/tls/ca.pem"));
        let git = text_of(&all, "git sources").unwrap();
        assert!(
            git.contains(
                "git config --global url.\"https://mirror.example.com/git/github.com/\".insteadOf \"https://github.com/\""
            ),
            "{git}"
        );
        // git reads neither SSL_CERT_FILE nor the CLI's settings: its own line, for this
        // server only.
        assert!(
            git.contains(
                "git config --global http.\"https://mirror.example.com/\".sslCAInfo /etc/provender/tls/ca.pem"
            ),
            "{git}"
        );
        assert!(
            git.contains("GIT_SSL_CAINFO=/etc/provender/tls/ca.pem"),
            "{git}"
        );
        let installers = text_of(&all, "Installers").unwrap();
        assert!(
            installers.starts_with("https://mirror.example.com/releases\n"),
            "{installers}"
        );
        let netrc = text_of(&all, "netrc").unwrap();
        assert_eq!(
            netrc,
            "machine mirror.example.com login token password <your token>\n"
        );

        // A certificate the operator gave: the CA lines are there to fill in, commented.
        let given = set_ups(doors, None);
        let git = text_of(&given, "git sources").unwrap();
        assert!(
            git.contains("# git config --global http.\"https://mirror.example.com/\".sslCAInfo /path/to/ca.pem"),
            "{git}"
        );
    }
}
