//! Typed Tencent Cloud IM REST client with TLSSigAPIv2 UserSig, error classes and rate limiting.
//!
//! - [`usersig`]: pure UserSig generation and verification (time passed in).
//! - [`Client`]: signs every call with a cached admin UserSig, waits on a per-API token bucket,
//!   retries once after "UserSig expired", and returns [`Error`]s that [`Error::class`] sorts
//!   into rate-limited / transient / expired-signature / permanent.
//! - Request structs carry a `Random` derived from the event id ([`random_from_event_id`]) so
//!   redelivered events are de-duplicated by Tencent.

mod client;
mod config;
mod error;
pub mod pacer;
pub mod ratelimit;
pub mod section;
mod types;
pub mod usersig;

pub use client::{Client, ClientStats, MAX_RESPONSE_BYTES};
pub use config::{
    ClientConfig, DEFAULT_GROUP_MSG_PER_SECOND, DEFAULT_RATE_LIMIT_PER_API,
    DEFAULT_REQUEST_TIMEOUT, DEFAULT_USERSIG_TTL,
};
pub use error::{Error, ErrorClass, MSG_FREQ_CTRL, class_of_code, codes};
pub use section::ImSection;
pub use types::{
    Api, CreateGroupRequest, CreateGroupResponse, CustomElem, DeleteGroupMemberRequest,
    DestroyGroupRequest, Empty, ForbidSendMsgRequest, Idempotent, MsgElement, MsgPriority,
    SendC2cMsgRequest, SendC2cMsgResponse, SendGroupMsgRequest, SendGroupMsgResponse, TextElem,
    random_from_event_id,
};
