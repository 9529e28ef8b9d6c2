//! Outbox relay: claims room_outbox rows and publishes them in per-room order.

fn main() {}
