//! MySQL/MariaDB pool and the embedded migrations (`migrations/` at the
//! workspace root), shared by every service that owns tables.

use crate::{Error, duration::ConfigDuration};
use serde::{Deserialize, Serialize};
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
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

/// Runs the embedded migrations, first accepting the comment-only edits of
/// [`COMMENT_ONLY_EDITS`] on a database that applied the earlier text.
pub async fn migrate(pool: &MySqlPool) -> Result<(), Error> {
    let recorded: Option<String> = sqlx::query_scalar(
        "SELECT table_name FROM information_schema.tables \
         WHERE table_schema = DATABASE() AND table_name = '_sqlx_migrations'",
    )
    .fetch_optional(pool)
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
            .execute(pool)
            .await?;
        }
    }
    MIGRATOR.run(pool).await?;
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
    /// Run migrations at start-up (local and test stacks; production runs them as a job).
    pub run_migrations: bool,
}

impl std::fmt::Debug for MysqlConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlConfig")
            .field("url", &crate::secret::redact_url(&self.url))
            .field("password", &self.password)
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("run_migrations", &self.run_migrations)
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
            run_migrations: false,
        }
    }
}

impl MysqlConfig {
    /// Connects a pool (lazily validated by a first ping) and runs migrations when configured.
    pub async fn connect(&self) -> Result<MySqlPool, Error> {
        let mut options = MySqlConnectOptions::from_str(&self.url)
            .map_err(|error| Error::Config(format!("mysql.url: {error}")))?;
        if !self.password.is_empty() {
            options = options.password(self.password.expose());
        }
        let pool = MySqlPoolOptions::new()
            .max_connections(self.max_connections.max(1))
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
            .connect_with(options)
            .await?;
        if self.run_migrations {
            migrate(&pool).await?;
        }
        Ok(pool)
    }
}
