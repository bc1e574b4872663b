//! SCRAM's four messages (RFC 5802 section 7) parsed from and written to bytes, with saslname
//! escaping; which fields Kafka accepts follows Kafka's ScramMessages.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;

use super::SaslError;

/// The client's first message, `gs2-header client-first-message-bare`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ClientFirst<'a> {
    /// `n,,` or `y,,` or `n,a=<authzid>,`: what `c=` in the final message must encode.
    pub gs2_header: &'a str,
    /// Everything after the gs2 header, as it goes into the auth message.
    pub bare: &'a str,
    /// The unescaped user name.
    pub user: String,
    /// The unescaped authorization id; empty when the client gave none.
    pub authzid: String,
    pub nonce: &'a str,
    /// Whether the client asked for delegation-token authentication (`tokenauth=true`).
    pub token_auth: bool,
}

/// The client's final message, `c=<cbind>,r=<nonce>[,ext]*,p=<proof>`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ClientFinal<'a> {
    /// Everything before `,p=`, as it goes into the auth message.
    pub without_proof: &'a str,
    pub channel_binding: Vec<u8>,
    pub nonce: &'a str,
    pub proof: Vec<u8>,
}

/// The server's first message, `r=<nonce>,s=<salt>,i=<iterations>[,ext]*`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ServerFirst<'a> {
    pub nonce: &'a str,
    pub salt: Vec<u8>,
    pub iterations: i32,
}

/// The server's final message: `v=<verifier>` or `e=<error>`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ServerFinal<'a> {
    Verifier(Vec<u8>),
    Error(&'a str),
}

pub(crate) fn parse_client_first(message: &[u8]) -> Result<ClientFirst<'_>, SaslError> {
    let invalid = SaslError::InvalidClientFirstMessage;
    let text = std::str::from_utf8(message).map_err(|_| invalid("not UTF-8"))?;
    let (flag, rest) = text.split_once(',').ok_or(invalid("no gs2 header"))?;
    match flag {
        "n" | "y" => {}
        _ if flag.starts_with("p=") => return Err(SaslError::ChannelBindingNotSupported),
        _ => return Err(invalid("gs2 channel binding flag is not n, y or p=")),
    }
    let (authz, bare) = rest.split_once(',').ok_or(invalid("no gs2 header"))?;
    let authzid = match authz {
        "" => String::new(),
        _ => authz
            .strip_prefix("a=")
            .and_then(unescape_saslname)
            .ok_or(invalid("invalid authzid"))?,
    };
    let gs2_header = &text[..flag.len() + 1 + authz.len() + 1];
    let mut fields = bare.split(',');
    let name = fields.next().unwrap_or_default();
    if name.starts_with("m=") {
        return Err(invalid("reserved attribute m= is not supported"));
    }
    let user = attribute(name, "n=")
        .and_then(unescape_saslname)
        .ok_or(invalid("invalid or missing n="))?;
    let nonce = fields
        .next()
        .and_then(|f| attribute(f, "r="))
        .filter(|n| is_printable(n))
        .ok_or(invalid("invalid or missing r="))?;
    let token_auth = client_extensions(fields).ok_or(invalid("invalid extension"))?;
    Ok(ClientFirst {
        gs2_header,
        bare,
        user,
        authzid,
        nonce,
        token_auth,
    })
}

/// Checks `key=value` extensions; says whether `tokenauth` is true (Java's parseBoolean).
fn client_extensions<'a>(fields: impl Iterator<Item = &'a str>) -> Option<bool> {
    let mut token_auth = false;
    for field in fields {
        let (key, value) = extension(field)?;
        if key == "tokenauth" {
            token_auth = value.eq_ignore_ascii_case("true");
        }
    }
    Some(token_auth)
}

/// An extension `key=value`: key of ASCII letters, a non-empty value.
fn extension(field: &str) -> Option<(&str, &str)> {
    let (key, value) = field.split_once('=')?;
    let key_ok = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphabetic());
    let value_ok = !value.is_empty() && !value.contains('\0');
    (key_ok && value_ok).then_some((key, value))
}

pub(crate) fn server_first(nonce: &str, salt: &[u8], iterations: i32) -> String {
    format!("r={nonce},s={},i={iterations}", B64.encode(salt))
}

pub(crate) fn parse_client_final(message: &[u8]) -> Result<ClientFinal<'_>, SaslError> {
    let invalid = SaslError::InvalidClientFinalMessage;
    let text = std::str::from_utf8(message).map_err(|_| invalid("not UTF-8"))?;
    let (without_proof, proof) = text.rsplit_once(",p=").ok_or(invalid("missing p="))?;
    let proof = decode_base64(proof).ok_or(invalid("p= is not base64"))?;
    let mut fields = without_proof.split(',');
    let channel_binding = fields
        .next()
        .and_then(|f| attribute(f, "c="))
        .ok_or(invalid("missing c="))?;
    let channel_binding = decode_base64(channel_binding).ok_or(invalid("c= is not base64"))?;
    let nonce = fields
        .next()
        .and_then(|f| attribute(f, "r="))
        .filter(|n| is_printable(n))
        .ok_or(invalid("invalid or missing r="))?;
    if !fields.all(|f| extension(f).is_some()) {
        return Err(invalid("invalid extension"));
    }
    Ok(ClientFinal {
        without_proof,
        channel_binding,
        nonce,
        proof,
    })
}

pub(crate) fn client_final_without_proof(gs2_header: &str, nonce: &str) -> String {
    format!("c={},r={nonce}", B64.encode(gs2_header))
}

pub(crate) fn parse_server_first(message: &[u8]) -> Result<ServerFirst<'_>, &'static str> {
    let text = std::str::from_utf8(message).map_err(|_| "not UTF-8")?;
    let mut fields = text.split(',');
    let mut next = |key| fields.next().and_then(|f| attribute(f, key));
    let nonce = next("r=")
        .filter(|n| is_printable(n))
        .ok_or("invalid or missing r=")?;
    let salt = next("s=")
        .and_then(decode_base64)
        .ok_or("invalid or missing s=")?;
    let iterations = next("i=")
        .and_then(|i| i.parse::<i32>().ok())
        .filter(|&i| i > 0)
        .ok_or("invalid iterations")?;
    if !fields.all(|f| extension(f).is_some()) {
        return Err("invalid extension");
    }
    Ok(ServerFirst {
        nonce,
        salt,
        iterations,
    })
}

pub(crate) fn parse_server_final(message: &[u8]) -> Result<ServerFinal<'_>, &'static str> {
    let text = std::str::from_utf8(message).map_err(|_| "not UTF-8")?;
    if let Some(error) = text.strip_prefix("e=") {
        let safe = !error.is_empty() && !error.contains([',', '=', '\0']);
        return safe
            .then_some(ServerFinal::Error(error))
            .ok_or("invalid e=");
    }
    let mut fields = text.split(',');
    let verifier = fields
        .next()
        .and_then(|f| attribute(f, "v="))
        .and_then(decode_base64)
        .ok_or("invalid or missing v=")?;
    if !fields.all(|f| extension(f).is_some()) {
        return Err("invalid extension");
    }
    Ok(ServerFinal::Verifier(verifier))
}

pub(crate) fn server_final(server_signature: &[u8]) -> String {
    format!("v={}", B64.encode(server_signature))
}

/// The value of `key` (given with its `=`) if the field is that attribute.
fn attribute<'a>(field: &'a str, key: &str) -> Option<&'a str> {
    field.strip_prefix(key)
}

/// A nonce: printable ASCII except the comma, at least one character.
fn is_printable(nonce: &str) -> bool {
    !nonce.is_empty()
        && nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

/// Strict standard base64 with padding; empty is empty.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    B64.decode(text).ok()
}

/// A user name as a saslname: `=` as `=3D`, `,` as `=2C`.
pub(crate) fn escape_saslname(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

/// The user name of a saslname; `None` if empty, or with NUL, or with `=` not in `=2C` / `=3D`.
pub(crate) fn unescape_saslname(name: &str) -> Option<String> {
    if name.is_empty() || name.contains('\0') {
        return None;
    }
    let mut user = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        user.push_str(&rest[..at]);
        let escaped = rest.get(at..at + 3)?;
        user.push(match escaped {
            "=2C" => ',',
            "=3D" => '=',
            _ => return None,
        });
        rest = &rest[at + 3..];
    }
    user.push_str(rest);
    Some(user)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saslnames_escape_and_unescape() {
        assert_eq!(escape_saslname("a=b,c"), "a=3Db=2Cc");
        assert_eq!(unescape_saslname("a=3Db=2Cc").as_deref(), Some("a=b,c"));
        assert_eq!(unescape_saslname("=3D=2C").as_deref(), Some("=,"));
        assert_eq!(unescape_saslname("a=2"), None);
        assert_eq!(unescape_saslname("a=41"), None);
        assert_eq!(unescape_saslname("a="), None);
        assert_eq!(unescape_saslname(""), None);
        assert_eq!(unescape_saslname("é=2C").as_deref(), Some("é,"));
    }

    #[test]
    fn client_first_with_authzid_and_extensions() {
        let first = parse_client_first(b"n,a=al=2Cice,n=al=2Cice,r=abc,tokenauth=TRUE").unwrap();
        assert_eq!(first.gs2_header, "n,a=al=2Cice,");
        assert_eq!(first.bare, "n=al=2Cice,r=abc,tokenauth=TRUE");
        assert_eq!(first.user, "al,ice");
        assert_eq!(first.authzid, "al,ice");
        assert_eq!(first.nonce, "abc");
        assert!(first.token_auth);
        let first = parse_client_first(b"y,,n=bob,r=x,foo=bar").unwrap();
        assert_eq!((first.gs2_header, first.token_auth), ("y,,", false));
    }

    #[test]
    fn malformed_client_first_is_refused() {
        let cases: &[&[u8]] = &[
            b"",
            b"n",
            b"n,",
            b"x,,n=u,r=a",
            b"n,b=u,n=u,r=a",
            b"n,,m=ext,n=u,r=a",
            b"n,,n=,r=a",
            b"n,,n=u=41,r=a",
            b"n,,n=u",
            b"n,,n=u,r=",
            b"n,,n=u,r=a b",
            b"n,,r=a,n=u",
            b"n,,n=u,r=a,",
            b"n,,n=u,r=a,1=2",
            b"n,,n=u,r=a,k=",
            b"n,,n=\xff,r=a",
        ];
        for case in cases {
            assert!(
                matches!(
                    parse_client_first(case),
                    Err(SaslError::InvalidClientFirstMessage(_))
                ),
                "{:?}",
                String::from_utf8_lossy(case)
            );
        }
        assert_eq!(
            parse_client_first(b"p=tls-unique,,n=u,r=a"),
            Err(SaslError::ChannelBindingNotSupported)
        );
    }

    #[test]
    fn client_final_parts() {
        let fin = parse_client_final(b"c=biws,r=abc,ext=1,p=AAAA").unwrap();
        assert_eq!(fin.without_proof, "c=biws,r=abc,ext=1");
        assert_eq!(fin.channel_binding, b"n,,");
        assert_eq!(fin.nonce, "abc");
        assert_eq!(fin.proof, vec![0, 0, 0]);
    }

    #[test]
    fn malformed_client_final_is_refused() {
        let cases: &[&[u8]] = &[
            b"",
            b"c=biws,r=abc",
            b"c=biws,r=abc,p=A",
            b"c=biws,r=abc,p=AA=A",
            b"c=bi!s,r=abc,p=AAAA",
            b"r=abc,c=biws,p=AAAA",
            b"c=biws,p=AAAA",
            b"c=biws,r=,p=AAAA",
            b"c=biws,r=abc,x,p=AAAA",
            b"c=biws,r=abc,p=\xff",
        ];
        for case in cases {
            assert!(
                matches!(
                    parse_client_final(case),
                    Err(SaslError::InvalidClientFinalMessage(_))
                ),
                "{:?}",
                String::from_utf8_lossy(case)
            );
        }
    }

    #[test]
    fn server_messages_parse() {
        let first = parse_server_first(b"r=abcdef,s=QSXCR+Q6sek8bf92,i=4096").unwrap();
        assert_eq!((first.nonce, first.iterations), ("abcdef", 4096));
        assert!(parse_server_first(b"r=abc,s=QSXCR+Q6sek8bf92,i=0").is_err());
        assert!(parse_server_first(b"r=abc,s=QSXCR+Q6sek8bf92,i=99999999999").is_err());
        assert!(parse_server_first(b"r=abc,s=@@,i=4096").is_err());
        assert!(parse_server_first(b"s=QSXC,r=abc,i=4096").is_err());
        assert_eq!(
            parse_server_final(b"e=invalid-proof"),
            Ok(ServerFinal::Error("invalid-proof"))
        );
        assert_eq!(
            parse_server_final(b"v=AAAA"),
            Ok(ServerFinal::Verifier(vec![0, 0, 0]))
        );
        assert!(parse_server_final(b"v=A").is_err());
        assert!(parse_server_final(b"x=AAAA").is_err());
        assert!(parse_server_final(b"e=").is_err());
    }
}
