//! The checks of `mysql.ssl_mode`, `mysql.ssl_ca` and
//! `mysql.allow_insecure_transport` made before any connection.

use super::*;

fn refusal(config: &MysqlConfig) -> String {
    match config.connect_options() {
        Ok(_) => panic!("accepted {config:?}"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn verifying_modes_need_an_existing_ca_file() {
    for mode in [MysqlSslMode::VerifyCa, MysqlSslMode::VerifyIdentity] {
        let config = MysqlConfig {
            ssl_mode: mode,
            ..MysqlConfig::default()
        };
        assert!(refusal(&config).contains("mysql.ssl_ca is required"));
        let config = MysqlConfig {
            ssl_mode: mode,
            ssl_ca: "/nonexistent/ca.pem".into(),
            ..MysqlConfig::default()
        };
        assert!(refusal(&config).contains("mysql.ssl_ca `/nonexistent/ca.pem`"));
    }
}

#[test]
fn a_ca_file_without_a_verifying_mode_is_refused() {
    let config = MysqlConfig {
        ssl_mode: MysqlSslMode::Required,
        ssl_ca: "/etc/hostname".into(),
        ..MysqlConfig::default()
    };
    assert!(refusal(&config).contains("does not check the certificate"));
}

#[test]
fn url_tls_settings_must_agree_with_the_keys() {
    let config = MysqlConfig {
        url: "mysql://root@db:3306/hyapp?ssl-mode=DISABLED".into(),
        ..MysqlConfig::default()
    };
    let error = refusal(&config);
    assert!(
        error.contains("ssl-mode=DISABLED") && error.contains("mysql.ssl_mode"),
        "{error}"
    );
    let config = MysqlConfig {
        url: "mysql://root@db:3306/hyapp?sslca=/other.pem".into(),
        ..MysqlConfig::default()
    };
    assert!(refusal(&config).contains("mysql.ssl_ca"));

    let agreeing = MysqlConfig {
        url: "mysql://root@db:3306/hyapp?ssl-mode=REQUIRED&charset=utf8mb4".into(),
        ssl_mode: MysqlSslMode::Required,
        allow_insecure_transport: true,
        ..MysqlConfig::default()
    };
    agreeing.connect_options().expect("agreeing URL accepted");
    MysqlConfig::default()
        .connect_options()
        .expect("defaults accepted");
}

#[test]
fn an_unverified_mode_off_this_machine_is_refused_unless_allowed() {
    let ca = std::env::temp_dir().join(format!("hyapp-db-ca-{}", std::process::id()));
    std::fs::write(&ca, "ca").unwrap();
    let ca = ca.display().to_string();
    for mode in [
        MysqlSslMode::Disabled,
        MysqlSslMode::Preferred,
        MysqlSslMode::Required,
    ] {
        let remote = MysqlConfig {
            url: "mysql://hyapp@db.internal:3306/hyapp".into(),
            ssl_mode: mode,
            ..MysqlConfig::default()
        };
        let error = refusal(&remote);
        assert!(
            error.contains(&format!("mysql.ssl_mode `{}`", mode.as_str()))
                && error.contains("`db.internal`")
                && error.contains("mysql.allow_insecure_transport"),
            "{error}"
        );
        let allowed = MysqlConfig {
            allow_insecure_transport: true,
            ..remote
        };
        allowed.connect_options().expect("explicitly allowed");
        for local in [
            "mysql://root@127.0.0.1:3306/hyapp",
            "mysql://root@localhost/hyapp",
            "mysql://root@[::1]:3306/hyapp",
            "mysql://root@db/hyapp?socket=/run/mysqld/mysqld.sock",
        ] {
            let config = MysqlConfig {
                url: local.into(),
                ssl_mode: mode,
                ..MysqlConfig::default()
            };
            config.connect_options().expect(local);
        }
    }
    for mode in [MysqlSslMode::VerifyCa, MysqlSslMode::VerifyIdentity] {
        let verified = MysqlConfig {
            url: "mysql://hyapp@db.internal:3306/hyapp".into(),
            ssl_mode: mode,
            ssl_ca: ca.clone(),
            ..MysqlConfig::default()
        };
        verified
            .connect_options()
            .expect("verified remote accepted");
    }
    let _ = std::fs::remove_file(&ca);
}
