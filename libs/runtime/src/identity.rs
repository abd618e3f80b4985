//! Who a caller is, from its TLS client certificate: the identity `[[callers]]` tables and
//! allow-lists name, stable across renewals (unlike a fingerprint).

/// The identity in a certificate: its URI SAN (`spiffe://…`), else its first DNS SAN, else
/// `cn:` and its subject CN; `None` if it names none, or several URIs (no single caller). A
/// CN is marked as one so that no CN ever passes for a URI or a DNS name an allow-list
/// names (a CA that issues CNs freely would otherwise issue any identity).
pub fn of_certificate(der: &[u8]) -> Option<String> {
    let der = rustls::pki_types::CertificateDer::from(der);
    let cert = webpki::EndEntityCert::try_from(&der).ok()?;
    let mut uris = cert.valid_uri_names();
    if let Some(uri) = uris.next() {
        return uris.next().is_none().then(|| uri.to_owned());
    }
    if let Some(dns) = cert.valid_dns_names().next() {
        return Some(dns.to_owned());
    }
    common_name(cert.subject()).map(|cn| format!("cn:{cn}"))
}

/// One DER element of `input`: its tag, its content, and what follows it.
fn der_element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = match first {
        0..=0x7f => (usize::from(first), rest),
        0x81 => (usize::from(*rest.first()?), rest.get(1..)?),
        0x82 => (
            usize::from(u16::from_be_bytes([*rest.first()?, *rest.get(1)?])),
            rest.get(2..)?,
        ),
        _ => return None,
    };
    Some((tag, rest.get(..len)?, rest.get(len..)?))
}

/// The CN of a DER subject (the content of its SEQUENCE of RDNs), walked element by element
/// so that the bytes of another attribute's value are never taken for a CN; `None` unless
/// there is exactly one, a UTF8String, PrintableString or IA5String.
pub(crate) fn common_name(subject: &[u8]) -> Option<String> {
    const CN: [u8; 3] = [0x55, 0x04, 0x03];
    let mut found = None;
    let mut rdns = subject;
    while !rdns.is_empty() {
        let (0x31, set, rest) = der_element(rdns)? else {
            return None;
        };
        rdns = rest;
        let mut attributes = set;
        while !attributes.is_empty() {
            let (0x30, attribute, rest) = der_element(attributes)? else {
                return None;
            };
            attributes = rest;
            let (0x06, oid, value) = der_element(attribute)? else {
                return None;
            };
            if oid != CN {
                continue;
            }
            let (tag, text, _) = der_element(value)?;
            if !matches!(tag, 0x0c | 0x13 | 0x16) || found.is_some() {
                return None;
            }
            found = Some(String::from_utf8(text.to_vec()).ok()?);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An RDN SET holding one attribute.
    fn rdn(oid_last: u8, tag: u8, value: &[u8]) -> Vec<u8> {
        let mut attribute = vec![0x06, 0x03, 0x55, 0x04, oid_last, tag, value.len() as u8];
        attribute.extend_from_slice(value);
        let mut sequence = vec![0x30, attribute.len() as u8];
        sequence.extend(attribute);
        let mut set = vec![0x31, sequence.len() as u8];
        set.extend(sequence);
        set
    }

    #[test]
    fn the_common_name_is_the_cn_attribute_and_nothing_that_looks_like_it() {
        let subject = [rdn(0x0a, 0x0c, b"Corp"), rdn(0x03, 0x0c, b"payments")].concat();
        assert_eq!(common_name(&subject).as_deref(), Some("payments"));
        // An organisation whose name carries the CN attribute's bytes.
        let mut tricky = b"x".to_vec();
        tricky.extend_from_slice(&[0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, 0x06]);
        tricky.extend_from_slice(b"victim");
        let subject = [rdn(0x0a, 0x0c, &tricky), rdn(0x03, 0x0c, b"me")].concat();
        assert_eq!(common_name(&subject).as_deref(), Some("me"));
        let subject = rdn(0x0a, 0x0c, &tricky);
        assert_eq!(common_name(&subject), None, "no CN attribute at all");
        let two = [rdn(0x03, 0x0c, b"a"), rdn(0x03, 0x0c, b"b")].concat();
        assert_eq!(common_name(&two), None);
        assert_eq!(common_name(&subject[..5]), None, "cut short");
    }
}
