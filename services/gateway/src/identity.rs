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

/// `text` split at each `separator` outside double quotes; `None` when a quote or an escape is
/// left open: what follows it, a sidecar's appended element among it, would read as the inside
/// of the client's quoted value.
fn split_unquoted(text: &str, separator: char) -> Option<Vec<&str>> {
    let (mut parts, mut start, mut quoted, mut escaped) = (Vec::new(), 0, false, false);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            c if c == separator && !quoted => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    (!quoted && !escaped).then_some(parts)
}

/// The identity in an Envoy `x-forwarded-client-cert` value: its URI, else its DNS. Only a
/// value of one element is believed (the sidecar must replace the header, not append to
/// what the client sent: Envoy's SANITIZE_SET), and only one URI in it; quoted values (a
/// Subject may hold `;` and `,`) are read as values, never as keys, and a value whose quotes
/// do not close is not believed.
pub fn of_forwarded(header: &str) -> Option<String> {
    let [element] = split_unquoted(header, ',')?[..] else {
        return None;
    };
    let pairs: Vec<(String, String)> = split_unquoted(element, ';')?
        .into_iter()
        .filter_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            let value = value.trim();
            let value = match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
                Some(inner) => inner.replace("\\\"", "\""),
                None => value.to_owned(),
            };
            Some((key.trim().to_ascii_uppercase(), value))
        })
        .collect();
    let named = |key: &str| {
        pairs
            .iter()
            .filter(|(k, v)| k == key && !v.is_empty())
            .map(|(_, v)| v.clone())
            .collect::<Vec<_>>()
    };
    match (named("URI").as_slice(), named("DNS").first()) {
        ([uri], _) => Some(uri.clone()),
        ([], Some(dns)) => Some(dns.clone()),
        _ => None,
    }
}

/// The caller of `request`: from its client certificate, else from the mesh's header when
/// the request came from a sidecar; empty when nothing authenticates it.
pub fn caller<T>(request: &Request<T>, mesh: Option<&MeshConfig>) -> String {
    if let Some(certs) = request.peer_certs() {
        return certs
            .first()
            .and_then(|c| sigcast_runtime::identity::of_certificate(c))
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
    // One line of the header, or none believed: a sidecar that appends may add its own line
    // after the client's, and `get` answers the first.
    let mut lines = request.metadata().get_all(mesh.header.as_str()).iter();
    match (lines.next(), lines.next()) {
        (Some(line), None) => line
            .to_str()
            .ok()
            .and_then(of_forwarded)
            .unwrap_or_default(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use tonic::transport::server::TcpConnectInfo;

    #[test]
    fn one_forwarded_element_with_one_uri_is_believed() {
        assert_eq!(
            of_forwarded("By=spiffe://corp/gw;Hash=cd;Subject=\"CN=x\";URI=spiffe://corp/payments")
                .as_deref(),
            Some("spiffe://corp/payments")
        );
        assert_eq!(
            of_forwarded("Hash=ab;DNS=payments.corp").as_deref(),
            Some("payments.corp")
        );
        assert_eq!(of_forwarded("Hash=ab"), None);
        // A client that sent its own header, appended to: not believed.
        assert_eq!(
            of_forwarded("URI=spiffe://corp/victim,By=spiffe://corp/gw;URI=spiffe://corp/me"),
            None
        );
        // A Subject that spells a URI inside its quotes is a value, not a key.
        assert_eq!(
            of_forwarded("Subject=\"CN=me;URI=spiffe://corp/victim,O=x\";URI=spiffe://corp/me")
                .as_deref(),
            Some("spiffe://corp/me")
        );
        assert_eq!(
            of_forwarded("URI=spiffe://corp/a;URI=spiffe://corp/b"),
            None,
            "two URIs name no single caller"
        );
    }

    #[test]
    fn a_quote_the_client_left_open_does_not_swallow_what_the_sidecar_appended() {
        // Istio's sidecars append to the client's header by default (APPEND_FORWARD): a
        // client that opens a quote and never closes it made the comma and the sidecar's
        // element read as the inside of its quoted value, and its own URI the caller's
        // (review, thirteenth session).
        let appended = "URI=spiffe://corp/victim;Subject=\",By=spiffe://corp/gw;Hash=ab;\
                        Subject=\"\";URI=spiffe://corp/me";
        assert_eq!(of_forwarded(appended), None);
        assert_eq!(
            of_forwarded("URI=spiffe://corp/victim;Subject=\"CN=x"),
            None
        );
        assert_eq!(
            of_forwarded("URI=spiffe://corp/victim;Subject=\"CN=x\\"),
            None,
            "an escape with nothing after it"
        );
    }

    fn from(addr: &str, header: Option<&str>) -> Request<()> {
        let mut request = Request::new(());
        request.extensions_mut().insert(TcpConnectInfo {
            local_addr: None,
            remote_addr: Some(addr.parse::<SocketAddr>().unwrap()),
        });
        if let Some(value) = header {
            request
                .metadata_mut()
                .insert("x-forwarded-client-cert", value.parse().unwrap());
        }
        request
    }

    #[test]
    fn the_forwarded_identity_is_believed_only_from_a_sidecar() {
        let mesh = MeshConfig {
            sidecars: vec!["127.0.0.1".parse().unwrap()],
            header: default_header(),
        };
        let header = Some("URI=spiffe://corp/payments");
        assert_eq!(
            caller(&from("127.0.0.1:4000", header), Some(&mesh)),
            "spiffe://corp/payments"
        );
        assert_eq!(caller(&from("10.0.0.7:4000", header), Some(&mesh)), "");
        assert_eq!(caller(&from("127.0.0.1:4000", None), Some(&mesh)), "");
        assert_eq!(caller(&from("127.0.0.1:4000", header), None), "");
        // The client's own line, and the sidecar's after it: neither is believed.
        let mut two_lines = from("127.0.0.1:4000", Some("URI=spiffe://corp/victim"));
        two_lines.metadata_mut().append(
            "x-forwarded-client-cert",
            "URI=spiffe://corp/me".parse().unwrap(),
        );
        assert_eq!(caller(&two_lines, Some(&mesh)), "");
    }
}
