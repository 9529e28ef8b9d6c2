//! Forwarding to the instance that holds a room's lease
//! (docs/design.md#scale-out): any instance accepts any call; when another
//! live instance holds the room, the call goes to it once over its
//! `RoomPeer` gRPC service, with the caller's remaining deadline and
//! metadata, and the caller gets the holder's answer. A forwarded command
//! carries the forwarding instance's command span as its `traceparent`
//! metadata, so the holder's span is its child. A forwarded command is the
//! gateway's request itself (`PeerCommand`), which the holder validates again.
//!
//! [`CallContext`] is what travels with a call; [`Peers`] keeps one lazily
//! connected channel per holder address, over TLS (`peer_tls`) when the
//! holder advertised an `https://` URL.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hyapp_api::room::room_peer_client::RoomPeerClient;
use hyapp_api::room::{CommandReply, GetRoomRequest, HeartbeatRequest, PeerCommand, RoomSnapshot};
use tonic::metadata::{KeyAndValueRef, MetadataMap};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use crate::Error;
use crate::config::{PeerAddressConfig, PeerAddressPolicy};
use crate::validate::CommandRequest;

/// Response metadata naming the instance that executed a call.
pub const SERVED_BY: &str = "x-room-served-by";
/// Response metadata with the advertised URL of the instance that executed
/// a call: the routing hint, where a gateway can send the room's next calls
/// without the extra hop (docs/gateway.md).
pub const SERVED_BY_ADDRESS: &str = "x-room-served-by-address";
/// Request metadata of a forwarded call: the forwarding node's id.
pub const FORWARDED_BY: &str = "x-room-forwarded-by";
/// W3C trace context metadata.
const TRACEPARENT: &str = "traceparent";

/// Metadata that belongs to one HTTP/2 hop, that we set ourselves, or that
/// proves who the caller is, and is therefore not copied onto the forwarded
/// call: the entry instance checked the caller's credentials, and the holder
/// trusts the forwarding instance's certificate instead. A credential never
/// leaves the instance it was sent to, even to an address read from Redis.
const HOP_METADATA: [&str; 13] = [
    "authorization",
    "cookie",
    "proxy-authorization",
    "grpc-timeout",
    "grpc-encoding",
    "grpc-accept-encoding",
    "te",
    "content-type",
    "user-agent",
    "host",
    SERVED_BY,
    SERVED_BY_ADDRESS,
    FORWARDED_BY,
];

/// Most holder addresses with a cached channel; past it the cache starts
/// over (addresses change as pods are replaced, so it must not only grow).
const MAX_CACHED_CHANNELS: usize = 256;
/// How often an HTTP/2 PING checks a channel to a holder, idle or not.
const PEER_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// What travels with one call into [`crate::Rooms`].
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    /// When the caller stops waiting (`grpc-timeout`), if it said.
    pub deadline: Option<Instant>,
    /// The caller's metadata to carry to the holder (hop headers removed).
    pub metadata: MetadataMap,
    /// Whether this call may be forwarded: false for a call that was
    /// forwarded to us already (at most one hop) and for sweeps that every
    /// instance runs anyway.
    pub may_forward: bool,
}

impl CallContext {
    /// A call room-service makes itself (a consumer's command): forwardable,
    /// no deadline but the peer timeout, no caller metadata.
    pub fn internal() -> Self {
        Self {
            may_forward: true,
            ..Self::default()
        }
    }

    /// A call served here only, never forwarded.
    pub fn local_only() -> Self {
        Self::default()
    }

    /// The context of a gRPC request that arrived at `received`: its deadline
    /// and its metadata minus hop headers. A request that carries
    /// [`FORWARDED_BY`] was forwarded once already and is served here.
    pub fn from_request(metadata: &MetadataMap, received: Instant) -> Self {
        let deadline = metadata
            .get("grpc-timeout")
            .and_then(|value| value.to_str().ok())
            .and_then(parse_grpc_timeout)
            .map(|timeout| received + timeout);
        let mut carried = MetadataMap::new();
        for entry in metadata.iter() {
            match entry {
                KeyAndValueRef::Ascii(key, value) => {
                    if !HOP_METADATA.contains(&key.as_str()) {
                        carried.insert(key.clone(), value.clone());
                    }
                }
                KeyAndValueRef::Binary(key, value) => {
                    carried.insert_bin(key.clone(), value.clone());
                }
            }
        }
        Self {
            deadline,
            metadata: carried,
            may_forward: metadata.get(FORWARDED_BY).is_none(),
        }
    }

    /// Time left before the deadline, capped by `cap`; `None` when it passed.
    fn remaining(&self, cap: Duration) -> Option<Duration> {
        match self.deadline {
            None => Some(cap),
            Some(deadline) => deadline
                .checked_duration_since(Instant::now())
                .filter(|left| !left.is_zero())
                .map(|left| left.min(cap)),
        }
    }
}

/// Parses a `grpc-timeout` value: up to 8 digits and a unit (H M S m u n).
pub fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    if value.len() < 2 || value.len() > 9 {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(amount.checked_mul(3600)?),
        "M" => Duration::from_secs(amount.checked_mul(60)?),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// A value and the node that produced it (the `x-room-served-by` and
/// `x-room-served-by-address` headers).
#[derive(Debug, Clone)]
pub struct Served<T> {
    /// The answer.
    pub value: T,
    /// Node id of the instance that executed the call.
    pub node_id: String,
    /// That instance's advertised gRPC URL (empty when a holder did not say).
    pub address: String,
}

impl<T> Served<T> {
    /// The same origin with another value.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Served<U> {
        Served {
            value: f(self.value),
            node_id: self.node_id,
            address: self.address,
        }
    }
}

/// Whether a failed forward should be retried here, once: the holder could
/// not be reached (no room-service reason on the status) or said it is
/// stopping or no longer the holder, so its lease is released or about to be.
pub fn retry_here(error: &Error) -> bool {
    match error {
        Error::Forwarded(_) => matches!(
            error.forwarded_reason(),
            None | Some("shutting_down" | "room_owned_elsewhere")
        ),
        _ => false,
    }
}

/// Clients of the other instances.
#[derive(Debug)]
pub struct Peers {
    node_id: String,
    advertised_url: String,
    timeout: Duration,
    tls: Option<ClientTlsConfig>,
    addresses: PeerAddressPolicy,
    channels: Mutex<HashMap<String, Channel>>,
}

impl Peers {
    /// Clients that present `node_id` as the forwarder and give a call
    /// without a deadline at most `timeout`; `advertised_url` is this
    /// instance's own address, as its leases name it.
    pub fn new(node_id: &str, advertised_url: &str, timeout: Duration) -> Self {
        Self {
            node_id: node_id.to_owned(),
            advertised_url: advertised_url.to_owned(),
            timeout,
            tls: None,
            addresses: PeerAddressPolicy::new(&PeerAddressConfig::default(), advertised_url)
                .expect("the default peer_addresses has no pattern to refuse"),
            channels: Mutex::new(HashMap::new()),
        }
    }

    /// Dials only holder addresses `addresses` admits (`peer_addresses`).
    pub fn with_address_policy(mut self, addresses: PeerAddressPolicy) -> Self {
        self.addresses = addresses;
        self
    }

    /// Why the holder address `url`, read from a lease, may not be dialled.
    pub fn refuses(&self, url: &str) -> Option<String> {
        self.addresses.check(url).err()
    }

    /// Calls holders that advertise `https://` over TLS with `tls` (the
    /// loaded `peer_tls`). Without it such a holder cannot be called.
    pub fn with_tls(mut self, tls: ClientTlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// This node's id.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// This instance's advertised gRPC URL (the address in its leases).
    pub fn advertised_url(&self) -> &str {
        &self.advertised_url
    }

    fn client(&self, address: &str) -> Result<RoomPeerClient<Channel>, Error> {
        let mut channels = self
            .channels
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some(channel) = channels.get(address) {
            return Ok(RoomPeerClient::new(channel.clone()));
        }
        let unusable = |error: &dyn std::fmt::Display| {
            Error::Internal(format!(
                "lease names an unusable address {address:?}: {error}"
            ))
        };
        let mut endpoint = Endpoint::from_shared(address.to_owned()).map_err(|e| unusable(&e))?;
        if address.starts_with("https://") {
            // A holder with a TLS listener. Without peer TLS (a plaintext
            // instance while the fleet is switched to TLS) it is answered
            // like an unreachable holder.
            let tls = self.tls.clone().ok_or_else(|| {
                Error::Forwarded(Box::new(tonic::Status::unavailable(format!(
                    "holder {address} speaks TLS and this instance has no grpc_tls"
                ))))
            })?;
            endpoint = endpoint.tls_config(tls).map_err(|e| unusable(&e))?;
        }
        // Every call carries its deadline; the PINGs find a holder whose
        // connection stalled or went half-open between calls and replace
        // the connection (docs/design.md#client-timeouts).
        let channel = endpoint
            .connect_timeout(self.timeout.min(Duration::from_secs(2)))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(PEER_KEEPALIVE_INTERVAL)
            .keep_alive_timeout(self.timeout.min(Duration::from_secs(2)))
            .keep_alive_while_idle(true)
            .connect_lazy();
        if channels.len() >= MAX_CACHED_CHANNELS {
            channels.clear();
        }
        channels.insert(address.to_owned(), channel.clone());
        Ok(RoomPeerClient::new(channel))
    }

    fn request<T>(&self, message: T, call: &CallContext) -> Result<tonic::Request<T>, Error> {
        let remaining = call.remaining(self.timeout).ok_or_else(|| {
            Error::Forwarded(Box::new(tonic::Status::deadline_exceeded(
                "the caller's deadline passed before the call could be forwarded",
            )))
        })?;
        let mut request = tonic::Request::new(message);
        *request.metadata_mut() = call.metadata.clone();
        if let Ok(value) = self.node_id.parse() {
            request.metadata_mut().insert(FORWARDED_BY, value);
        }
        // A command is forwarded from inside its span: the holder continues
        // that span rather than the gateway's (reads, which have no span of
        // their own, keep the caller's).
        let traceparent = service_kit::trace::current_traceparent();
        if !traceparent.is_empty()
            && let Ok(value) = traceparent.parse()
        {
            request.metadata_mut().insert(TRACEPARENT, value);
        }
        request.set_timeout(remaining);
        Ok(request)
    }

    fn served<T>(response: tonic::Response<T>) -> Served<T> {
        let header = |key: &str| {
            response
                .metadata()
                .get(key)
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let (node_id, address) = (header(SERVED_BY), header(SERVED_BY_ADDRESS));
        Served {
            value: response.into_inner(),
            node_id,
            address,
        }
    }

    /// Runs a validated command on the holder at `address`.
    pub async fn execute(
        &self,
        address: &str,
        request: &CommandRequest,
        call: &CallContext,
    ) -> Result<Served<CommandReply>, Error> {
        let forwarded = request.forward.clone().ok_or_else(|| {
            Error::Internal(format!(
                "{} is served where it is issued and never forwarded",
                request.command.name()
            ))
        })?;
        let message = PeerCommand {
            request: Some(forwarded),
            origin_node: self.node_id.clone(),
        };
        let request = self.request(message, call)?;
        self.client(address)?
            .execute(request)
            .await
            .map(Self::served)
            .map_err(|status| Error::Forwarded(Box::new(status)))
    }

    /// Reads the room on the holder at `address`.
    pub async fn get_room(
        &self,
        address: &str,
        room_id: &str,
        call: &CallContext,
    ) -> Result<Served<RoomSnapshot>, Error> {
        let request = self.request(
            GetRoomRequest {
                room_id: room_id.to_owned(),
            },
            call,
        )?;
        self.client(address)?
            .get_room(request)
            .await
            .map(Self::served)
            .map_err(|status| Error::Forwarded(Box::new(status)))
    }

    /// Records a heartbeat on the holder at `address`; returns the expiry.
    pub async fn heartbeat(
        &self,
        address: &str,
        room_id: &str,
        user_id: &str,
        call: &CallContext,
    ) -> Result<Served<i64>, Error> {
        let request = self.request(
            HeartbeatRequest {
                room_id: room_id.to_owned(),
                user_id: user_id.to_owned(),
            },
            call,
        )?;
        self.client(address)?
            .heartbeat(request)
            .await
            .map(Self::served)
            .map(|served| served.map(|reply| reply.expires_at_ms))
            .map_err(|status| Error::Forwarded(Box::new(status)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_in_every_unit() {
        assert_eq!(parse_grpc_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_grpc_timeout("3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse_grpc_timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(parse_grpc_timeout("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse_grpc_timeout("7u"), Some(Duration::from_micros(7)));
        assert_eq!(parse_grpc_timeout("9n"), Some(Duration::from_nanos(9)));
        for bad in ["", "S", "5", "5s", "123456789S", "-1S", "1.5S"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn forwarded_calls_carry_metadata_but_not_hop_headers() {
        let mut metadata = MetadataMap::new();
        metadata.insert(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
                .parse()
                .unwrap(),
        );
        metadata.insert("x-request-id", "abc".parse().unwrap());
        metadata.insert("grpc-timeout", "1500m".parse().unwrap());
        metadata.insert("content-type", "application/grpc".parse().unwrap());
        let received = Instant::now();
        let call = CallContext::from_request(&metadata, received);
        assert!(call.may_forward);
        assert_eq!(call.deadline, Some(received + Duration::from_millis(1500)));
        assert!(call.metadata.get("traceparent").is_some());
        assert_eq!(call.metadata.get("x-request-id").unwrap(), "abc");
        assert!(call.metadata.get("grpc-timeout").is_none());
        assert!(call.metadata.get("content-type").is_none());

        metadata.insert(FORWARDED_BY, "node-a".parse().unwrap());
        assert!(!CallContext::from_request(&metadata, received).may_forward);
    }

    #[test]
    fn a_holders_reply_names_its_node_and_address() {
        let mut response = tonic::Response::new(7);
        let headers = response.metadata_mut();
        headers.insert(SERVED_BY, "node-b".parse().unwrap());
        headers.insert(SERVED_BY_ADDRESS, "http://10.0.0.2:7101".parse().unwrap());
        let served = Peers::served(response).map(|value| value * 2);
        assert_eq!(served.value, 14);
        assert_eq!(served.node_id, "node-b");
        assert_eq!(served.address, "http://10.0.0.2:7101");
        // An older holder that names no address: the hint is left empty.
        let served = Peers::served(tonic::Response::new(()));
        assert_eq!((served.node_id.as_str(), served.address.as_str()), ("", ""));
    }

    #[test]
    fn a_passed_deadline_is_not_forwarded_and_the_rest_is_capped() {
        let peers = Peers::new("node-a", "http://127.0.0.1:7101", Duration::from_secs(5));
        let late = CallContext {
            deadline: Some(Instant::now() - Duration::from_millis(1)),
            ..CallContext::internal()
        };
        assert!(peers.request((), &late).is_err());
        assert_eq!(
            CallContext::internal().remaining(Duration::from_secs(5)),
            Some(Duration::from_secs(5))
        );
    }

    #[tokio::test]
    async fn a_tls_holder_is_unreachable_without_peer_tls() {
        let peers = Peers::new("node-a", "http://127.0.0.1:7101", Duration::from_secs(5));
        let error = peers.client("https://10.0.0.7:7101").unwrap_err();
        assert!(retry_here(&error), "{error:?}");
        assert!(peers.client("http://10.0.0.7:7101").is_ok());
    }

    #[test]
    fn only_unreachable_or_departing_holders_are_retried_here() {
        let unreachable = Error::Forwarded(Box::new(tonic::Status::unavailable("connect refused")));
        assert!(retry_here(&unreachable));
        let stopping = Error::Forwarded(Box::new(tonic::Status::from(Error::ShuttingDown)));
        assert!(retry_here(&stopping));
        let refused = Error::Forwarded(Box::new(tonic::Status::from(Error::from(
            room_core::Rejection::SeatTaken,
        ))));
        assert!(!retry_here(&refused));
        assert!(!retry_here(&Error::ShuttingDown));
    }
}
