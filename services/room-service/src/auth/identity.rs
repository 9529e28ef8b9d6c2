//! The identity in a caller's client certificate: its DNS and URI subject
//! alternative names and its subject's common name. The TLS handshake has
//! already verified the chain against `grpc_tls.client_ca_file`; this only
//! reads which of the CA's certificates it was, for authorisation.

use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// Most names read from one certificate; a certificate listing more is
/// read no further (a real one names a handful).
const MAX_NAMES: usize = 32;

/// The names a DER certificate identifies its holder by (empty when it does
/// not parse: the handshake accepted it, so that cannot happen in practice,
/// and no name means no permission).
pub fn certificate_names(der: &[u8]) -> Vec<String> {
    let Ok((_, certificate)) = X509Certificate::from_der(der) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    if let Ok(Some(alternative)) = certificate.subject_alternative_name() {
        for name in &alternative.value.general_names {
            match name {
                GeneralName::DNSName(name) | GeneralName::URI(name) => {
                    names.push((*name).to_owned());
                }
                _ => {}
            }
        }
    }
    for common_name in certificate.subject().iter_common_name() {
        if let Ok(name) = common_name.as_str() {
            names.push(name.to_owned());
        }
    }
    names.truncate(MAX_NAMES);
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_alternative_names_and_the_common_name() {
        let mut params = rcgen_params(&["gateway.hyapp.svc"]);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "gateway");
        params.subject_alt_names.push(rcgen::SanType::URI(
            "spiffe://hyapp/gateway".try_into().unwrap(),
        ));
        let key = rcgen::KeyPair::generate().unwrap();
        let certificate = params.self_signed(&key).unwrap();
        let names = certificate_names(certificate.der());
        assert_eq!(
            names,
            ["gateway.hyapp.svc", "spiffe://hyapp/gateway", "gateway"]
        );
        assert!(certificate_names(b"not a certificate").is_empty());
    }

    fn rcgen_params(names: &[&str]) -> rcgen::CertificateParams {
        rcgen::CertificateParams::new(
            names
                .iter()
                .map(|name| (*name).to_owned())
                .collect::<Vec<_>>(),
        )
        .unwrap()
    }
}
