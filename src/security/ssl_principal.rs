//! The principal of a TLS client: its certificate's subject as Java's RFC 2253 string, mapped
//! by `ssl.principal.mapping.rules` with the semantics of Kafka's SslPrincipalMapper.

use regex::Regex;

/// Kafka's principal of a connection that did not authenticate.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// The grammar of one rule, as Kafka's SslPrincipalMapper defines it.
const RULE: &str = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)";

#[derive(Debug, thiserror::Error)]
pub enum PrincipalError {
    #[error("Invalid rule: `{rule}`{}", unmatched.as_ref().map(|u| format!(", unmatched substring: `{u}`")).unwrap_or_default())]
    InvalidRule {
        rule: String,
        unmatched: Option<String>,
    },
    #[error("invalid pattern in rule `{rule}`: {source}")]
    Pattern {
        rule: String,
        #[source]
        source: Box<regex::Error>,
    },
    #[error("No rules apply to {0}")]
    NoMatchingRule(String),
    #[error("the client certificate cannot be read: {0}")]
    Certificate(String),
}

#[derive(Debug, Clone)]
enum Rule {
    Default,
    Replace {
        pattern: Regex,
        replacement: String,
        case: Case,
    },
}

#[derive(Debug, Clone, Copy)]
enum Case {
    Keep,
    Lower,
    Upper,
}

/// `ssl.principal.mapping.rules`: the first rule that matches a distinguished name gives the
/// name.
#[derive(Debug, Clone)]
pub struct PrincipalMapper {
    rules: Vec<Rule>,
}

impl PrincipalMapper {
    /// Parses the comma-separated rules (`DEFAULT`, `RULE:pattern/replacement/[L|U]`); empty
    /// rules are skipped.
    pub fn parse(rules: &str) -> Result<PrincipalMapper, PrincipalError> {
        let splitter = compiled(&format!(r"\s*({RULE})\s*(,\s*|$)"));
        let parser = compiled(&format!("^(?:{RULE})"));
        let mut out = Vec::new();
        for rule in splitter
            .captures_iter(rules.trim())
            .filter_map(|c| c.get(1))
            .map(|m| m.as_str())
        {
            let Some(c) = parser.captures(rule) else {
                return Err(invalid(rule, None));
            };
            let end = c.get(0).map_or(0, |m| m.end());
            if end != rule.len() {
                return Err(invalid(rule, Some(&rule[end..])));
            }
            if c.get(1).is_some() {
                out.push(Rule::Default);
            } else if let (Some(p), Some(r)) = (c.get(2), c.get(4)) {
                let pattern = Regex::new(p.as_str()).map_err(|e| PrincipalError::Pattern {
                    rule: rule.to_string(),
                    source: Box::new(e),
                })?;
                let case = match c.get(6).map(|m| m.as_str()) {
                    Some("L") => Case::Lower,
                    Some("U") => Case::Upper,
                    _ => Case::Keep,
                };
                out.push(Rule::Replace {
                    pattern,
                    replacement: r.as_str().to_string(),
                    case,
                });
            }
        }
        Ok(PrincipalMapper { rules: out })
    }

    /// The name of distinguished name `dn`: what the first matching rule makes of it.
    pub fn name(&self, dn: &str) -> Result<String, PrincipalError> {
        self.rules
            .iter()
            .find_map(|r| r.apply(dn))
            .ok_or_else(|| PrincipalError::NoMatchingRule(dn.to_string()))
    }

    /// The Kafka principal (`User:<name>`) of a client certificate (DER).
    pub fn principal(&self, certificate: &[u8]) -> Result<String, PrincipalError> {
        let dn = subject_rfc2253(certificate).map_err(PrincipalError::Certificate)?;
        Ok(format!("User:{}", self.name(&dn)?))
    }
}

/// A regex of our own source text; it always compiles.
fn compiled(re: &str) -> Regex {
    Regex::new(re).unwrap_or_else(|e| unreachable!("rule grammar: {e}"))
}

fn invalid(rule: &str, unmatched: Option<&str>) -> PrincipalError {
    PrincipalError::InvalidRule {
        rule: rule.to_string(),
        unmatched: unmatched.map(str::to_string),
    }
}

impl Rule {
    fn apply(&self, dn: &str) -> Option<String> {
        let (pattern, replacement, case) = match self {
            Rule::Default => return Some(dn.to_string()),
            Rule::Replace {
                pattern,
                replacement,
                case,
            } => (pattern, replacement, case),
        };
        // Java's Matcher.matches(): the whole name.
        let whole = pattern
            .captures(dn)
            .and_then(|c| c.get(0))
            .is_some_and(|m| m.start() == 0 && m.end() == dn.len());
        if !whole {
            return None;
        }
        let groups = pattern.captures_len() - 1;
        let mut out = String::new();
        let mut last = 0;
        for c in pattern.captures_iter(dn) {
            let Some(m) = c.get(0) else { continue };
            out.push_str(&dn[last..m.start()]);
            expand(replacement, groups, &c, &mut out);
            last = m.end();
        }
        out.push_str(&dn[last..]);
        Some(match case {
            Case::Keep => out,
            Case::Lower => out.to_lowercase(),
            Case::Upper => out.to_uppercase(),
        })
    }
}

/// Java's replacement syntax (`\x` is `x`, `$n` a group) with Kafka's leniency: a `$n` beyond
/// the groups loses trailing digits until it names one, and is literal text when none is left.
fn expand(replacement: &str, groups: usize, c: &regex::Captures, out: &mut String) {
    let chars: Vec<char> = replacement.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' if i + 1 < chars.len() => {
                out.push(chars[i + 1]);
                i += 2;
            }
            '$' if chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()) => {
                let digits: String = chars[i + 1..]
                    .iter()
                    .take_while(|d| d.is_ascii_digit())
                    .collect();
                let (group, used) = group_reference(&digits, groups);
                match group {
                    Some(g) => out.push_str(c.get(g).map_or("", |m| m.as_str())),
                    None => out.push('$'),
                }
                i += if group.is_some() { 1 + used } else { 1 };
            }
            ch => {
                out.push(ch);
                i += 1;
            }
        }
    }
}

/// The group a `$digits` reference names and how many digits it uses: the longest prefix
/// that names a group (`$0` is the whole match); `None` when even one digit names none.
fn group_reference(digits: &str, groups: usize) -> (Option<usize>, usize) {
    let mut best = (None, 0);
    for n in 1..=digits.len() {
        match digits[..n].parse::<usize>() {
            Ok(g) if g <= groups => best = (Some(g), n),
            _ => break,
        }
    }
    best
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
            hex(value.whole)
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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's SslPrincipalMapperTest, case by case.
    #[test]
    fn kafkas_valid_and_invalid_rules() {
        for ok in [
            "DEFAULT",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
            "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
            "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
            "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
            "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
            "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
        ] {
            assert!(PrincipalMapper::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "default",
            "DEFAUL",
            "DEFAULT/L",
            "DEFAULT/U",
            "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
            "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
        ] {
            assert!(PrincipalMapper::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn kafkas_mapping_examples() {
        let m = PrincipalMapper::parse(
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, \
             RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L, \
             RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U, \
             RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT",
        )
        .unwrap();
        for (dn, name) in [
            ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "duke"),
            ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
            ("cn=duke,ou=sme,dc=mycp,dc=com", "DUKE@SME"),
            ("cN=duke,OU=JavaSoft,O=Sun Microsystems", "DUKE"),
            (
                "OU=JavaSoft,O=Sun Microsystems,C=US",
                "OU=JavaSoft,O=Sun Microsystems,C=US",
            ),
        ] {
            assert_eq!(m.name(dn).unwrap(), name, "{dn}");
        }
        let commas = PrincipalMapper::parse(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT").unwrap();
        assert_eq!(
            commas
                .name(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz")
                .unwrap(),
            r"Tkac\, Adam"
        );
    }

    #[test]
    fn empty_rules_are_skipped_and_no_match_is_an_error() {
        let m = PrincipalMapper::parse(",,RULE:^CN=(.*)$/$1/,,,").unwrap();
        assert_eq!(m.rules.len(), 1);
        assert_eq!(m.name("CN=a").unwrap(), "a");
        assert!(matches!(
            m.name("O=x"),
            Err(PrincipalError::NoMatchingRule(_))
        ));
        assert!(PrincipalMapper::parse("").unwrap().name("CN=a").is_err());
        // Kafka's splitting cases: whitespace around rules, runs of empty rules.
        for (rules, n) in [
            ("  RULE:// ,  DEFAULT  ", 2),
            (",   , , ,      , , ,   ", 0),
            (",,RULE://,,,DEFAULT,,", 2),
            ("  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ", 3),
        ] {
            assert_eq!(
                PrincipalMapper::parse(rules).unwrap().rules.len(),
                n,
                "{rules}"
            );
        }
    }

    #[test]
    fn back_references_beyond_the_groups_are_literal_or_shortened() {
        let m = PrincipalMapper::parse("RULE:^CN=(.*)$/$1@$2-$12/").unwrap();
        assert_eq!(m.name("CN=al").unwrap(), "al@$2-al2");
    }

    #[test]
    fn the_subject_reads_as_javas_rfc2253_name() {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap();
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CountryName, "US");
        dn.push(rcgen::DnType::OrganizationName, "acme, inc");
        dn.push(rcgen::DnType::CommonName, "alice");
        params.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(
            subject_rfc2253(cert.der()).unwrap(),
            r"CN=alice,O=acme\, inc,C=US"
        );
        let m = PrincipalMapper::parse("DEFAULT").unwrap();
        assert_eq!(
            m.principal(cert.der()).unwrap(),
            r"User:CN=alice,O=acme\, inc,C=US"
        );
        assert!(subject_rfc2253(&cert.der()[..20]).is_err());
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
