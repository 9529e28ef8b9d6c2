//! The Tencent IM REST client: URL signing, UserSig caching, rate limiting and the endpoints.
//!
//! Every call is `POST {base}/v4/{service}/{command}?sdkappid=..&identifier=..&usersig=..
//! &random=..&contenttype=json` with a JSON body. A call answered with ErrorCode 70001 (UserSig
//! expired) regenerates the signature and is retried exactly once; every other failure is
//! returned to the caller, whose retry policy reads [`Error::class`]. The client logs only at
//! debug level: the caller decides whether a failure deserves a warning.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::Instrument;

use crate::config::ClientConfig;
use crate::error::{Error, codes, truncate};
use crate::pacer::{GroupPacer, PacerStats};
use crate::ratelimit::RateLimiter;
use crate::types::{
    Api, CreateGroupRequest, CreateGroupResponse, DeleteGroupMemberRequest, DestroyGroupRequest,
    Empty, Envelope, ForbidSendMsgRequest, Idempotent, SendC2cMsgRequest, SendC2cMsgResponse,
    SendGroupMsgRequest, SendGroupMsgResponse,
};
use crate::usersig::gen_usersig;

/// Counters describing the client's own behaviour, for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Calls that waited for a rate-limit token.
    pub throttled_calls: u64,
    /// UserSigs generated (first use, refresh before expiry, or after a 70001).
    pub usersig_generations: u64,
    /// Calls retried because Tencent reported the UserSig expired.
    pub expired_sig_retries: u64,
}

struct CachedSig {
    value: String,
    refresh_at: u64,
}

struct Inner {
    config: ClientConfig,
    api_base: String,
    http: reqwest::Client,
    limiter: RateLimiter,
    pacer: Arc<GroupPacer>,
    sig: Mutex<Option<CachedSig>>,
    sig_generations: AtomicU64,
    expired_sig_retries: AtomicU64,
}

/// A cheaply clonable Tencent IM REST client.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl fmt::Debug for Client {
    // Hand-written so neither the cached UserSig nor any future field can leak by accident.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base_url", &self.inner.config.base_url)
            .field("sdk_app_id", &self.inner.config.sdk_app_id)
            .field("admin_identifier", &self.inner.config.admin_identifier)
            .finish_non_exhaustive()
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Client {
    /// Builds a client; fails only on an invalid config.
    pub fn new(config: ClientConfig) -> Result<Self, Error> {
        config.validate()?;
        let http = reqwest::Client::builder()
            .timeout(config.request_timeout)
            .connect_timeout(config.request_timeout)
            .build()
            .map_err(|e| Error::Config(format!("http client: {}", e.without_url())))?;
        let api_base = format!("{}/v4", config.base_url.trim_end_matches('/'));
        Ok(Client {
            inner: Arc::new(Inner {
                limiter: RateLimiter::new(config.rate_limit_per_api),
                pacer: GroupPacer::new(config.group_msg_per_second),
                config,
                api_base,
                http,
                sig: Mutex::new(None),
                sig_generations: AtomicU64::new(0),
                expired_sig_retries: AtomicU64::new(0),
            }),
        })
    }

    /// The configuration the client was built with.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// Snapshot of the client's counters.
    pub fn stats(&self) -> ClientStats {
        ClientStats {
            throttled_calls: self.inner.limiter.throttled(),
            usersig_generations: self.inner.sig_generations.load(Ordering::Relaxed),
            expired_sig_retries: self.inner.expired_sig_retries.load(Ordering::Relaxed),
        }
    }

    /// Group messages `group` could take right now without waiting: a
    /// sender with more to say merges it into fewer messages.
    pub fn group_budget(&self, group: &str) -> usize {
        self.inner.pacer.available(group)
    }

    /// Counters of the per-group pacing.
    pub fn pacer_stats(&self) -> PacerStats {
        self.inner.pacer.stats()
    }

    /// `create_group`, reporting "group id already used" as an error.
    pub async fn create_group(
        &self,
        req: &CreateGroupRequest,
    ) -> Result<CreateGroupResponse, Error> {
        self.call(Api::CreateGroup, req).await
    }

    /// Creates the group unless it already exists (ErrorCode 10021 / 10025).
    pub async fn ensure_group(&self, req: &CreateGroupRequest) -> Result<Idempotent, Error> {
        match self.create_group(req).await {
            Ok(_) => Ok(Idempotent::Applied),
            Err(err)
                if matches!(
                    err.code(),
                    Some(codes::GROUP_ID_USED | codes::GROUP_ID_USED_BY_SELF)
                ) =>
            {
                Ok(Idempotent::AlreadyDone)
            }
            Err(err) => Err(err),
        }
    }

    /// Destroys the group; an unknown group (ErrorCode 10010) counts as already destroyed.
    pub async fn destroy_group(&self, group_id: &str) -> Result<Idempotent, Error> {
        let req = DestroyGroupRequest {
            group_id: group_id.to_owned(),
        };
        match self.call::<_, Empty>(Api::DestroyGroup, &req).await {
            Ok(_) => Ok(Idempotent::Applied),
            Err(err) if err.code() == Some(codes::GROUP_NOT_FOUND) => Ok(Idempotent::AlreadyDone),
            Err(err) => Err(err),
        }
    }

    /// Sends a group message. Build the request with [`SendGroupMsgRequest::for_event`] so a
    /// redelivery carries the same `Random`. A `MsgDropReason` in the answer becomes
    /// [`Error::Dropped`], because the message was not delivered. Every send
    /// waits for a permit of its group ([`GroupPacer`]), held until a second
    /// after the answer, so no group gets more than its limit per second.
    pub async fn send_group_msg(
        &self,
        req: &SendGroupMsgRequest,
    ) -> Result<SendGroupMsgResponse, Error> {
        let _permit = self.inner.pacer.acquire(&req.group_id).await;
        let resp: SendGroupMsgResponse = self.call(Api::SendGroupMsg, req).await?;
        check_dropped(Api::SendGroupMsg, resp.msg_drop_reason.as_deref())?;
        Ok(resp)
    }

    /// Removes members from a group.
    pub async fn delete_group_member(&self, req: &DeleteGroupMemberRequest) -> Result<(), Error> {
        self.call::<_, Empty>(Api::DeleteGroupMember, req)
            .await
            .map(drop)
    }

    /// Mutes members for `MuteTime` seconds (0 unmutes).
    pub async fn forbid_send_msg(&self, req: &ForbidSendMsgRequest) -> Result<(), Error> {
        self.call::<_, Empty>(Api::ForbidSendMsg, req)
            .await
            .map(drop)
    }

    /// Sends a one-to-one message (`openim/sendmsg`).
    pub async fn send_c2c_msg(&self, req: &SendC2cMsgRequest) -> Result<SendC2cMsgResponse, Error> {
        let resp: SendC2cMsgResponse = self.call(Api::SendC2cMsg, req).await?;
        check_dropped(Api::SendC2cMsg, resp.msg_drop_reason.as_deref())?;
        Ok(resp)
    }

    async fn call<Req, Resp>(&self, api: Api, body: &Req) -> Result<Resp, Error>
    where
        Req: Serialize + ?Sized,
        Resp: DeserializeOwned,
    {
        let span = tracing::info_span!(
            "tencent_im_call",
            im_api = api.path(),
            error_code = tracing::field::Empty
        );
        // An OpenTelemetry client span, child of whatever trace the caller is
        // in (a consumer continuing the event's trace); a no-op without a provider.
        let otel = {
            use opentelemetry::trace::{SpanKind, Tracer as _};
            let tracer = opentelemetry::global::tracer("tencent-im");
            tracer
                .span_builder(format!("tencent_im {}", api.path()))
                .with_kind(SpanKind::Client)
                .start(&tracer)
        };
        let result = async {
            let result = match self.attempt(api, body, false).await {
                Err(err) if err.code() == Some(codes::USERSIG_EXPIRED) => {
                    self.inner.expired_sig_retries.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!("tencent im usersig expired, regenerating and retrying once");
                    self.attempt(api, body, true).await
                }
                other => other,
            };
            match &result {
                Ok(_) => {
                    tracing::Span::current().record("error_code", 0);
                    tracing::debug!("tencent im call succeeded");
                }
                Err(err) => {
                    if let Some(code) = err.code() {
                        tracing::Span::current().record("error_code", code);
                    }
                    tracing::debug!(error_class = ?err.class(), error = %err, "tencent im call failed");
                }
            }
            result
        }
        .instrument(span)
        .await;
        {
            use opentelemetry::trace::Span as _;
            let mut otel = otel;
            if let Err(error) = &result {
                otel.set_status(opentelemetry::trace::Status::error(error.to_string()));
            }
            otel.end();
        }
        result
    }

    async fn attempt<Req, Resp>(&self, api: Api, body: &Req, fresh_sig: bool) -> Result<Resp, Error>
    where
        Req: Serialize + ?Sized,
        Resp: DeserializeOwned,
    {
        let path = api.path();
        self.inner.limiter.acquire(path).await;
        let usersig = self.usersig(fresh_sig);
        let config = &self.inner.config;
        let sdk_app_id = config.sdk_app_id.to_string();
        // Tencent uses `random` only to tell requests apart in its own logs.
        let random = rand::random::<u32>().to_string();
        let query = [
            ("sdkappid", sdk_app_id.as_str()),
            ("identifier", config.admin_identifier.as_str()),
            ("usersig", usersig.as_str()),
            ("random", random.as_str()),
            ("contenttype", "json"),
        ];
        let response = self
            .inner
            .http
            .post(format!("{}/{path}", self.inner.api_base))
            .query(&query)
            .json(body)
            .send()
            .await
            .map_err(|e| Error::from_reqwest(path, e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(Error::HttpStatus {
                api: path,
                status: status.as_u16(),
            });
        }
        let bytes = read_capped(path, response).await?;
        let decode_err = |e: serde_json::Error| Error::Decode {
            api: path,
            detail: truncate(&e.to_string()),
        };
        let envelope: Envelope = serde_json::from_slice(&bytes).map_err(decode_err)?;
        if envelope.error_code != 0 {
            return Err(Error::api_error(
                path,
                envelope.error_code,
                &envelope.error_info,
            ));
        }
        if envelope.action_status != "OK" {
            return Err(Error::Decode {
                api: path,
                detail: truncate(&format!(
                    "ActionStatus {:?} with ErrorCode 0",
                    envelope.action_status
                )),
            });
        }
        serde_json::from_slice(&bytes).map_err(decode_err)
    }

    /// The cached UserSig, regenerated when `force` is set or its refresh time has passed.
    fn usersig(&self, force: bool) -> String {
        let now = unix_now();
        let mut cached = self
            .inner
            .sig
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some(sig) = cached.as_ref().filter(|sig| !force && now < sig.refresh_at) {
            return sig.value.clone();
        }
        let config = &self.inner.config;
        let ttl = config.usersig_ttl.as_secs();
        // Refresh with a tenth of the validity left so clock skew between us and Tencent
        // cannot make an in-flight signature expire.
        let margin = (ttl / 10).max(1);
        let value = gen_usersig(
            config.secret_key.expose(),
            config.sdk_app_id,
            &config.admin_identifier,
            now,
            ttl,
        );
        self.inner.sig_generations.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(ttl_secs = ttl, "tencent im usersig generated");
        *cached = Some(CachedSig {
            value: value.clone(),
            refresh_at: now + ttl - margin,
        });
        value
    }
}

fn check_dropped(api: Api, reason: Option<&str>) -> Result<(), Error> {
    match reason {
        Some(reason) if !reason.is_empty() => {
            tracing::debug!(
                im_api = api.path(),
                drop_reason = reason,
                "tencent im message dropped"
            );
            Err(Error::Dropped {
                api: api.path(),
                reason: truncate(reason),
            })
        }
        _ => Ok(()),
    }
}

/// Largest response body read. Tencent's answers to the calls this client
/// makes are a few hundred bytes; a body past this is a misbehaving proxy or
/// gateway, and reading it whole would let one response grow memory without
/// bound. It is treated as a transient decode failure (retried, then
/// dead-lettered by the caller's budget).
pub const MAX_RESPONSE_BYTES: usize = 1 << 20;

/// The response body, refused as soon as it passes [`MAX_RESPONSE_BYTES`]
/// (by its announced length, or while it streams in).
async fn read_capped(
    path: &'static str,
    mut response: reqwest::Response,
) -> Result<Vec<u8>, Error> {
    let too_large = |size: u64| Error::Decode {
        api: path,
        detail: format!("response body of {size} bytes exceeds {MAX_RESPONSE_BYTES}"),
    };
    if let Some(length) = response.content_length()
        && length > MAX_RESPONSE_BYTES as u64
    {
        return Err(too_large(length));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| Error::from_reqwest(path, e))?
    {
        if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return Err(too_large((body.len() + chunk.len()) as u64));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
