//! Which room-service instance each call of the workload goes to. Every
//! instance accepts every command (it forwards the command to the instance
//! holding the room's lease), so the workload spreads its calls as a load
//! balancer would: each call, retries included, to a random instance. The
//! choice has its own seeded generator per client, so the commands a seed
//! draws do not depend on how many instances run. Replies name the instance
//! that executed them in `x-room-served-by`, which the ledger records.

use hyapp_api::room::room_service_client::RoomServiceClient;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;
use tonic::metadata::MetadataMap;
use tonic::transport::{Channel, Endpoint};

/// Per-call deadline.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Response metadata naming the room-service instance that executed a command.
const SERVED_BY: &str = "x-room-served-by";

/// One room-service instance: the name the ledger records, and its client.
#[derive(Debug, Clone)]
pub struct Instance {
    /// Name (the instance's node id when given as `NAME=URL`, else the URL).
    pub name: String,
    client: RoomServiceClient<Channel>,
}

impl Instance {
    /// `NAME=URL` or a bare `URL`; connects lazily, so an instance that is
    /// down now is simply an indefinite answer when picked.
    pub fn parse(spec: &str) -> anyhow::Result<Self> {
        let (name, url) = match spec.split_once('=') {
            Some((name, url)) if !name.contains("://") => (name, url),
            _ => (spec, spec),
        };
        let channel = Endpoint::from_shared(url.to_string())?
            .connect_timeout(Duration::from_secs(2))
            .timeout(CALL_TIMEOUT)
            .connect_lazy();
        Ok(Self {
            name: name.to_string(),
            client: RoomServiceClient::new(channel),
        })
    }

    /// A client of this instance (clones share its channel).
    pub fn client(&self) -> RoomServiceClient<Channel> {
        self.client.clone()
    }
}

/// Picks the instance of each call with its own seeded generator, so the
/// commands a seed draws are the same whatever the number of instances.
pub struct Router {
    instances: Vec<Instance>,
    rng: StdRng,
}

impl Router {
    /// The router of client `client` of the workload seeded `seed`.
    pub fn new(instances: &[Instance], seed: u64, client: u64) -> Self {
        Self {
            instances: instances.to_vec(),
            rng: StdRng::seed_from_u64(seed ^ 0x05EE_D0F5_CA1E ^ client.wrapping_mul(0x9E37_79B9)),
        }
    }

    /// The instance of the next call.
    pub fn pick(&mut self) -> &Instance {
        &self.instances[self.rng.random_range(0..self.instances.len())]
    }
}

/// The `x-room-served-by` value of an answer, empty when absent.
pub fn served_by(metadata: &MetadataMap) -> String {
    metadata
        .get(SERVED_BY)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    // A lazy channel still needs a runtime for its worker task.
    #[tokio::test]
    async fn instances_are_named_and_picked_evenly_by_seed() {
        let named = Instance::parse("room-service-2=http://127.0.0.1:7101").unwrap();
        assert_eq!(named.name, "room-service-2");
        let bare = Instance::parse("http://127.0.0.1:7101").unwrap();
        assert_eq!(bare.name, "http://127.0.0.1:7101");
        let instances: Vec<Instance> = ["a", "b", "c"]
            .iter()
            .map(|name| Instance::parse(&format!("{name}=http://127.0.0.1:1")).unwrap())
            .collect();
        let picks = |seed, client| {
            let mut router = Router::new(&instances, seed, client);
            (0..300)
                .map(|_| router.pick().name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(picks(7, 1), picks(7, 1));
        assert_ne!(picks(7, 1), picks(7, 2));
        for name in ["a", "b", "c"] {
            let count = picks(7, 1).iter().filter(|picked| *picked == name).count();
            assert!(
                (60..=140).contains(&count),
                "{name} picked {count} of 300 times"
            );
        }
    }

    #[test]
    fn the_executing_instance_is_read_from_the_answer() {
        let mut metadata = MetadataMap::new();
        assert_eq!(served_by(&metadata), "");
        metadata.insert(SERVED_BY, "room-service-3".parse().unwrap());
        assert_eq!(served_by(&metadata), "room-service-3");
    }
}
