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
