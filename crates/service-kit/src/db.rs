//! MySQL/MariaDB pool and the embedded migrations (`migrations/` at the
//! workspace root), shared by every service that owns tables.

use crate::{Error, duration::ConfigDuration};
use serde::{Deserialize, Serialize};
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use std::str::FromStr;

/// The workspace's migrations, embedded at build time.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

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
            MIGRATOR.run(&pool).await?;
        }
        Ok(pool)
    }
}
