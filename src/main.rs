//! The msgproxy binary: parse the configuration, set up logging, start the server, and stop
//! gracefully on SIGINT/SIGTERM.

use clap::Parser;
use tracing::error;

use msgproxy::config::{Cli, Config};

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal: a log file or journald gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MSGPROXY_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let config = match Config::from_cli(Cli::parse()) {
        Ok(c) => c,
        Err(e) => {
            error!("{e}");
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.threads)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            error!("cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    runtime.block_on(msgproxy::app::run(config))
}
