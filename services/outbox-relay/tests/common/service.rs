//! The relay service as its tests configure it before `App::build`.

use outbox_relay::config::RelayServiceConfig;
use service_kit::db::MysqlConfig;

/// The relay service's config over the test database at `url`: its admin
/// port on a free loopback port and the test worker settings named `node`
/// ([`super::worker_config`]); the rest as the defaults have it.
pub fn service_config(url: &str, node: &str) -> RelayServiceConfig {
    RelayServiceConfig {
        mysql: MysqlConfig {
            url: url.to_owned(),
            ..MysqlConfig::default()
        },
        http_listen: "127.0.0.1:0".into(),
        outbox_worker: super::worker_config(node),
        ..RelayServiceConfig::default()
    }
}
