//! Room service: gRPC gateway API over the Room Cell, transactional outbox writer.

fn main() {}
