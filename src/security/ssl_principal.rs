//! The principal of a TLS client: its certificate's subject as Java's RFC 2253 string, which
//! `ssl.principal.mapping.rules` (config::principal_rules) then maps; and the principal of a
//! client that did not authenticate.

use crate::config::principal_rules::{PrincipalError, PrincipalMapper};

/// Kafka's principal of a connection that did not authenticate.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// The Kafka principal (`User:<name>`) of a client certificate (DER), as `mapper` names it.
pub fn principal(mapper: &PrincipalMapper, certificate: &[u8]) -> Result<String, PrincipalError> {
    let dn = subject_rfc2253(certificate).map_err(PrincipalError::Certificate)?;
    Ok(format!("User:{}", mapper.name(&dn)?))
}

/// One DER element: its tag, its contents and the whole encoding.
struct Der<'a> {
    tag: u8,
    contents: &'a [u8],
    whole: &'a [u8],
}

/// Reads the element at the start of `input`; returns it and what follows.
fn der(input: &[u8]) -> Result<(Der<'_>, &[u8]), String> {
    let short = || "truncated DER".to_string();
    let (&tag, rest) = input.split_first().ok_or_else(short)?;
    let (&first, mut rest) = rest.split_first().ok_or_else(short)?;
    let len = if first < 0x80 {
        first as usize
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return Err("bad DER length".into());
        }
        let len = rest[..n].iter().fold(0usize, |a, b| (a << 8) | *b as usize);
        rest = &rest[n..];
        len
    };
    if rest.len() < len {
        return Err(short());
    }
    let header = input.len() - rest.len();
    let el = Der {
        tag,
        contents: &rest[..len],
        whole: &input[..header + len],
    };
    Ok((el, &rest[len..]))
}

/// The elements inside a constructed element.
fn children<'a>(mut contents: &'a [u8]) -> Result<Vec<Der<'a>>, String> {
    let mut out = Vec::new();
    while !contents.is_empty() {
        let (el, rest) = der(contents)?;
        out.push(el);
        contents = rest;
    }
    Ok(out)
}

/// A certificate's subject as Java's `X500Principal.getName()` writes it (RFC 2253): the last
/// RDN first, `+` inside a multi-valued RDN, known attribute names, others as OID=#hex.
pub fn subject_rfc2253(certificate: &[u8]) -> Result<String, String> {
    let (cert, _) = der(certificate)?;
    let tbs = children(cert.contents)?;
    let fields = children(tbs.first().ok_or("no tbsCertificate")?.contents)?;
    // [0] version (optional), serial, signature, issuer, validity, subject.
    let skip = usize::from(fields.first().is_some_and(|f| f.tag == 0xa0));
    let subject = fields.get(skip + 4).ok_or("no subject")?;
    let mut rdns = Vec::new();
    for rdn in children(subject.contents)? {
        let mut parts = Vec::new();
        for atv in children(rdn.contents)? {
            let tv = children(atv.contents)?;
            let (Some(oid), Some(value)) = (tv.first(), tv.get(1)) else {
                return Err("bad attribute".into());
            };
            parts.push(attribute(oid.contents, value));
        }
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    Ok(rdns.join(","))
}

/// `NAME=value` for one attribute.
fn attribute(oid: &[u8], value: &Der) -> String {
    let name = match oid {
        [0x55, 0x04, 0x03] => Some("CN"),
        [0x55, 0x04, 0x06] => Some("C"),
        [0x55, 0x04, 0x07] => Some("L"),
        [0x55, 0x04, 0x08] => Some("ST"),
        [0x55, 0x04, 0x09] => Some("STREET"),
        [0x55, 0x04, 0x0a] => Some("O"),
        [0x55, 0x04, 0x0b] => Some("OU"),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19] => Some("DC"),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01] => Some("UID"),
        _ => None,
    };
    match (name, text(value)) {
        (Some(name), Some(v)) => format!("{name}={}", escape(&v)),
        (name, _) => format!(
            "{}=#{}",
            name.map_or_else(|| dotted(oid), str::to_string),
            super::hex(value.whole)
        ),
    }
}

/// A directory string's text; `None` for types written as hex.
fn text(v: &Der) -> Option<String> {
    match v.tag {
        0x0c | 0x13 | 0x16 => std::str::from_utf8(v.contents).ok().map(str::to_string),
        0x14 => Some(v.contents.iter().map(|b| *b as char).collect()),
        0x1e => {
            let units: Vec<u16> = v
                .contents
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    }
}

/// RFC 2253's escapes.
fn escape(v: &str) -> String {
    let mut out = String::new();
    let last = v.chars().count().saturating_sub(1);
    for (i, c) in v.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn dotted(oid: &[u8]) -> String {
    let mut arcs: Vec<u64> = Vec::new();
    let mut acc = 0u64;
    for b in oid {
        acc = (acc << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            if arcs.is_empty() {
                let first = (acc / 40).min(2);
                arcs.push(first);
                arcs.push(acc - first * 40);
            } else {
                arcs.push(acc);
            }
            acc = 0;
        }
    }
    arcs.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::tls::test_pki::Pki;

    /// Kafka's SslPrincipalMapperTest, case by case.
    #[test]
    fn the_subject_reads_as_javas_rfc2253_name() {
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CountryName, "US");
        dn.push(rcgen::DnType::OrganizationName, "acme, inc");
        dn.push(rcgen::DnType::CommonName, "alice");
        let cert = Pki::new("ca").leaf_with_subject(dn);
        assert_eq!(
            subject_rfc2253(&cert.der).unwrap(),
            r"CN=alice,O=acme\, inc,C=US"
        );
        let m = PrincipalMapper::parse("DEFAULT").unwrap();
        assert_eq!(
            principal(&m, &cert.der).unwrap(),
            r"User:CN=alice,O=acme\, inc,C=US"
        );
        assert!(subject_rfc2253(&cert.der[..20]).is_err());
    }

    #[test]
    fn unknown_attributes_are_dotted_oids_with_hex_values() {
        // 1.2.840.113549.1.9.1 (emailAddress) as an IA5String "a@b".
        let oid = [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01];
        let value = [0x16, 0x03, b'a', b'@', b'b'];
        let (v, _) = der(&value).unwrap();
        assert_eq!(attribute(&oid, &v), "1.2.840.113549.1.9.1=#1603614062");
    }
}
