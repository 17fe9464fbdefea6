//! Starting and stopping the proxy: binds every address it answers on, starts the message engine, the
//! binlog watcher, the event-stream engine and the metrics endpoint, serves clients until SIGINT/SIGTERM,
//! then stops gracefully. The binary (src/main.rs) only reads the configuration and sets up logging.

use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::backend::Backend;
use crate::binlog::BinlogWatcher;
use crate::config::Config;
use crate::frontend::{Context, Listeners, Server};

/// Runs the proxy with `config` until a signal stops it; the exit code for the process.
pub async fn run(config: Config) -> std::process::ExitCode {
    let shutdown = CancellationToken::new();
    let backends = crate::cluster::Backends::new(config.backends.clone());
    let timeout = config.backend_connect_timeout;
    let listeners = match Listeners::bind(&config).await {
        Ok(l) => l,
        Err(e) => {
            error!(
                "cannot listen on {}{}: {e}",
                config.listen,
                match &config.listen_socket {
                    Some(path) => format!(" and {}", path.display()),
                    None => String::new(),
                }
            );
            return std::process::ExitCode::FAILURE;
        }
    };
    let mut local = listeners
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| config.listen.to_string());
    if let Some(path) = listeners.socket_path() {
        local = format!("{local} and {}", path.display());
    }
    // The metrics endpoint is bound now too (served once the engine is up): every address the
    // proxy answers on is taken before it touches the backend, and when the client port accepts
    // connections so does the metrics port.
    let metrics_listener = match config.metrics_listen {
        Some(addr) => match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => Some(listener),
            Err(e) => {
                error!("cannot serve metrics on {addr}: {e}");
                return std::process::ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let admin_listener = match &config.admin {
        Some(admin) => match tokio::net::TcpListener::bind(admin.listen).await {
            Ok(listener) => Some(listener),
            Err(e) => {
                error!("cannot serve the operator's page on {}: {e}", admin.listen);
                return std::process::ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let admin_tls = match (&config.admin, &config.tls) {
        (Some(admin), Some(tls)) if admin.tls => match crate::frontend::tls::acceptor(tls) {
            Ok(a) => Some(a),
            Err(e) => {
                error!("operator's page: {e}");
                return std::process::ExitCode::from(2);
            }
        },
        _ => None,
    };
    // With several servers: which one is writable decides where everything below goes, and it
    // follows when that changes (docs/CLUSTERS.md).
    backends.start_checks(shutdown.clone()).await;
    let backend = backends.current();
    let engine = crate::messaging::engine::Engine::start(&backends, shutdown.clone()).await;
    // Prompt delivery of rows written around the proxy; without binlog access it says why, once,
    // and the pollers carry on alone.
    let binlog = BinlogWatcher::start(backends.clone(), engine.clone(), shutdown.clone());
    // Event streams: groups are served on demand, each with a binlog reader of its own, on the
    // server in use; at a switch they move to the new one by GTID (docs/CLUSTERS.md).
    let stream_engine = crate::streams::engine::StreamEngine::start(
        &backends,
        &config.stream_groups_table,
        shutdown.clone(),
    );
    let mut ctx = match Context::new(
        config,
        shutdown.clone(),
        Some(engine.clone()),
        backends.clone(),
    ) {
        Ok(c) => c,
        Err(e) => {
            error!("{e}");
            return std::process::ExitCode::from(2);
        }
    };
    ctx.stream_engine = Some(stream_engine.clone());
    if let Some(listener) = metrics_listener {
        let registry = crate::metrics::Registry {
            streams: Some(stream_engine.clone()),
            backends: Some(backends.clone()),
            proxy: ctx.metrics.clone(),
            engine: Some(engine),
            binlog: Some(crate::metrics::BinlogView {
                status: binlog.subscribe(),
                activity: binlog.activity(),
            }),
        };
        if let Ok(shown) = listener.local_addr() {
            info!("Prometheus metrics at http://{shown}/metrics");
        }
        tokio::spawn(crate::metrics::http::serve(
            listener,
            std::sync::Arc::new(registry),
            shutdown.clone(),
        ));
    }
    if let (Some(listener), Some(settings)) = (admin_listener, ctx.config.admin.clone()) {
        let admin = crate::admin::Admin::new(
            settings.clone(),
            ctx.config.users.clone(),
            ctx.engine.clone(),
            Some(stream_engine.clone()),
            Some(crate::metrics::BinlogView {
                status: binlog.subscribe(),
                activity: binlog.activity(),
            }),
            ctx.metrics.clone(),
        );
        if let Ok(shown) = listener.local_addr() {
            let scheme = if admin_tls.is_some() { "https" } else { "http" };
            info!(
                "operator's page at {scheme}://{shown}/ (actions {})",
                if settings.actions_allowed() {
                    "on"
                } else {
                    "off: not loopback, not TLS"
                }
            );
        }
        tokio::spawn(crate::admin::serve(
            listener,
            std::sync::Arc::new(admin),
            admin_tls,
            shutdown.clone(),
        ));
    }
    let spares = ctx.spares.clone();
    let server = Server::new(listeners, ctx);
    match Backend::connect(&backend, timeout).await {
        Ok(mut b) => {
            b.generation = backends.generation();
            info!(
                "msgproxy listening on {local}, backend {} (server version {})",
                backend.redacted(),
                String::from_utf8_lossy(&b.greeting.server_version)
            );
            // Not logged in: it greets the first client (frontend::spares).
            spares.give_back(crate::frontend::spares::Fresh::new(b));
        }
        Err(e) => warn!(
            "msgproxy listening on {local}, backend {} not reachable yet ({e}); clients get error 1429 until it is",
            backend.redacted()
        ),
    }
    tokio::spawn(stop_on_signal(shutdown));
    server.run().await;
    binlog.stopped(std::time::Duration::from_secs(2)).await;
    stream_engine
        .stopped(std::time::Duration::from_secs(2))
        .await;
    info!("msgproxy stopped");
    std::process::ExitCode::SUCCESS
}

async fn stop_on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    warn!("cannot watch SIGTERM: {e}");
                    let _ = ctrl_c.await;
                    shutdown.cancel();
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => info!("SIGINT received, shutting down"),
            _ = term.recv() => info!("SIGTERM received, shutting down"),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
    shutdown.cancel();
}
