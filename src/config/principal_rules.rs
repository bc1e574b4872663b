//! `ssl.principal.mapping.rules`: Kafka's SslPrincipalMapper grammar and semantics, which turn a
//! TLS client certificate's subject (an RFC 2253 name) into the name of its principal.

use regex::Regex;

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
}
