//! The scaled-out topology of the reliability run: which instances of each
//! service run, the service an instance belongs to, and the listeners and
//! identity (node id, advertised URL) each further instance gets.

use crate::services::{Phase, Probe, Spec};

/// Names of the instances the reliability run may start of each service it
/// scales out, in start order: the first keeps the service's own name (its
/// log, its probe, its overrides), the others are `<service>-<n>`.
pub const INSTANCE_NAMES: &[&[&str]] = &[
    &["room-service", "room-service-2", "room-service-3"],
    &["outbox-relay", "outbox-relay-2"],
    &["im-bridge", "im-bridge-2"],
    &["activity-consumer", "activity-consumer-2"],
    &["notice-consumer", "notice-consumer-2"],
];

/// The service an instance belongs to: its name without a `-<n>` suffix.
pub fn role_of(instance: &str) -> &str {
    match instance.rsplit_once('-') {
        Some((service, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => service,
        _ => instance,
    }
}

/// Which instances of each scaled-out service run: every instance of one
/// service shares its database, Redis key prefix, broker and consumer group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    services: Vec<&'static [&'static str]>,
}

impl Topology {
    /// `room_services` room-service instances (1–3), two relays and
    /// `consumers` instances (1–2) of each consumer.
    pub fn new(room_services: usize, consumers: usize) -> Result<Self, String> {
        let take = |names: &'static [&'static str], count: usize| {
            (1..=names.len())
                .contains(&count)
                .then(|| &names[..count])
                .ok_or_else(|| format!("{}: 1 to {} instances, not {count}", names[0], names.len()))
        };
        let mut services = vec![take(INSTANCE_NAMES[0], room_services)?, INSTANCE_NAMES[1]];
        for names in &INSTANCE_NAMES[2..] {
            services.push(take(names, consumers)?);
        }
        Ok(Self { services })
    }

    /// Each scaled-out service's instances, first the service's own name.
    pub fn services(&self) -> impl Iterator<Item = &'static [&'static str]> + '_ {
        self.services.iter().copied()
    }

    /// Every instance of `instance`'s service in this run, itself included;
    /// empty when its service is not scaled out.
    pub fn siblings(&self, instance: &str) -> &'static [&'static str] {
        self.services
            .iter()
            .find(|names| names.contains(&instance))
            .copied()
            .unwrap_or_default()
    }
}

/// Instance `name` of `base` (scale-out): every `*_LISTEN` address moves to a
/// port from `port` (the HTTP listener carries the probe), then [`identify`].
/// Further instances start with the downstream services, once the first is
/// ready, as replicas join a running deployment.
pub fn instance(
    base: &Spec,
    name: &'static str,
    mut port: impl FnMut() -> Result<u16, String>,
) -> Result<Spec, String> {
    let mut spec = base.clone();
    spec.name = name;
    spec.phase = spec.phase.max(Phase::Downstream);
    for (key, value) in &mut spec.env {
        if key.ends_with("_LISTEN") {
            let moved = port()?;
            *value = format!("127.0.0.1:{moved}");
            if key.ends_with("__HTTP_LISTEN") {
                spec.probe = Probe::Readyz(moved);
            }
        }
    }
    identify(&mut spec);
    Ok(spec)
}

/// Gives an instance the identity its peers know it by: room-service its
/// lease node id (the `x-room-served-by` of its replies) and the URL the
/// other instances forward commands to; the relay its node id in shard
/// leases. Both are the instance name, so logs, faults and the ledger agree.
pub fn identify(spec: &mut Spec) {
    let own = |key: &str, value: String| (key.to_string(), value);
    let identity = match role_of(spec.name) {
        "room-service" => vec![
            own("ROOM__NODE_ID", spec.name.to_string()),
            own(
                "ROOM__ADVERTISE_URL",
                format!(
                    "http://{}",
                    spec.env_value("ROOM__GRPC_LISTEN").unwrap_or_default()
                ),
            ),
        ],
        "outbox-relay" => vec![own("RELAY__OUTBOX_WORKER__NODE_ID", spec.name.to_string())],
        _ => Vec::new(),
    };
    for (key, value) in identity {
        spec.env.retain(|(existing, _)| *existing != key);
        spec.env.push((key, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::{Ports, specs};

    #[test]
    fn instances_get_their_own_listeners_and_identity() {
        let ports = Ports::free().unwrap();
        let specs = specs(&ports, "db", &[]);
        let base = |name: &str| specs.iter().find(|spec| spec.name == name).unwrap();
        let mut next = 40_000;
        let mut port = || {
            next += 1;
            Ok(next)
        };
        let room = instance(base("room-service"), "room-service-2", &mut port).unwrap();
        assert_eq!(room.env_value("ROOM__GRPC_LISTEN"), Some("127.0.0.1:40001"));
        assert_eq!(room.env_value("ROOM__HTTP_LISTEN"), Some("127.0.0.1:40002"));
        assert_eq!(room.probe, Probe::Readyz(40_002));
        assert_eq!(
            room.phase,
            Phase::Downstream,
            "after the first ran the migrations"
        );
        assert_eq!(room.env_value("ROOM__NODE_ID"), Some("room-service-2"));
        assert_eq!(
            room.env_value("ROOM__ADVERTISE_URL"),
            Some("http://127.0.0.1:40001")
        );
        assert_eq!(
            room.env_value("ROOM__MYSQL__URL"),
            base("room-service").env_value("ROOM__MYSQL__URL")
        );
        let activity =
            instance(base("activity-consumer"), "activity-consumer-2", &mut port).unwrap();
        assert_eq!(
            activity.env_value("ACTIVITY__GRPC_LISTEN"),
            Some("127.0.0.1:40003")
        );
        assert_eq!(activity.probe, Probe::Readyz(40_004));
        assert_eq!(activity.env_value("ACTIVITY__NODE_ID"), None);
        let relay = instance(base("outbox-relay"), "outbox-relay-2", &mut port).unwrap();
        assert_eq!(
            relay.env_value("RELAY__OUTBOX_WORKER__NODE_ID"),
            Some("outbox-relay-2")
        );
    }

    #[test]
    fn instances_belong_to_their_service() {
        assert_eq!(role_of("room-service-3"), "room-service");
        assert_eq!(role_of("room-service"), "room-service");
        assert_eq!(role_of("fake-tencent-im"), "fake-tencent-im");
        let topology = Topology::new(3, 2).unwrap();
        assert_eq!(
            topology.siblings("im-bridge-2"),
            ["im-bridge", "im-bridge-2"]
        );
        assert_eq!(topology.siblings("room-service").len(), 3);
        assert!(topology.siblings("fake-wallet").is_empty());
        assert_eq!(
            Topology::new(1, 1).unwrap().siblings("notice-consumer"),
            ["notice-consumer"]
        );
        assert!(Topology::new(4, 2).is_err());
        assert!(Topology::new(3, 0).is_err());
    }
}
