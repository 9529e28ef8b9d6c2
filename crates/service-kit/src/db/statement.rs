//! `mysql.statement_timeout`: work on one pooled connection bounded by a
//! deadline, so a database that stalls mid-statement (the connection open,
//! no bytes coming back) or a half-open connection (the peer gone without a
//! FIN) becomes an error instead of a wait that lasts until TCP gives up
//! (minutes). sqlx has no read timeout of its own.
//!
//! On a timeout the connection is detached from the pool and dropped, which
//! closes its socket: sqlx would otherwise return a connection abandoned
//! mid-statement to the pool by pinging it first, and that ping waits on the
//! same stalled socket, holding a pool slot for as long as the stall lasts.
//! For the same reason the ping that returns a connection after work that
//! finished is bounded too: a stall that starts just then closes the
//! connection after `limit` instead of keeping its slot.
//! A transaction cut off this way never commits: MySQL rolls back the open
//! transaction of a connection that went away. Only a `COMMIT` that was
//! sent and whose answer timed out has an unknown outcome; callers already
//! treat every database error that way (docs/design.md#client-timeouts).

use sqlx::MySqlConnection;
use sqlx::mysql::MySqlPool;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::time::Duration;

/// What [`bounded`] runs: borrows the connection for the whole future.
pub type Work<'c, T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'c>>;

/// The error a statement that outlived its deadline turns into: an I/O
/// error with kind `TimedOut`, what sqlx reports for a socket that failed,
/// so callers handle it as they handle a lost connection.
pub fn timed_out(limit: Duration) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("mysql statement got no answer within mysql.statement_timeout ({limit:?})"),
    ))
}

/// Whether `error` is [`timed_out`]'s.
pub fn is_timed_out(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut)
}

/// Runs `work` on a connection taken from `pool` (within the pool's acquire
/// timeout) and gives it at most `limit`. A transaction begun inside `work`
/// is rolled back unless `work` committed it; past `limit` the connection is
/// closed rather than returned, and the result is [`timed_out`].
///
/// `work` owns what it uses; [`bounded_scoped`] lets it borrow.
pub async fn bounded<T, E, F>(pool: &MySqlPool, limit: Duration, work: F) -> Result<T, E>
where
    E: From<sqlx::Error>,
    F: for<'c> FnOnce(&'c mut MySqlConnection) -> Work<'c, T, E>,
{
    bounded_scoped(pool, limit, |connection, _| work(connection)).await
}

/// The second argument of [`bounded_scoped`]'s work. It carries nothing:
/// its type says that the caller's borrows (`'a`) outlive the connection's
/// (`'c`), which lets the boxed future capture `&'a` data; a closure taking
/// only the connection would have to own everything it touches. Take it
/// as `_`.
#[derive(Debug)]
pub struct Borrows<'c, 'a>(PhantomData<&'c &'a ()>);

/// [`bounded`] for work that borrows the caller's data (ids, rows to
/// write, a flag it sets):
/// `bounded_scoped(pool, limit, |connection, _| Box::pin(async move { … }))`.
pub async fn bounded_scoped<'a, T, E, F>(pool: &MySqlPool, limit: Duration, work: F) -> Result<T, E>
where
    E: From<sqlx::Error>,
    F: for<'c> FnOnce(&'c mut MySqlConnection, Borrows<'c, 'a>) -> Work<'c, T, E>,
{
    let mut connection = pool.acquire().await.map_err(E::from)?;
    match tokio::time::timeout(limit, work(&mut connection, Borrows(PhantomData))).await {
        Ok(result) => {
            // What dropping the connection would spawn (sqlx's ping before
            // it goes back), with a deadline: cut off, the connection is
            // dropped and its slot freed. `return_to_pool` is sqlx's eager
            // form of its drop handler (hidden in its docs; pinned by
            // crates/testkit/tests/mysql_stall.rs).
            tokio::spawn(tokio::time::timeout(limit, connection.return_to_pool()));
            result
        }
        Err(_) => {
            // Closed here, not pinged on its way back into the pool.
            drop(connection.detach());
            Err(E::from(timed_out(limit)))
        }
    }
}

/// A pool with its `mysql.statement_timeout`: what a repository keeps so
/// that every statement it runs goes through [`bounded_scoped`].
#[derive(Debug, Clone)]
pub struct BoundedPool {
    pool: MySqlPool,
    limit: Duration,
}

impl BoundedPool {
    /// `pool`, each unit of work given at most `limit`
    /// ([`crate::db::MysqlConfig::statement_timeout`], which refuses zero).
    pub fn new(pool: MySqlPool, limit: Duration) -> Self {
        Self { pool, limit }
    }

    /// The pool itself (shutdown, statements that need no deadline).
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// The deadline of each unit of work.
    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// Runs `work` through [`bounded_scoped`] with this pool's deadline.
    pub async fn run<'a, T, E, F>(&self, work: F) -> Result<T, E>
    where
        E: From<sqlx::Error>,
        F: for<'c> FnOnce(&'c mut MySqlConnection, Borrows<'c, 'a>) -> Work<'c, T, E>,
    {
        bounded_scoped(&self.pool, self.limit, work).await
    }
}

/// A pool given without its configured deadline gets the default
/// `mysql.statement_timeout` (10 s), never none.
impl From<MySqlPool> for BoundedPool {
    fn from(pool: MySqlPool) -> Self {
        Self::new(pool, super::DEFAULT_STATEMENT_TIMEOUT.as_std())
    }
}

/// [`From<MySqlPool>`] for a borrowed pool (a clone shares the pool).
impl From<&MySqlPool> for BoundedPool {
    fn from(pool: &MySqlPool) -> Self {
        Self::from(pool.clone())
    }
}

/// So that functions taking `impl Into<BoundedPool>` accept a borrowed one.
impl From<&BoundedPool> for BoundedPool {
    fn from(pool: &BoundedPool) -> Self {
        pool.clone()
    }
}
