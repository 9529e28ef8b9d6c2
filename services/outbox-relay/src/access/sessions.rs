//! The console's session generation, in MySQL (`relay_console_sessions`) so
//! every relay replica agrees. A cookie carries the generation it was issued
//! in and is accepted only while that generation is current; [`revoke_all`]
//! (a logout, `outbox-relay console revoke-sessions`) moves it on.
//!
//! Why one generation and not a per-session revocation list: a list must be
//! bounded and pruned, and a copied cookie is indistinguishable from the
//! original anyway. Ending every console session at a logout costs the other
//! operators one login; it never leaves a stolen cookie alive.

use crate::Error;
use service_kit::time::now_ms;
use sqlx::MySqlPool;

const CURRENT_SQL: &str = "SELECT generation FROM relay_console_sessions WHERE id = 1";
const REVOKE_SQL: &str = "INSERT INTO relay_console_sessions (id, generation, changed_ms) \
     VALUES (1, 1, ?) ON DUPLICATE KEY UPDATE generation = generation + 1, changed_ms = VALUES(changed_ms)";

/// The current generation (0 before the first revocation).
pub async fn current(pool: &MySqlPool) -> Result<u64, Error> {
    let generation: Option<u64> = sqlx::query_scalar(CURRENT_SQL).fetch_optional(pool).await?;
    Ok(generation.unwrap_or(0))
}

/// Ends every console session; returns the new generation.
pub async fn revoke_all(pool: &MySqlPool) -> Result<u64, Error> {
    sqlx::query(REVOKE_SQL).bind(now_ms()).execute(pool).await?;
    current(pool).await
}
