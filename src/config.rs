//! Configuration: command-line flags, `MSGPROXY_*` environment variables, and an optional strict
//! TOML file. Precedence: flag or environment variable, then the file, then the default.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use serde::Deserialize;

use crate::protocol::auth;

pub const DEFAULT_LISTEN: &str = "127.0.0.1:3307";
pub const DEFAULT_BACKEND: &str = "mysql://root@127.0.0.1:3306/test";
pub const DEFAULT_MAX_CONNECTIONS: usize = 1000;

/// msgproxy: a MySQL-protocol proxy that turns message tables into durable queues.
#[derive(Debug, Parser)]
#[command(name = "msgproxy", version, about, long_about = None)]
pub struct Cli {
    /// Address to listen on for MySQL clients [default: 127.0.0.1:3307]
    #[arg(long, env = "MSGPROXY_LISTEN", value_name = "ADDR")]
    pub listen: Option<SocketAddr>,

    /// Also accept clients on this Unix socket (as `mysql -S PATH`, or `localhost` in PHP and
    /// libmariadb clients); it is created on start and removed on shutdown [default: none]
    #[arg(long, env = "MSGPROXY_LISTEN_SOCKET", value_name = "PATH")]
    pub listen_socket: Option<PathBuf>,

    /// Backend server and the credentials the proxy uses there, as
    /// mysql://user:password@host:port/database, or over the server's Unix socket as
    /// mysql://user:password@localhost/database?socket=/path/to/mysqld.sock; several servers
    /// (Galera nodes, or a primary and its replicas) comma-separated: msgproxy uses the first
    /// writable one (docs/CLUSTERS.md) [default: mysql://root@127.0.0.1:3306/test]
    #[arg(long, env = "MSGPROXY_BACKEND", value_name = "URL")]
    pub backend: Option<String>,

    /// Optional TOML file with users, TLS and the settings above (unknown keys are errors)
    #[arg(long, env = "MSGPROXY_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Most client connections served at once; more get error 1040 [default: 1000]
    #[arg(long, env = "MSGPROXY_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,

    /// PEM certificate chain for client TLS (needs --tls-key) [default: no TLS]
    #[arg(long, env = "MSGPROXY_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key for client TLS [default: no TLS]
    #[arg(long, env = "MSGPROXY_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,

    /// Refuse clients that do not use TLS (error 3159) [default: false]
    #[arg(long, env = "MSGPROXY_REQUIRE_TLS")]
    pub require_tls: bool,

    /// Worker threads [default: one per CPU]
    #[arg(long, env = "MSGPROXY_THREADS", value_name = "N")]
    pub threads: Option<usize>,
    /// Serve Prometheus metrics over HTTP at http://ADDR/metrics (no authentication: bind it
    /// where only the scraper can reach it) [default: off]
    #[arg(long, env = "MSGPROXY_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// msgproxy's own table of event-stream groups (progress and leases), `table` in the
    /// backend URL's database or `db.table`; created if missing [default: msgproxy_stream_groups]
    #[arg(long, env = "MSGPROXY_STREAM_GROUPS_TABLE", value_name = "NAME")]
    pub stream_groups_table: Option<String>,
    /// Serve the operator's page (tables, streams, dead letters, actions) over HTTP at
    /// http://ADDR/ (docs/OPERATOR.md) [default: off]
    #[arg(long, env = "MSGPROXY_ADMIN_LISTEN", value_name = "ADDR")]
    pub admin_listen: Option<SocketAddr>,
    /// A secret that logs in to the operator's page (HTTP Basic password, any user name, or
    /// `Authorization: Bearer TOKEN`) besides the proxy's users [default: none]
    #[arg(long, env = "MSGPROXY_ADMIN_TOKEN", value_name = "TOKEN")]
    pub admin_token: Option<String>,
    /// Show the operator's page (read-only) without logging in; actions still need a login
    /// [default: false]
    #[arg(long, env = "MSGPROXY_ADMIN_PUBLIC_READ")]
    pub admin_public_read: bool,
    /// Serve the operator's page over HTTPS with the client TLS certificate and key
    /// (--tls-cert, --tls-key) [default: false]
    #[arg(long, env = "MSGPROXY_ADMIN_TLS")]
    pub admin_tls: bool,
    /// Allow actions (REDRIVE, SEEK) on an --admin-listen address that is not loopback without
    /// --admin-tls: passwords and tokens then cross the network in clear [default: false]
    #[arg(long, env = "MSGPROXY_ADMIN_ALLOW_INSECURE_ACTIONS")]
    pub admin_allow_insecure_actions: bool,
    /// Warm backend connections kept for the next clients (reset when a client leaves cleanly;
    /// docs/POOL.md); 0 turns the pool off [default: 0]
    #[arg(long, env = "MSGPROXY_POOL_SIZE", value_name = "N")]
    pub pool_size: Option<usize>,
    /// Seconds a warm backend connection is kept unused before it is closed [default: 60]
    #[arg(long, env = "MSGPROXY_POOL_IDLE_LIFETIME", value_name = "SECONDS")]
    pub pool_idle_lifetime: Option<f64>,
}

/// The optional configuration file. Every key is optional; unknown keys are errors so that a typo
/// never silently falls back to a default.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Address to listen on for MySQL clients.
    pub listen: Option<SocketAddr>,
    /// A Unix socket to accept clients on as well, as `--listen-socket`.
    pub listen_socket: Option<PathBuf>,
    /// Backend URL, as `--backend` (comma-separated URLs for several servers), or a list of
    /// URLs.
    pub backend: Option<BackendSetting>,
    /// Most client connections served at once.
    pub max_connections: Option<usize>,
    /// Worker threads.
    pub threads: Option<usize>,
    /// Seconds the proxy waits to reach the backend before telling the client it cannot.
    pub backend_connect_timeout: Option<f64>,
    /// Seconds a client may pause in the middle of sending a packet (the server's
    /// `net_read_timeout`).
    pub net_read_timeout: Option<f64>,
    /// Seconds a client has to finish the handshake.
    pub handshake_timeout: Option<f64>,
    /// The users clients log in as. The proxy checks their passwords itself.
    #[serde(default)]
    pub users: Vec<UserConfig>,
    /// TLS for client connections.
    pub tls: Option<TlsConfig>,
    /// Address of the Prometheus endpoint (`GET /metrics`), as `--metrics-listen`.
    pub metrics_listen: Option<SocketAddr>,
    /// The event-stream groups' table, as `--stream-groups-table`.
    pub stream_groups_table: Option<String>,
    /// Warm backend connections kept, as `--pool-size` (0: no pool).
    pub pool_size: Option<usize>,
    /// Seconds a warm connection is kept unused, as `--pool-idle-lifetime`.
    pub pool_idle_lifetime: Option<f64>,
    /// The operator's page, as the `--admin-*` flags.
    pub admin: Option<AdminFileConfig>,
}

/// `[admin]`: the operator's page (docs/OPERATOR.md).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminFileConfig {
    /// Address of the page, as `--admin-listen`.
    pub listen: Option<SocketAddr>,
    /// A login secret besides the proxy's users, as `--admin-token`.
    pub token: Option<String>,
    /// The read-only page without a login, as `--admin-public-read`.
    #[serde(default)]
    pub public_read: bool,
    /// HTTPS with the client TLS certificate, as `--admin-tls`.
    #[serde(default)]
    pub tls: bool,
    /// Actions off loopback without TLS, as `--admin-allow-insecure-actions`.
    #[serde(default)]
    pub allow_insecure_actions: bool,
}

/// The operator's page, resolved.
#[derive(Clone)]
pub struct AdminSettings {
    pub listen: SocketAddr,
    pub token: Option<String>,
    pub public_read: bool,
    pub tls: bool,
    pub allow_insecure_actions: bool,
}

impl std::fmt::Debug for AdminSettings {
    // By hand, so the token never reaches a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminSettings")
            .field("listen", &self.listen)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("public_read", &self.public_read)
            .field("tls", &self.tls)
            .field("allow_insecure_actions", &self.allow_insecure_actions)
            .finish()
    }
}

impl AdminSettings {
    /// Whether actions may run on this listener: loopback, TLS, or the explicit flag.
    pub fn actions_allowed(&self) -> bool {
        self.listen.ip().is_loopback() || self.tls || self.allow_insecure_actions
    }
}

/// `backend` in the file: one string (URLs comma-separated, as `--backend`) or a list of URLs.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum BackendSetting {
    One(String),
    Several(Vec<String>),
}

impl BackendSetting {
    fn urls(self) -> Vec<String> {
        match self {
            BackendSetting::One(s) => split_urls(&s),
            BackendSetting::Several(list) => list.iter().flat_map(|s| split_urls(s)).collect(),
        }
    }
}

/// The URLs of a `--backend` value: comma-separated, blanks around them ignored. (A comma in a
/// password is written `%2C`, as any reserved character of a URL.)
fn split_urls(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// One user of the proxy. Give `password`, or `password_hash` (the `*HEX` form of
/// `mysql_native_password`, as `SELECT PASSWORD('...')` prints it).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    pub name: String,
    pub password: Option<String>,
    pub password_hash: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// Refuse clients that do not use TLS.
    #[serde(default)]
    pub require: bool,
}

/// Where the backend is and how the proxy logs in there.
#[derive(Clone, PartialEq, Eq)]
pub struct BackendTarget {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    pub database: Option<String>,
    /// The server's Unix socket (`?socket=/path` in the URL). When set, the proxy connects
    /// through it instead of TCP: on the server's own host it costs the kernel far less per
    /// round trip than loopback TCP. `host` and `port` are then only names for the logs.
    pub socket: Option<std::path::PathBuf>,
    /// TLS to the server (`?ssl-mode=...&ssl-ca=...`; `crate::backend_tls`).
    pub tls: crate::backend_tls::BackendTls,
}

impl std::fmt::Debug for BackendTarget {
    // Written by hand so the password never reaches a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.redacted())
    }
}

impl BackendTarget {
    /// The URL with the password masked, for logs and errors.
    pub fn redacted(&self) -> String {
        let pw = if self.password.is_empty() { "" } else { ":***" };
        let mut params = Vec::new();
        if let Some(s) = &self.socket {
            params.push(format!("socket={}", s.display()));
        }
        if self.tls.mode != crate::backend_tls::SslMode::Disabled {
            params.push(format!("ssl-mode={}", self.tls.mode.name()));
        }
        if let Some(ca) = &self.tls.ca {
            params.push(format!("ssl-ca={}", ca.display()));
        }
        let socket = if params.is_empty() {
            String::new()
        } else {
            format!("?{}", params.join("&"))
        };
        format!(
            "mysql://{}{}@{}:{}/{}{socket}",
            self.user,
            pw,
            self.host,
            self.port,
            self.database.as_deref().unwrap_or("")
        )
    }

    /// Where the proxy connects, for errors and logs: the socket's path, or host:port.
    pub fn address(&self) -> String {
        if let Some(socket) = &self.socket {
            socket.display().to_string()
        } else if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    pub fn parse(url: &str) -> Result<BackendTarget, ConfigError> {
        let bad = |why: &str| {
            ConfigError::BackendUrl(format!(
                "{why} (expected mysql://user:password@host:port/database, or \
                 mysql://user:password@localhost/database?socket=/path/to/mysqld.sock)"
            ))
        };
        let u = url::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
        if u.scheme() != "mysql" && u.scheme() != "mariadb" {
            return Err(bad(&format!("unsupported scheme '{}'", u.scheme())));
        }
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        let host = u.host_str().ok_or_else(|| bad("no host"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let user = if u.username().is_empty() {
            "root".to_string()
        } else {
            decode(u.username())
        };
        let database = Some(decode(u.path().trim_start_matches('/'))).filter(|d| !d.is_empty());
        let mut socket = None;
        let mut ssl_mode = crate::backend_tls::SslMode::Disabled;
        let mut ssl_ca = None;
        for (name, value) in u.query_pairs() {
            match &*name {
                "socket" if !value.is_empty() => socket = Some(value.into_owned().into()),
                "socket" => return Err(bad("socket= needs the path of the server's socket")),
                "ssl-mode" | "ssl_mode" | "sslmode" => {
                    ssl_mode = crate::backend_tls::SslMode::parse(&value).ok_or_else(|| {
                        bad(&format!(
                            "ssl-mode={value}: use DISABLED, PREFERRED, REQUIRED, VERIFY_CA or VERIFY_IDENTITY"
                        ))
                    })?
                }
                "ssl-ca" | "ssl_ca" if !value.is_empty() => {
                    ssl_ca = Some(std::path::PathBuf::from(value.into_owned()))
                }
                "ssl-ca" | "ssl_ca" => return Err(bad("ssl-ca= needs the path of a PEM file")),
                other => return Err(bad(&format!("unknown parameter '{other}'"))),
            }
        }
        if socket.is_some() && ssl_mode.required() {
            return Err(bad(&format!(
                "ssl-mode={} with socket=: a Unix socket never leaves the host; drop ssl-mode",
                ssl_mode.name()
            )));
        }
        let tls = crate::backend_tls::BackendTls::new(ssl_mode, ssl_ca).map_err(|e| bad(&e))?;
        Ok(BackendTarget {
            host,
            port: u.port().unwrap_or(3306),
            user,
            password: u.password().map(decode).unwrap_or_default(),
            database,
            socket,
            tls,
        })
    }

    /// Connection options for mysql_async (the engine's pool and the binlog watcher): the same
    /// server, credentials, database and transport as the client sessions' connections.
    pub fn mysql_async_opts(&self) -> mysql_async::OptsBuilder {
        mysql_async::OptsBuilder::default()
            .ip_or_hostname(self.host.clone())
            .tcp_port(self.port)
            .socket(self.socket.as_ref().map(|s| s.display().to_string()))
            .user(Some(self.user.clone()))
            .pass(Some(self.password.clone()).filter(|p| !p.is_empty()))
            .db_name(self.database.clone())
            .ssl_opts(self.tls.mysql_async_opts())
    }
}

/// A user the proxy accepts.
#[derive(Clone)]
pub struct User {
    pub name: String,
    pub secret: Secret,
}

/// How a user's password is known.
#[derive(Clone)]
pub enum Secret {
    /// The password itself: every plugin can be checked.
    Plain(Vec<u8>),
    /// SHA1(SHA1(password)): only `mysql_native_password` can be checked.
    NativeHash([u8; 20]),
}

impl std::fmt::Debug for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("User")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// TLS settings, resolved.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The resolved configuration the server runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// A Unix socket to accept clients on as well.
    pub listen_socket: Option<PathBuf>,
    /// The first of `backends`: where the proxy goes while it knows nothing else.
    pub backend: BackendTarget,
    /// Every server named by `--backend`, in order (`crate::cluster` picks the writable one).
    pub backends: Vec<BackendTarget>,
    pub max_connections: usize,
    /// Worker threads of the async runtime.
    pub threads: usize,
    pub backend_connect_timeout: Duration,
    pub handshake_timeout: Duration,
    /// Longest pause in the middle of a client's packet before the session is closed.
    pub net_read_timeout: Duration,
    /// Empty means "root with an empty password", allowed only on a loopback address.
    pub users: Vec<User>,
    pub tls: Option<TlsSettings>,
    pub require_tls: bool,
    /// Where to serve Prometheus metrics; `None`: not served.
    pub metrics_listen: Option<SocketAddr>,
    /// msgproxy's own table of event-stream groups (`table` or `db.table`).
    pub stream_groups_table: String,
    /// The operator's page; `None`: not served.
    pub admin: Option<AdminSettings>,
    /// Most warm backend connections kept idle (`frontend::pool`); 0: no pool.
    pub pool_size: usize,
    /// How long a warm connection is kept unused.
    pub pool_idle_lifetime: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid backend URL: {0}")]
    BackendUrl(String),
    #[error("{0}")]
    Invalid(String),
}

/// One per CPU. On the 2-CPU bench machine, idle, two workers matched one worker's added
/// latency at one connection and relayed 10 % more at 32; while other work kept the CPUs busy,
/// one worker added less latency (fewer cross-thread wake-ups per request). So the default is
/// the throughput one, and `--threads` is there for latency-sensitive deployments on busy
/// machines (docs/benchmarks-history.md, first round).
fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .max(1)
}

impl Config {
    pub fn from_cli(cli: Cli) -> Result<Config, ConfigError> {
        let file = match &cli.config {
            Some(path) => load_file(path)?,
            None => FileConfig::default(),
        };
        Config::merge(cli, file)
    }

    pub fn merge(cli: Cli, file: FileConfig) -> Result<Config, ConfigError> {
        let cli_admin = AdminFileConfig {
            listen: cli.admin_listen,
            token: cli.admin_token.clone(),
            public_read: cli.admin_public_read,
            tls: cli.admin_tls,
            allow_insecure_actions: cli.admin_allow_insecure_actions,
        };
        let listen = cli
            .listen
            .or(file.listen)
            .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("the default address parses"));
        let urls = match cli.backend {
            Some(value) => split_urls(&value),
            None => file.backend.map(BackendSetting::urls).unwrap_or_default(),
        };
        let urls = if urls.is_empty() {
            vec![DEFAULT_BACKEND.to_owned()]
        } else {
            urls
        };
        let backends = urls
            .iter()
            .map(|url| BackendTarget::parse(url))
            .collect::<Result<Vec<_>, _>>()?;
        for (i, b) in backends.iter().enumerate() {
            if backends[..i].iter().any(|a| a.address() == b.address()) {
                return Err(ConfigError::BackendUrl(format!(
                    "{} is named twice in the backend list; name each server once",
                    b.address()
                )));
            }
        }
        let backend = backends[0].clone();
        let users = file
            .users
            .into_iter()
            .map(resolve_user)
            .collect::<Result<Vec<_>, _>>()?;
        if users.is_empty() && !listen.ip().is_loopback() {
            return Err(ConfigError::Invalid(format!(
                "refusing to listen on {listen} without users: with no users configured msgproxy \
                 accepts root with an empty password, which is only safe on a loopback address. \
                 Add users to a config file given with --config, e.g.\n\n  [[users]]\n  name = \"app\"\n  password = \"a-long-secret\"\n\nor listen on 127.0.0.1"
            )));
        }
        let (tls_cert, tls_key, file_require) = match file.tls {
            Some(t) => (Some(t.cert), Some(t.key), t.require),
            None => (None, None, false),
        };
        let cert = cli.tls_cert.or(tls_cert);
        let key = cli.tls_key.or(tls_key);
        let tls = match (cert, key) {
            (Some(cert), Some(key)) => Some(TlsSettings { cert, key }),
            (None, None) => None,
            _ => return Err(ConfigError::Invalid("TLS needs both a certificate and a key (--tls-cert and --tls-key, or [tls] cert and key)".into())),
        };
        let require_tls = cli.require_tls || file_require;
        if require_tls && tls.is_none() {
            return Err(ConfigError::Invalid(
                "require_tls is set but no TLS certificate and key are configured".into(),
            ));
        }
        let seconds = |v: Option<f64>, default: f64, name: &str| -> Result<Duration, ConfigError> {
            let v = v.unwrap_or(default);
            Duration::try_from_secs_f64(v)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    ConfigError::Invalid(format!(
                        "{name} must be a positive number of seconds, not {v}"
                    ))
                })
        };
        let max_connections = cli
            .max_connections
            .or(file.max_connections)
            .unwrap_or(DEFAULT_MAX_CONNECTIONS);
        if max_connections == 0 {
            return Err(ConfigError::Invalid(
                "max_connections must be at least 1".into(),
            ));
        }
        let threads = cli.threads.or(file.threads).unwrap_or_else(default_threads);
        // Absolute, because `@@socket` names it to clients, which resolve it from their own
        // working directory.
        let listen_socket = match cli.listen_socket.or(file.listen_socket) {
            Some(path) => Some(std::path::absolute(&path).map_err(|e| {
                ConfigError::Invalid(format!("listen_socket {}: {e}", path.display()))
            })?),
            None => None,
        };
        if threads == 0 {
            return Err(ConfigError::Invalid("threads must be at least 1".into()));
        }
        let admin = resolve_admin(&cli_admin, file.admin.unwrap_or_default(), &users, &tls)?;
        Ok(Config {
            listen,
            listen_socket,
            backend,
            backends,
            max_connections,
            threads,
            backend_connect_timeout: seconds(
                file.backend_connect_timeout,
                10.0,
                "backend_connect_timeout",
            )?,
            handshake_timeout: seconds(file.handshake_timeout, 10.0, "handshake_timeout")?,
            net_read_timeout: seconds(file.net_read_timeout, 30.0, "net_read_timeout")?,
            users,
            tls,
            require_tls,
            metrics_listen: cli.metrics_listen.or(file.metrics_listen),
            stream_groups_table: groups_table(
                cli.stream_groups_table
                    .or(file.stream_groups_table)
                    .unwrap_or_else(|| "msgproxy_stream_groups".to_owned()),
            )?,
            admin,
            pool_size: cli.pool_size.or(file.pool_size).unwrap_or(0),
            pool_idle_lifetime: seconds(
                cli.pool_idle_lifetime.or(file.pool_idle_lifetime),
                60.0,
                "pool_idle_lifetime",
            )?,
        })
    }
}

/// The longest table name MariaDB and MySQL take.
const MAX_TABLE_NAME: usize = 64;
/// What the stream-group requests table appends to the groups table's name
/// (`streams::requests::table_for`).
const REQUESTS_SUFFIX: &str = "_requests";

/// The groups table's name (`table` or `db.table`), refused at start when the requests table
/// named after it would be too long for the server (it is created later, on first use).
fn groups_table(name: String) -> Result<String, ConfigError> {
    let table = name.split_once('.').map_or(name.as_str(), |(_, t)| t);
    let longest = MAX_TABLE_NAME - REQUESTS_SUFFIX.len();
    if table.is_empty() || table.chars().count() > longest {
        return Err(ConfigError::Invalid(format!(
            "stream_groups_table '{name}': the table name must have 1 to {longest} characters (msgproxy creates a second table named after it with '{REQUESTS_SUFFIX}' appended, and table names have at most {MAX_TABLE_NAME})"
        )));
    }
    Ok(name)
}

/// The `--admin-*` flags over `[admin]`. Refuses a page nobody could log in to safely: off
/// loopback it needs configured users or a token (without users the proxy accepts root with an
/// empty password, as on its MySQL port).
fn resolve_admin(
    cli: &AdminFileConfig,
    file: AdminFileConfig,
    users: &[User],
    tls: &Option<TlsSettings>,
) -> Result<Option<AdminSettings>, ConfigError> {
    let Some(listen) = cli.listen.or(file.listen) else {
        return Ok(None);
    };
    let token = cli.token.clone().or(file.token);
    if token.as_deref().is_some_and(|t| t.len() < 16) {
        return Err(ConfigError::Invalid(
            "admin token must be at least 16 characters (e.g. openssl rand -hex 16)".into(),
        ));
    }
    let settings = AdminSettings {
        listen,
        token,
        public_read: cli.public_read || file.public_read,
        tls: cli.tls || file.tls,
        allow_insecure_actions: cli.allow_insecure_actions || file.allow_insecure_actions,
    };
    if settings.tls && tls.is_none() {
        return Err(ConfigError::Invalid(
            "admin TLS (--admin-tls) uses the client TLS certificate: give --tls-cert and --tls-key too".into(),
        ));
    }
    if !listen.ip().is_loopback() && users.is_empty() && settings.token.is_none() {
        return Err(ConfigError::Invalid(format!(
            "refusing to serve the operator's page on {listen} without users or --admin-token: \
             with no users msgproxy accepts root with an empty password, which is only safe on a \
             loopback address"
        )));
    }
    Ok(Some(settings))
}

fn load_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.into(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.into(),
        message: parse_error_message(&text, &e),
    })
}

/// A TOML error without the file's text: toml's own message quotes the offending line, which
/// may hold a password (an unterminated string, say), and the message goes to the log. Only
/// the position is given, and on a line that sets a password not even the parser's message
/// (it may quote the value).
fn parse_error_message(text: &str, e: &toml::de::Error) -> String {
    let Some(span) = e.span() else {
        return e.message().to_string();
    };
    let before = text.get(..span.start).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    let line_text = text.lines().nth(line - 1).unwrap_or_default();
    let secret = line_text.trim_start().starts_with("password");
    let message = if secret {
        "invalid password or password_hash value (not shown)"
    } else {
        e.message()
    };
    format!("line {line}, column {column}: {}", message.trim_end())
}

fn resolve_user(u: UserConfig) -> Result<User, ConfigError> {
    if u.name.is_empty() {
        return Err(ConfigError::Invalid(
            "a [[users]] entry has an empty name".into(),
        ));
    }
    let secret = match (u.password, u.password_hash) {
        (Some(p), None) => Secret::Plain(p.into_bytes()),
        (None, Some(h)) => Secret::NativeHash(auth::parse_native_hash(&h).ok_or_else(|| {
            ConfigError::Invalid(format!(
                "user '{}': password_hash must be '*' followed by 40 hex digits (as SELECT PASSWORD('...') prints it)",
                u.name
            ))
        })?),
        (None, None) => Secret::Plain(Vec::new()),
        (Some(_), Some(_)) => {
            return Err(ConfigError::Invalid(format!("user '{}': give password or password_hash, not both", u.name)))
        }
    };
    Ok(User {
        name: u.name,
        secret,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        let mut v = vec!["msgproxy"];
        v.extend_from_slice(args);
        Cli::try_parse_from(v).unwrap()
    }

    #[test]
    fn a_groups_table_name_leaves_room_for_its_requests_table() {
        let ok = "g".repeat(55);
        let c = Config::merge(
            cli(&["--stream-groups-table", &format!("db.{ok}")]),
            FileConfig::default(),
        )
        .unwrap();
        assert_eq!(c.stream_groups_table, format!("db.{ok}"));
        let long = "g".repeat(56);
        let e = Config::merge(
            cli(&["--stream-groups-table", &long]),
            FileConfig::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("1 to 55 characters"), "{e}");
        assert!(Config::merge(
            cli(&["--stream-groups-table", "db."]),
            FileConfig::default()
        )
        .is_err());
    }

    #[test]
    fn defaults() {
        let c = Config::merge(cli(&[]), FileConfig::default()).unwrap();
        assert_eq!(c.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!(c.backend.host, "127.0.0.1");
        assert_eq!(c.backend.port, 3306);
        assert_eq!(c.backend.user, "root");
        assert_eq!(c.backend.database.as_deref(), Some("test"));
    }

    #[test]
    fn several_backends_from_the_flag_and_the_file() {
        let c = Config::merge(
            cli(&["--backend", "mysql://a@n1:3306/db, mysql://a@n2:3307/db,"]),
            FileConfig::default(),
        )
        .unwrap();
        let addresses: Vec<_> = c.backends.iter().map(|b| b.address()).collect();
        assert_eq!(addresses, ["n1:3306", "n2:3307"]);
        assert_eq!(c.backend.address(), "n1:3306");
        // The file: a list, or one string with commas; the flag wins over the file.
        for text in [
            "backend = [\"mysql://a@n1/db\", \"mysql://a@n2/db\", \"mysql://a@n3/db\"]",
            "backend = \"mysql://a@n1/db,mysql://a@n2/db,mysql://a@n3/db\"",
        ] {
            let f: FileConfig = toml::from_str(text).unwrap();
            let c = Config::merge(cli(&[]), f).unwrap();
            assert_eq!(c.backends.len(), 3, "{text}");
            let f: FileConfig = toml::from_str(text).unwrap();
            let c = Config::merge(cli(&["--backend", "mysql://a@x/db"]), f).unwrap();
            assert_eq!(c.backends.len(), 1, "{text}");
        }
        // One server named twice is a mistake, said as such.
        let err = Config::merge(
            cli(&["--backend", "mysql://a@n1/db,mysql://b@n1:3306/db"]),
            FileConfig::default(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("named twice"), "{err}");
        // One bad URL in the list is an error, not skipped.
        assert!(Config::merge(
            cli(&["--backend", "mysql://a@n1/db,postgres://n2/db"]),
            FileConfig::default()
        )
        .is_err());
    }

    #[test]
    fn backend_url_with_password_is_decoded_and_redacted() {
        let b = BackendTarget::parse("mysql://app:p%40ss@db.example:3310/shop").unwrap();
        assert_eq!(
            (b.user.as_str(), b.password.as_str(), b.port),
            ("app", "p@ss", 3310)
        );
        assert!(!format!("{b:?}").contains("p@ss"));
        assert!(b.redacted().contains(":***@"));
        assert!(BackendTarget::parse("postgres://x@y/z").is_err());
    }

    #[test]
    fn backend_url_with_socket() {
        let b =
            BackendTarget::parse("mysql://app:pw@localhost/shop?socket=/run/mysqld/mysqld.sock")
                .unwrap();
        assert_eq!(
            b.socket.as_deref(),
            Some(std::path::Path::new("/run/mysqld/mysqld.sock"))
        );
        assert_eq!(b.address(), "/run/mysqld/mysqld.sock");
        assert_eq!(
            b.redacted(),
            "mysql://app:***@localhost:3306/shop?socket=/run/mysqld/mysqld.sock"
        );
        // Percent-encoded paths decode; a typo in a parameter is an error, not ignored.
        let b =
            BackendTarget::parse("mysql://app@localhost/?socket=%2Ftmp%2Fmy%20db.sock").unwrap();
        assert_eq!(b.address(), "/tmp/my db.sock");
        let err = BackendTarget::parse("mysql://app@localhost/shop?sockt=/x").unwrap_err();
        assert!(
            err.to_string().contains("unknown parameter 'sockt'"),
            "{err}"
        );
        assert!(BackendTarget::parse("mysql://app@localhost/shop?socket=").is_err());
        assert_eq!(
            BackendTarget::parse("mysql://app@h/shop").unwrap().socket,
            None
        );
    }

    #[test]
    fn backend_url_with_tls() {
        use crate::backend_tls::SslMode;
        let b = BackendTarget::parse("mysql://app@db.example/shop?ssl-mode=required").unwrap();
        assert_eq!((b.tls.mode, b.tls.ca.as_deref()), (SslMode::Required, None));
        assert!(b.tls.config().is_some() && b.tls.mysql_async_opts().is_some());
        assert_eq!(
            b.redacted(),
            "mysql://app@db.example:3306/shop?ssl-mode=REQUIRED"
        );
        assert_eq!(
            BackendTarget::parse("mysql://app@h/shop").unwrap().tls.mode,
            SslMode::Disabled
        );
        let preferred = BackendTarget::parse("mysql://app@h/shop?ssl-mode=PREFERRED").unwrap();
        assert!(preferred.tls.config().is_some() && preferred.tls.mysql_async_opts().is_none());
        for (url, says) in [
            ("mysql://app@h/shop?ssl-mode=on", "ssl-mode=on"),
            (
                "mysql://app@h/shop?ssl-mode=VERIFY_IDENTITY",
                "needs ssl-ca",
            ),
            (
                "mysql://app@h/shop?ssl-mode=VERIFY_CA&ssl-ca=/no/such.pem",
                "/no/such.pem",
            ),
            ("mysql://app@h/shop?ssl-ca=", "ssl-ca= needs"),
            (
                "mysql://app@localhost/shop?socket=/run/m.sock&ssl-mode=REQUIRED",
                "drop ssl-mode",
            ),
        ] {
            let err = BackendTarget::parse(url).unwrap_err().to_string();
            assert!(err.contains(says), "{url}: {err}");
        }
    }

    #[test]
    fn refuses_public_address_without_users() {
        let err =
            Config::merge(cli(&["--listen", "0.0.0.0:3307"]), FileConfig::default()).unwrap_err();
        assert!(err.to_string().contains("[[users]]"), "{err}");
    }

    #[test]
    fn file_is_strict() {
        let err = toml::from_str::<FileConfig>("listen = \"127.0.0.1:1\"\nlisen = 1").unwrap_err();
        assert!(err.to_string().contains("lisen"));
        let f: FileConfig =
            toml::from_str("[[users]]\nname = \"app\"\npassword = \"pw\"\n").unwrap();
        let c = Config::merge(cli(&["--listen", "0.0.0.0:1"]), f).unwrap();
        assert_eq!(c.users.len(), 1);
    }

    #[test]
    fn flags_override_file() {
        let f: FileConfig =
            toml::from_str("listen = \"127.0.0.1:1\"\nmax_connections = 5").unwrap();
        let c = Config::merge(cli(&["--listen", "127.0.0.1:2"]), f).unwrap();
        assert_eq!(c.listen.port(), 2);
        assert_eq!(c.max_connections, 5);
    }

    #[test]
    fn threads_from_flag_or_file_and_never_zero() {
        let f: FileConfig = toml::from_str("threads = 3").unwrap();
        assert_eq!(Config::merge(cli(&[]), f).unwrap().threads, 3);
        let f: FileConfig = toml::from_str("threads = 3").unwrap();
        assert_eq!(
            Config::merge(cli(&["--threads", "5"]), f).unwrap().threads,
            5
        );
        assert!(
            Config::merge(cli(&[]), FileConfig::default())
                .unwrap()
                .threads
                >= 1
        );
        let err = Config::merge(cli(&["--threads", "0"]), FileConfig::default()).unwrap_err();
        assert!(err.to_string().contains("threads"), "{err}");
    }

    #[test]
    fn config_errors_never_quote_a_password() {
        for text in [
            "[[users]]\nname = \"app\"\npassword = \"s3cret-unterminated\n",
            "[[users]]\nname = \"app\"\npassword = s3cret-bare\n",
            "[[users]]\nname = \"app\"\npassword_hash = \"s3cret-hash\nx = 1\n",
        ] {
            let e = toml::from_str::<FileConfig>(text).unwrap_err();
            assert!(
                e.to_string().contains("s3cret"),
                "toml itself quotes it: {e}"
            );
            let message = parse_error_message(text, &e);
            assert!(!message.contains("s3cret"), "{message}");
            assert!(message.starts_with("line 3, column "), "{message}");
        }
        let text = "listen = \"127.0.0.1:1\"\nlisen = 1\n";
        let e = toml::from_str::<FileConfig>(text).unwrap_err();
        let message = parse_error_message(text, &e);
        assert!(
            message.starts_with("line 2, column 1: unknown field `lisen`"),
            "{message}"
        );
    }

    #[test]
    fn metrics_listen_from_flag_or_file() {
        let c = Config::merge(cli(&[]), FileConfig::default()).unwrap();
        assert_eq!(c.metrics_listen, None);
        let f: FileConfig = toml::from_str("metrics_listen = \"127.0.0.1:9100\"").unwrap();
        let c = Config::merge(cli(&[]), f).unwrap();
        assert_eq!(c.metrics_listen.map(|a| a.port()), Some(9100));
        let f: FileConfig = toml::from_str("metrics_listen = \"127.0.0.1:9100\"").unwrap();
        let c = Config::merge(cli(&["--metrics-listen", "127.0.0.1:9200"]), f).unwrap();
        assert_eq!(c.metrics_listen.map(|a| a.port()), Some(9200));
        assert!(toml::from_str::<FileConfig>("metrics_listen = \"nope\"").is_err());
    }

    #[test]
    fn listen_socket_from_flag_or_file_made_absolute() {
        let c = Config::merge(cli(&[]), FileConfig::default()).unwrap();
        assert_eq!(c.listen_socket, None);
        let f: FileConfig = toml::from_str("listen_socket = \"/run/a.sock\"").unwrap();
        let c = Config::merge(cli(&["--listen-socket", "/run/b.sock"]), f).unwrap();
        assert_eq!(c.listen_socket.as_deref(), Some(Path::new("/run/b.sock")));
        let f: FileConfig = toml::from_str("listen_socket = \"rel.sock\"").unwrap();
        let c = Config::merge(cli(&[]), f).unwrap();
        let path = c.listen_socket.unwrap();
        assert!(path.is_absolute() && path.ends_with("rel.sock"), "{path:?}");
    }

    #[test]
    fn admin_page_settings() {
        let c = Config::merge(cli(&[]), FileConfig::default()).unwrap();
        assert!(c.admin.is_none());
        let c = Config::merge(
            cli(&["--admin-listen", "127.0.0.1:9300"]),
            FileConfig::default(),
        )
        .unwrap();
        let admin = c.admin.unwrap();
        assert!(admin.actions_allowed() && !admin.public_read && admin.token.is_none());
        // Off loopback: users or a token, and actions only with TLS or the explicit flag.
        let err = Config::merge(
            cli(&["--admin-listen", "0.0.0.0:9300"]),
            FileConfig::default(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("--admin-token"), "{err}");
        let c = Config::merge(
            cli(&[
                "--admin-listen",
                "0.0.0.0:9300",
                "--admin-token",
                "0123456789abcdef",
            ]),
            FileConfig::default(),
        )
        .unwrap();
        let admin = c.admin.unwrap();
        assert!(!admin.actions_allowed());
        assert!(!format!("{admin:?}").contains("0123456789abcdef"));
        let f: FileConfig = toml::from_str(
            "[admin]\nlisten = \"0.0.0.0:9300\"\ntoken = \"0123456789abcdef\"\nallow_insecure_actions = true\npublic_read = true\n",
        )
        .unwrap();
        let admin = Config::merge(cli(&[]), f).unwrap().admin.unwrap();
        assert!(admin.actions_allowed() && admin.public_read);
        let err = Config::merge(
            cli(&["--admin-listen", "127.0.0.1:1", "--admin-token", "short"]),
            FileConfig::default(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("16 characters"), "{err}");
        let err = Config::merge(
            cli(&["--admin-listen", "127.0.0.1:1", "--admin-tls"]),
            FileConfig::default(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("--tls-cert"), "{err}");
        assert!(toml::from_str::<FileConfig>("[admin]\nlisen = 1").is_err());
    }

    #[test]
    fn require_tls_needs_a_certificate() {
        assert!(Config::merge(cli(&["--require-tls"]), FileConfig::default()).is_err());
    }
}
