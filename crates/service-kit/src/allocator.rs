//! The process-wide allocator of every service (and of anything else that
//! links this crate): mimalloc. Profiles of room-service under load spent
//! about a fifth of its CPU in glibc's malloc and free (`_int_malloc`,
//! `_int_free`, `malloc_consolidate`): protobuf, gRPC frames and SQL rows
//! are many small short-lived allocations across threads, which mimalloc's
//! per-thread free lists serve far more cheaply.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
