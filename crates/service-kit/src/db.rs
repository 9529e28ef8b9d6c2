//! MySQL/MariaDB pool and the embedded migrations (`migrations/` at the
//! workspace root), shared by every service that owns tables, and
//! [`IdText`], how every id column is read.
//!
//! TLS to the database is `mysql.ssl_mode` and `mysql.ssl_ca`, checked before
//! the first connection: a verifying mode needs a CA file that exists, a CA
//! file needs a verifying mode (sqlx ignores it otherwise), and TLS settings
//! in the URL's query must agree with the keys, so no setting is silently
//! overridden by another. Off this machine (a host other than loopback or
//! a unix socket) a mode below `verify_ca` is refused unless
//! `mysql.allow_insecure_transport` is set (development stacks only): the
//! network between a service and its database is not trusted, and a
//! `preferred` connection downgrades to plain text without a word.

use crate::{Error, duration::ConfigDuration};
use serde::{Deserialize, Serialize};
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions, MySqlSslMode};
use std::str::FromStr;

/// The workspace's migrations, embedded at build time.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// Applied migrations whose files later changed in comments only, with the
/// SHA-384 of the file as it was applied. sqlx refuses to start when an
/// applied migration's checksum differs from the embedded file, which would
/// freeze a stale or wrong comment forever; [`migrate`] instead moves a
/// database that recorded exactly this old checksum to the current one. Only
/// comment lines may change under an entry here: the statements ran already.
pub const COMMENT_ONLY_EDITS: &[(i64, &str)] = &[
    (
        // The collation note: ids compare byte-exactly since
        // 20261210000010_ids_byte_exact.sql, no longer case-insensitively.
        20261130000001,
        "3920a32b7144980d70a14d9592a016b9ba1775f01fd7dea2b511ec16f54c41b05a35d9f045966685d25e5f9966a6c6b0",
    ),
    (
        // Shard hash and claim token described as the code has them (FNV-1a,
        // a random token per claim), not as crc32 and a lease epoch.
        20261130000002,
        "a6a0f890adc78b1ad285828d2483c7370a30cec8a306ba23763d47b4dccca0e0ee0112e579239b39f273debb942424e6",
    ),
    (
        // Points at docs/design.md#gift-saga instead of a document outside the repository.
        20261130000003,
        "9547c8e6cad15e2e5d4f121cdad7e0be5e7b2a8a8ec99f65e1493d710cf81a632c82e9bfae05fc563c7dabad83d25132",
    ),
];

/// `mysql.statement_timeout` unless configured, and the deadline of a
/// [`statement::BoundedPool`] built from a bare pool.
pub const DEFAULT_STATEMENT_TIMEOUT: ConfigDuration = ConfigDuration::from_secs(10);

/// Name of the advisory lock that serialises migrations of one database.
const MIGRATION_LOCK: &str = "hyapp_migrations";

/// How long an instance waits for another one's migrations before it gives up.
const MIGRATION_LOCK_WAIT_SECS: u32 = 600;

/// Runs the embedded migrations, first accepting the comment-only edits of
/// [`COMMENT_ONLY_EDITS`] on a database that applied the earlier text.
///
/// Several instances may start at once on one database (replicas with
/// `run_migrations`): all of it runs on one connection under a MySQL
/// advisory lock, so one instance migrates and the others then find the work
/// done. sqlx's own lock is not enough: it asks `GET_LOCK(…, -1)` and never
/// reads the answer, and replicas starting together on a fresh MariaDB were
/// seen applying the same migration side by side ("partially applied").
pub async fn migrate(pool: &MySqlPool) -> Result<(), Error> {
    let mut connection = pool.acquire().await?;
    let locked: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, ?)")
        .bind(MIGRATION_LOCK)
        .bind(MIGRATION_LOCK_WAIT_SECS)
        .fetch_one(&mut *connection)
        .await?;
    if locked != Some(1) {
        return Err(Error::Config(format!(
            "migrations: another instance held the `{MIGRATION_LOCK}` lock for \
             {MIGRATION_LOCK_WAIT_SECS}s; start again once it is done"
        )));
    }
    let migrated = migrate_locked(&mut connection).await;
    // Released on this connection before it goes back to the pool (a lock
    // lives as long as its session).
    let released = sqlx::query("SELECT RELEASE_LOCK(?)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *connection)
        .await;
    migrated?;
    released?;
    Ok(())
}

async fn migrate_locked(connection: &mut sqlx::MySqlConnection) -> Result<(), Error> {
    let recorded: Option<String> = sqlx::query_scalar(
        "SELECT table_name FROM information_schema.tables \
         WHERE table_schema = DATABASE() AND table_name = '_sqlx_migrations'",
    )
    .fetch_optional(&mut *connection)
    .await?;
    if recorded.is_some() {
        for (version, applied_checksum) in COMMENT_ONLY_EDITS {
            let Some(current) = MIGRATOR
                .iter()
                .find(|migration| migration.version == *version)
            else {
                continue;
            };
            let applied = decode_hex(applied_checksum).ok_or_else(|| {
                Error::Config(format!("migration {version}: malformed recorded checksum"))
            })?;
            sqlx::query(
                "UPDATE _sqlx_migrations SET checksum = ? WHERE version = ? AND checksum = ?",
            )
            .bind(current.checksum.as_ref())
            .bind(version)
            .bind(applied)
            .execute(&mut *connection)
            .await?;
        }
    }
    MIGRATOR.run_direct(connection).await?;
    Ok(())
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(text.get(at..at + 2)?, 16).ok())
        .collect()
}

/// An id read from MySQL: the text of a byte-exact (`utf8mb4_bin`) id column
/// (docs/design.md#identifiers), as a `String`.
///
/// sqlx 0.8 decodes `String` only from columns the server does not flag
/// BINARY, and MySQL and MariaDB flag every `_bin`-collated column so,
/// although it holds utf8mb4 text: `try_get::<String, _>("room_id")` fails
/// with "mismatched types … VARBINARY". `IdText` accepts any text column,
/// flagged or not, and still refuses bytes that are not UTF-8.
///
/// Read an id column as `row.try_get::<IdText, _>("room_id")?.into()`, as
/// `IdText` in a `query_as` tuple, or on a `FromRow` field as
/// `#[sqlx(try_from = "IdText")] room_id: String`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdText(pub String);

impl From<IdText> for String {
    fn from(id: IdText) -> String {
        id.0
    }
}

impl sqlx::Type<sqlx::MySql> for IdText {
    fn type_info() -> sqlx::mysql::MySqlTypeInfo {
        <str as sqlx::Type<sqlx::MySql>>::type_info()
    }

    fn compatible(ty: &sqlx::mysql::MySqlTypeInfo) -> bool {
        // The byte types' check: the same column types as `str`'s, without
        // its refusal of the BINARY flag. UTF-8 is checked when decoding.
        <[u8] as sqlx::Type<sqlx::MySql>>::compatible(ty)
    }
}

/// Bound like a `&str`, so an id read as `IdText` can key the next statement.
impl<'q> sqlx::Encode<'q, sqlx::MySql> for IdText {
    fn encode_by_ref(
        &self,
        buf: &mut Vec<u8>,
    ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        <&str as sqlx::Encode<'q, sqlx::MySql>>::encode_by_ref(&self.0.as_str(), buf)
    }
}

impl<'r> sqlx::Decode<'r, sqlx::MySql> for IdText {
    fn decode(value: sqlx::mysql::MySqlValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        <&str as sqlx::Decode<'r, sqlx::MySql>>::decode(value).map(|text| IdText(text.to_owned()))
    }
}

/// The `mysql` section of a service config.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MysqlConfig {
    /// `mysql://user@host:port/database` (no password here; see `password`;
    /// one given here anyway is shown as `***` by Debug and `--dump-config`).
    #[serde(serialize_with = "crate::secret::serialize_redacted_url")]
    pub url: String,
    /// Password, kept out of the URL so it never reaches a log line.
    pub password: crate::Secret,
    /// Pool size.
    pub max_connections: u32,
    /// How long to wait for a free connection before failing the request.
    pub acquire_timeout: ConfigDuration,
    /// Longest a unit of work run through [`statement::bounded`] (or a
    /// [`statement::BoundedPool`], [`MysqlConfig::connect_bounded`]) may
    /// wait for the server (a stalled or half-open connection errors instead
    /// of hanging); zero or negative is refused.
    pub statement_timeout: ConfigDuration,
    /// Run migrations at start-up (local and test stacks; production runs them as a job).
    pub run_migrations: bool,
    /// TLS to the server: `disabled`, `preferred` (TLS when the server
    /// offers it, certificate not checked), `required` (TLS, certificate not
    /// checked), `verify_ca`, `verify_identity` (certificate and host name
    /// checked against `ssl_ca`).
    pub ssl_mode: MysqlSslMode,
    /// PEM file of the CA(s) the server's certificate must chain to; needed
    /// by, and only used with, `verify_ca` and `verify_identity`.
    pub ssl_ca: String,
    /// Development only: accept an `ssl_mode` below `verify_ca` for a server
    /// that is not on this machine. Off by default, and refused by
    /// deploy-check in the Kubernetes manifests.
    pub allow_insecure_transport: bool,
}

/// `mysql.ssl_mode`, the MySQL client's `--ssl-mode` values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MysqlSslMode {
    /// Plain TCP.
    Disabled,
    /// TLS when the server offers it, without checking its certificate
    /// (sqlx's and the MySQL client's default).
    #[default]
    Preferred,
    /// TLS or no connection; the certificate is not checked.
    Required,
    /// TLS with the certificate checked against `ssl_ca`, any host name
    /// (sqlx 0.8.6 with rustls 0.23.46 checks the name too; see
    /// crates/testkit/tests/mysql_tls.rs).
    VerifyCa,
    /// TLS with the certificate checked against `ssl_ca` and the URL's host
    /// name: what a database reached over a network should use.
    VerifyIdentity,
}

impl MysqlSslMode {
    /// The spelling in config and in a URL's `ssl-mode` (case-insensitive there).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disabled => "disabled",
            Self::Preferred => "preferred",
            Self::Required => "required",
            Self::VerifyCa => "verify_ca",
            Self::VerifyIdentity => "verify_identity",
        }
    }

    fn verifies(self) -> bool {
        matches!(self, Self::VerifyCa | Self::VerifyIdentity)
    }

    fn to_sqlx(self) -> MySqlSslMode {
        match self {
            Self::Disabled => MySqlSslMode::Disabled,
            Self::Preferred => MySqlSslMode::Preferred,
            Self::Required => MySqlSslMode::Required,
            Self::VerifyCa => MySqlSslMode::VerifyCa,
            Self::VerifyIdentity => MySqlSslMode::VerifyIdentity,
        }
    }
}

impl std::fmt::Debug for MysqlConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlConfig")
            .field("url", &crate::secret::redact_url(&self.url))
            .field("password", &self.password)
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("statement_timeout", &self.statement_timeout)
            .field("run_migrations", &self.run_migrations)
            .field("ssl_mode", &self.ssl_mode)
            .field("ssl_ca", &self.ssl_ca)
            .field("allow_insecure_transport", &self.allow_insecure_transport)
            .finish()
    }
}

impl Default for MysqlConfig {
    fn default() -> Self {
        Self {
            url: "mysql://root@127.0.0.1:3306/hyapp".into(),
            password: crate::Secret::default(),
            max_connections: 16,
            acquire_timeout: ConfigDuration::from_secs(3),
            statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
            run_migrations: false,
            ssl_mode: MysqlSslMode::Preferred,
            ssl_ca: String::new(),
            allow_insecure_transport: false,
        }
    }
}

impl MysqlConfig {
    /// The connect options: the URL, the password and the TLS settings,
    /// checked first (errors name the key). [`MysqlConfig::connect`] starts
    /// with it, so a service refuses a bad TLS setting at start-up, before
    /// any connection is tried.
    pub fn connect_options(&self) -> Result<MySqlConnectOptions, Error> {
        self.statement_timeout()?;
        self.check_tls()?;
        let mut options = MySqlConnectOptions::from_str(&self.url)
            .map_err(|error| Error::Config(format!("mysql.url: {error}")))?;
        self.check_transport(&options)?;
        if !self.password.is_empty() {
            options = options.password(self.password.expose());
        }
        options = options.ssl_mode(self.ssl_mode.to_sqlx());
        if !self.ssl_ca.is_empty() {
            options = options.ssl_ca(&self.ssl_ca);
        }
        Ok(options)
    }

    /// `mysql.statement_timeout`, refused unless positive: a zero deadline
    /// would fail every statement, and "no deadline" is what it prevents.
    pub fn statement_timeout(&self) -> Result<std::time::Duration, Error> {
        if !self.statement_timeout.is_positive() {
            return Err(Error::Config(format!(
                "mysql.statement_timeout must be positive, got {}",
                self.statement_timeout
            )));
        }
        Ok(self.statement_timeout.as_std())
    }

    fn check_tls(&self) -> Result<(), Error> {
        let invalid = |message: String| Err(Error::Config(message));
        let mode = self.ssl_mode.as_str();
        for (name, value) in url_query(&self.url) {
            let name = name.to_ascii_lowercase();
            let agrees = match name.as_str() {
                "ssl-mode" | "sslmode" => value.eq_ignore_ascii_case(mode),
                "ssl-ca" | "sslca" => value == self.ssl_ca,
                // Client certificates are not configured by this service;
                // sqlx would use them, so they may stay in the URL.
                _ => true,
            };
            if !agrees {
                let key = if name.contains("mode") {
                    "ssl_mode"
                } else {
                    "ssl_ca"
                };
                let configured = if key == "ssl_mode" {
                    mode
                } else {
                    self.ssl_ca.as_str()
                };
                return invalid(format!(
                    "mysql.url sets {name}={value} but mysql.{key} is `{configured}`: \
                     set TLS in mysql.{key} (the URL's value would silently win)"
                ));
            }
        }
        // Without a CA file sqlx would verify against its built-in public
        // roots, which the private CAs of managed MySQL (RDS, Cloud SQL) are
        // not in: require the file, so what is trusted is written in the config.
        if self.ssl_mode.verifies() && self.ssl_ca.is_empty() {
            return invalid(format!(
                "mysql.ssl_ca is required with mysql.ssl_mode {mode}: the PEM file of the \
                 CA that signed the server's certificate"
            ));
        }
        if !self.ssl_ca.is_empty() {
            if !self.ssl_mode.verifies() {
                return invalid(format!(
                    "mysql.ssl_ca is set but mysql.ssl_mode {mode} does not check the \
                     certificate; use verify_ca or verify_identity"
                ));
            }
            if let Err(error) = std::fs::metadata(&self.ssl_ca) {
                return invalid(format!("mysql.ssl_ca `{}`: {error}", self.ssl_ca));
            }
        }
        Ok(())
    }

    /// Refuses a transport that does not verify the server when the server
    /// is reached over a network, unless the operator opted out explicitly.
    fn check_transport(&self, options: &MySqlConnectOptions) -> Result<(), Error> {
        let host = options.get_host();
        let local = options.get_socket().is_some() || crate::config::is_loopback_host(host);
        if local || self.ssl_mode.verifies() || self.allow_insecure_transport {
            return Ok(());
        }
        Err(Error::Config(format!(
            "mysql.ssl_mode `{}` does not verify the server, and mysql.url's host `{host}` \
             is not this machine: use verify_identity (or verify_ca) with mysql.ssl_ca, or \
             set mysql.allow_insecure_transport: true (development stacks only)",
            self.ssl_mode.as_str()
        )))
    }

    /// [`MysqlConfig::connect`], the pool paired with `statement_timeout`.
    pub async fn connect_bounded(&self) -> Result<statement::BoundedPool, Error> {
        let limit = self.statement_timeout()?;
        Ok(statement::BoundedPool::new(self.connect().await?, limit))
    }

    /// Connects a pool (lazily validated by a first ping) and runs migrations when configured.
    pub async fn connect(&self) -> Result<MySqlPool, Error> {
        let options = self.connect_options()?;
        let pool = self
            .pool_options(self.max_connections)
            .connect_with(options)
            .await?;
        if self.run_migrations {
            migrate(&pool).await?;
        }
        Ok(pool)
    }

    /// A second pool of at most `max_connections` over the same server,
    /// connecting on first use, driven by the runtime that calls this (a
    /// [`crate::low_priority`] thread's); no migrations (the main pool ran them).
    pub fn lazy_pool(&self, max_connections: u32) -> Result<MySqlPool, Error> {
        Ok(self
            .pool_options(max_connections)
            .connect_lazy_with(self.connect_options()?))
    }

    fn pool_options(&self, max_connections: u32) -> MySqlPoolOptions {
        MySqlPoolOptions::new()
            .max_connections(max_connections.max(1))
            // No ping before every checkout: it is a round trip per
            // transaction. A connection that died (server restart) fails
            // its next statement before anything is committed, is dropped by
            // the pool, and the caller's retry gets a fresh one.
            .test_before_acquire(false)
            .acquire_timeout(
                self.acquire_timeout
                    .positive_or(ConfigDuration::from_secs(3))
                    .as_std(),
            )
    }
}

/// The `name=value` pairs of a URL's query (values undecoded: TLS modes and
/// the paths compared here need no escaping).
fn url_query(url: &str) -> impl Iterator<Item = (&str, &str)> {
    url.split_once('?')
        .map(|(_, query)| query)
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
}

pub mod statement;

#[cfg(test)]
mod tls_tests;
