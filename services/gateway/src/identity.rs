//! Who is calling: the identity in the caller's client certificate, or — behind a service
//! mesh that terminates mTLS — in the certificate the sidecar forwards, believed only from the
//! configured sidecar address.

use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use tonic::Request;

/// `[mesh]`: the sidecar that terminates mTLS and forwards the client certificate's identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeshConfig {
    /// Addresses the sidecar connects from (usually 127.0.0.1). The header is ignored on a
    /// request from anywhere else.
    pub sidecars: Vec<IpAddr>,
    /// The header carrying the client certificate's identity, Envoy's format
    /// (`By=…;URI=spiffe://…;DNS=…`).
    #[serde(default = "default_header")]
    pub header: String,
}

fn default_header() -> String {
    "x-forwarded-client-cert".into()
}

/// The identity in a certificate: its first URI SAN (`spiffe://…`), else its first DNS SAN,
/// else its subject CN; `None` if it names none.
pub fn of_certificate(der: &[u8]) -> Option<String> {
    let der = rustls::pki_types::CertificateDer::from(der);
    let cert = webpki::EndEntityCert::try_from(&der).ok()?;
    if let Some(uri) = cert.valid_uri_names().next() {
        return Some(uri.to_owned());
    }
    if let Some(dns) = cert.valid_dns_names().next() {
        return Some(dns.to_owned());
    }
    common_name(cert.subject())
}

/// The CN of a DER subject (the content of its SEQUENCE of RDNs): the value after the
/// attribute type 2.5.4.3, a UTF8String or PrintableString of short length.
fn common_name(subject: &[u8]) -> Option<String> {
    const CN: [u8; 5] = [0x06, 0x03, 0x55, 0x04, 0x03];
    let at = subject.windows(CN.len()).position(|w| w == CN)? + CN.len();
    let (&tag, rest) = subject.get(at..)?.split_first()?;
    let (&len, rest) = rest.split_first()?;
    if !matches!(tag, 0x0c | 0x13) || len >= 0x80 {
        return None;
    }
    String::from_utf8(rest.get(..usize::from(len))?.to_vec()).ok()
}

/// The identity in an Envoy `x-forwarded-client-cert` value: of the last element (the hop
/// nearest to us), its URI, else its DNS.
pub fn of_forwarded(header: &str) -> Option<String> {
    let last = header.rsplit(',').next()?;
    let field = |name: &str| {
        last.split(';').find_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then(|| value.trim().trim_matches('"').to_owned())
                .filter(|v| !v.is_empty())
        })
    };
    field("URI").or_else(|| field("DNS"))
}

/// The caller of `request`: from its client certificate, else from the mesh's header when
/// the request came from a sidecar; empty when nothing authenticates it.
pub fn caller<T>(request: &Request<T>, mesh: Option<&MeshConfig>) -> String {
    if let Some(certs) = request.peer_certs() {
        return certs
            .first()
            .and_then(|c| of_certificate(c))
            .unwrap_or_default();
    }
    let Some(mesh) = mesh else {
        return String::new();
    };
    let from_sidecar = request
        .remote_addr()
        .is_some_and(|addr| mesh.sidecars.contains(&addr.ip()));
    if !from_sidecar {
        return String::new();
    }
    request
        .metadata()
        .get(mesh.header.as_str())
        .and_then(|v| v.to_str().ok())
        .and_then(of_forwarded)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_forwarded_identity_is_taken() {
        assert_eq!(
            of_forwarded(
                "By=spiffe://corp/gw;Hash=ab;URI=spiffe://corp/a,By=spiffe://corp/gw;Hash=cd;Subject=\"CN=x\";URI=spiffe://corp/payments"
            )
            .as_deref(),
            Some("spiffe://corp/payments")
        );
        assert_eq!(
            of_forwarded("Hash=ab;DNS=payments.corp").as_deref(),
            Some("payments.corp")
        );
        assert_eq!(of_forwarded("Hash=ab"), None);
    }

    #[test]
    fn a_common_name_is_read_from_a_subject() {
        // SET { SEQUENCE { OID 2.5.4.3, UTF8String "payments" } }
        let mut subject = vec![
            0x31, 0x11, 0x30, 0x0f, 0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, 8,
        ];
        subject.extend_from_slice(b"payments");
        assert_eq!(common_name(&subject).as_deref(), Some("payments"));
        assert_eq!(common_name(&subject[..12]), None, "cut short");
    }
}
