//! Whether each consumer group applied each event of a timeline page:
//! applied (when, to the millisecond, and the lag from commit and from
//! publish), pending, or not consumed by design — the group does not
//! handle that event type, as `outbox_schema::groups` declares per group
//! (the one list; the consumers' handlers match the same types).
//!
//! Read with primary-key lookups of `consumer_dedup` (group, event id) for
//! exactly the page's events and the groups — the statement `ops::timeline`
//! uses.

use super::search::Found;
use crate::Error;
use crate::ops::queries::{DEDUP_EVENTS_SQL, DEDUP_GROUPS_SQL};
use outbox_schema::groups::{self, Handles};
use service_kit::db::IdText;
use sqlx::{MySql, MySqlPool, QueryBuilder, Row};
use std::collections::HashMap;

/// A timeline column: a group and the event types it applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupColumn {
    /// The group id (as this deployment names it).
    pub name: String,
    /// What it applies; None = not a declared group (everything counts).
    pub handles: Option<Handles>,
}

/// The columns of `names`, given in `groups::CONSUMERS` order (the relay's
/// timeline groups; im-bridge's may be renamed by config, so a name not
/// declared takes the declared group at its position).
pub fn columns(names: &[String]) -> Vec<GroupColumn> {
    names
        .iter()
        .enumerate()
        .map(|(position, name)| {
            let declared = groups::ALL
                .iter()
                .find(|group| group.group == name)
                .or_else(|| groups::CONSUMERS.get(position));
            GroupColumn {
                name: name.clone(),
                handles: declared.map(|group| group.handles),
            }
        })
        .collect()
}

/// One group's state for one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Applied at `at_ms`.
    At {
        /// When the group recorded it.
        at_ms: i64,
        /// Since the commit, ms.
        from_commit_ms: i64,
        /// Since the relay's publish, ms (None when not marked delivered).
        from_publish_ms: Option<i64>,
    },
    /// The group handles the type and has not applied it (yet).
    Pending,
    /// The group does not handle the type.
    NotByDesign,
}

/// Per row of `rows`, per column, what the group did.
pub async fn applied(
    pool: &MySqlPool,
    columns: &[GroupColumn],
    rows: &[Found],
) -> Result<Vec<Vec<Applied>>, Error> {
    let consumed = lookup(pool, columns, rows).await?;
    Ok(rows
        .iter()
        .map(|found| {
            let row = &found.row;
            columns
                .iter()
                .map(|column| {
                    let handled = column
                        .handles
                        .is_none_or(|handles| handles.handles(&row.event_type));
                    let at = consumed.get(&(column.name.clone(), row.event_id.clone()));
                    match (at, handled) {
                        (Some(&at_ms), _) => Applied::At {
                            at_ms,
                            from_commit_ms: at_ms - row.created_at_ms,
                            from_publish_ms: (found.delivered_at_ms > 0)
                                .then(|| at_ms - found.delivered_at_ms),
                        },
                        (None, true) => Applied::Pending,
                        (None, false) => Applied::NotByDesign,
                    }
                })
                .collect()
        })
        .collect())
}

/// When each (group, event) of `rows` was applied.
async fn lookup(
    pool: &MySqlPool,
    columns: &[GroupColumn],
    rows: &[Found],
) -> Result<HashMap<(String, String), i64>, Error> {
    if columns.is_empty() || rows.is_empty() {
        return Ok(HashMap::new());
    }
    let mut builder = QueryBuilder::<MySql>::new(DEDUP_GROUPS_SQL);
    let mut separated = builder.separated(", ");
    for column in columns {
        separated.push_bind(&column.name);
    }
    builder.push(DEDUP_EVENTS_SQL);
    let mut separated = builder.separated(", ");
    for found in rows {
        separated.push_bind(&found.row.event_id);
    }
    separated.push_unseparated(")");
    let found = builder.build().fetch_all(pool).await?;
    found
        .iter()
        .map(|row| {
            let group: String = row.try_get::<IdText, _>("consumer_group")?.into();
            let event: String = row.try_get::<IdText, _>("event_id")?.into();
            Ok(((group, event), row.try_get::<i64, _>("processed_at_ms")?))
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renamed_group_keeps_its_declared_types() {
        let names = vec![
            "im-bridge-renamed".to_owned(),
            groups::ACTIVITY.group.to_owned(),
            groups::NOTICE.group.to_owned(),
            "someone-else".to_owned(),
        ];
        let columns = columns(&names);
        assert_eq!(columns[0].handles, Some(groups::IM_BRIDGE.handles));
        assert_eq!(columns[1].handles, Some(groups::ACTIVITY.handles));
        assert_eq!(columns[3].handles, None);
    }
}
