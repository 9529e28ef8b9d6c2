//! The outbox relay: claims `room_outbox` rows and publishes them — to the
//! `hyapp_room_outbox` topic (`mq`), directly to Tencent IM and activity
//! (`direct`), or both (`dual`) — in per-room commit order, fenced by shard
//! leases, with retries, backoff and dead letters. A library with a thin
//! binary; room-service embeds the same library.

pub mod config;
pub mod store_insert;

pub use store_insert::insert_outbox_rows;
