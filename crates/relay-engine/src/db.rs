//! How the relay runs a statement: each one is a unit of
//! `mysql.statement_timeout` ([`service_kit::db::statement`]), so a stalled
//! or half-open MySQL connection fails the scan, claim, mark or lease
//! statement — and with it the batch or the lease refresh, both retried —
//! instead of holding the relay until TCP gives up. The connection it
//! stalled on is closed, not returned to the pool.

use crate::Error;
use service_kit::db::statement::BoundedPool;
use sqlx::mysql::{MySqlArguments, MySqlRow};
use sqlx::query::Query;
use sqlx::{MySql, QueryBuilder};

/// Rows affected by `builder`'s statement.
pub(crate) async fn execute(
    db: &BoundedPool,
    mut builder: QueryBuilder<'_, MySql>,
) -> Result<u64, Error> {
    db.run(|connection, _| {
        Box::pin(async move { Ok(builder.build().execute(connection).await?.rows_affected()) })
    })
    .await
}

/// Every row of `builder`'s statement.
pub(crate) async fn fetch_all(
    db: &BoundedPool,
    mut builder: QueryBuilder<'_, MySql>,
) -> Result<Vec<MySqlRow>, Error> {
    db.run(|connection, _| {
        Box::pin(async move { Ok(builder.build().fetch_all(connection).await?) })
    })
    .await
}

/// The first row of `builder`'s statement, if any.
pub(crate) async fn fetch_optional(
    db: &BoundedPool,
    mut builder: QueryBuilder<'_, MySql>,
) -> Result<Option<MySqlRow>, Error> {
    db.run(|connection, _| {
        Box::pin(async move { Ok(builder.build().fetch_optional(connection).await?) })
    })
    .await
}

/// Rows affected by a statement with its values bound.
pub(crate) async fn execute_query(
    db: &BoundedPool,
    query: Query<'_, MySql, MySqlArguments>,
) -> Result<u64, Error> {
    db.run(|connection, _| {
        Box::pin(async move { Ok(query.execute(connection).await?.rows_affected()) })
    })
    .await
}

/// Every row of a statement with its values bound.
pub(crate) async fn fetch_all_query(
    db: &BoundedPool,
    query: Query<'_, MySql, MySqlArguments>,
) -> Result<Vec<MySqlRow>, Error> {
    db.run(|connection, _| Box::pin(async move { Ok(query.fetch_all(connection).await?) }))
        .await
}
