//! The `--add-scram` argument of `kafka-storage format` (KIP-900), parsed as Kafka's ScramParser
//! does, e.g. `SCRAM-SHA-256=[name=alice,password=alice-secret]`, into a user's credential.

use std::collections::BTreeMap;

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;

use super::scram::{random_nonce, ScramCredential, ScramCredentialError, ScramMechanism};

/// One `--add-scram` argument: the credential to write as a UserScramCredentialRecord.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddScram {
    pub mechanism: ScramMechanism,
    pub user: String,
    pub credential: ScramCredential,
}

/// A refused `--add-scram` argument, in the words of Kafka's FormatterException.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddScramError {
    #[error("Failed to find equals sign in SCRAM argument '{0}'")]
    NoEqualsSign(String),
    #[error("The add-scram mechanism {0} is not supported.")]
    UnsupportedMechanism(String),
    #[error("Expected configuration string to start with [")]
    NoOpeningBracket,
    #[error("Expected configuration string to end with ]")]
    NoClosingBracket,
    #[error("No equals sign found in SCRAM component: {0}")]
    NoEqualsInComponent(String),
    #[error("You must supply 'name' to add-scram")]
    MissingName,
    #[error("Failed to decode given salt: {0}")]
    InvalidSalt(String),
    #[error("Failed to parse iterations count: {0}")]
    InvalidIterations(String),
    #[error("You must supply one of 'password' or 'saltedpassword' to add-scram")]
    MissingPassword,
    #[error("You must supply 'salt' with 'saltedpassword' to add-scram")]
    SaltedPasswordWithoutSalt,
    #[error("Failed to decode given saltedPassword: {0}")]
    InvalidSaltedPassword(String),
    #[error("Unknown SCRAM configurations: {0}")]
    UnknownConfigurations(String),
    #[error("The 'iterations' value must be >= {minimum} for add-scram using {}", .mechanism.java_name())]
    TooFewIterations {
        minimum: i32,
        mechanism: ScramMechanism,
    },
    #[error("The 'iterations' value must be <= {maximum} for add-scram using {}", .mechanism.java_name())]
    TooManyIterations {
        maximum: i32,
        mechanism: ScramMechanism,
    },
}

/// Java's `Base64.getDecoder()`: the standard alphabet, padding optional.
const JAVA_BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// Parses one `--add-scram` argument and derives the credential (random salt if none is given,
/// 4096 iterations if none are).
pub fn parse_add_scram(argument: &str) -> Result<AddScram, AddScramError> {
    let (mechanism, config) = split_argument(argument)?;
    let mut components = components(config)?;
    let user = components
        .remove("name")
        .ok_or(AddScramError::MissingName)?;
    let salt = match components.remove("salt") {
        Some(salt) => Some(
            JAVA_BASE64
                .decode(&salt)
                .map_err(|_| AddScramError::InvalidSalt(salt))?,
        ),
        None => None,
    };
    let iterations = match components.remove("iterations") {
        Some(text) => text
            .parse::<i32>()
            .map_err(|_| AddScramError::InvalidIterations(text))?,
        None => ScramMechanism::DEFAULT_ITERATIONS,
    };
    let secret = password_or_salted(&mut components, salt.is_some())?;
    if !components.is_empty() {
        let keys: Vec<&str> = components.keys().map(String::as_str).collect();
        return Err(AddScramError::UnknownConfigurations(keys.join(", ")));
    }
    let salt = salt.unwrap_or_else(|| random_nonce().into_bytes());
    let credential = match secret {
        Secret::Password(password) => {
            ScramCredential::from_password(mechanism, &password, &salt, iterations)
        }
        Secret::Salted(salted) => {
            ScramCredential::from_salted_password(mechanism, &salt, &salted, iterations)
        }
    }
    .map_err(|e| iterations_error(mechanism, e))?;
    Ok(AddScram {
        mechanism,
        user,
        credential,
    })
}

/// `MECHANISM=[config]` into the mechanism and the text between the brackets.
fn split_argument(argument: &str) -> Result<(ScramMechanism, &str), AddScramError> {
    let input = java_trim(argument);
    let (name, config) = input
        .split_once('=')
        .ok_or_else(|| AddScramError::NoEqualsSign(input.to_string()))?;
    let mechanism = ScramMechanism::from_name(name)
        .ok_or_else(|| AddScramError::UnsupportedMechanism(name.to_string()))?;
    let config = config
        .strip_prefix('[')
        .ok_or(AddScramError::NoOpeningBracket)?;
    let config = config
        .strip_suffix(']')
        .ok_or(AddScramError::NoClosingBracket)?;
    Ok((mechanism, config))
}

/// `key=value` components split on commas as Java's `String.split(",")` does (trailing empty
/// ones dropped); a value in double quotes loses them; a repeated key keeps its last value.
fn components(config: &str) -> Result<BTreeMap<String, String>, AddScramError> {
    let mut parts: Vec<&str> = config.split(',').collect();
    if config.contains(',') {
        while parts.last() == Some(&"") {
            parts.pop();
        }
    }
    let mut components = BTreeMap::new();
    for part in parts {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| AddScramError::NoEqualsInComponent(part.to_string()))?;
        let value = match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
            Some(unquoted) if value.len() >= 2 => unquoted,
            _ => value,
        };
        components.insert(key.to_string(), value.to_string());
    }
    Ok(components)
}

enum Secret {
    Password(String),
    Salted(Vec<u8>),
}

fn password_or_salted(
    components: &mut BTreeMap<String, String>,
    has_salt: bool,
) -> Result<Secret, AddScramError> {
    let password = components.remove("password");
    let salted = components.remove("saltedpassword");
    match (password, salted) {
        (Some(password), _) => Ok(Secret::Password(password)),
        (None, None) => Err(AddScramError::MissingPassword),
        (None, Some(_)) if !has_salt => Err(AddScramError::SaltedPasswordWithoutSalt),
        (None, Some(salted)) => JAVA_BASE64
            .decode(&salted)
            .map(Secret::Salted)
            .map_err(|_| AddScramError::InvalidSaltedPassword(salted)),
    }
}

/// The credential's iteration refusal in `kafka-storage format`'s words.
fn iterations_error(mechanism: ScramMechanism, error: ScramCredentialError) -> AddScramError {
    match error {
        ScramCredentialError::TooFewIterations { minimum, .. } => {
            AddScramError::TooFewIterations { minimum, mechanism }
        }
        ScramCredentialError::TooManyIterations { maximum, .. } => {
            AddScramError::TooManyIterations { maximum, mechanism }
        }
    }
}

/// Java's `String.trim()`: strips characters up to and including the space.
fn java_trim(text: &str) -> &str {
    text.trim_matches(|c: char| c <= ' ')
}

#[cfg(test)]
mod tests {
    use super::*;

    const SALT_B64: &str = "MWx2NHBkbnc0ZndxN25vdGN4bTB5eTFrN3E=";
    const SALTED_B64: &str = "mT0yyUUxnlJaC99HXgRTSYlbuqa4FSGtJCJfTMvjYCE=";

    fn err(argument: &str) -> String {
        parse_add_scram(argument).unwrap_err().to_string()
    }

    #[test]
    fn password_with_defaults() {
        let a = parse_add_scram(" SCRAM-SHA-256=[name=alice,password=alice-secret] ").unwrap();
        assert_eq!(
            (a.mechanism, a.user.as_str()),
            (ScramMechanism::Sha256, "alice")
        );
        assert_eq!(a.credential.iterations, 4096);
        let again = ScramCredential::from_password(
            ScramMechanism::Sha256,
            "alice-secret",
            &a.credential.salt,
            4096,
        )
        .unwrap();
        assert_eq!(a.credential, again);
        let b = parse_add_scram("SCRAM-SHA-256=[name=alice,password=alice-secret]").unwrap();
        assert_ne!(
            a.credential.salt, b.credential.salt,
            "a random salt each time"
        );
    }

    #[test]
    fn password_with_salt_and_iterations() {
        let a = parse_add_scram(&format!(
            "SCRAM-SHA-512=[name=bob,password=my pass,iterations=8192,salt=\"{SALT_B64}\"]"
        ))
        .unwrap();
        let salt = b"1lv4pdnw4fwq7notcxm0yy1k7q";
        let expected =
            ScramCredential::from_password(ScramMechanism::Sha512, "my pass", salt, 8192).unwrap();
        assert_eq!(
            (a.mechanism, a.user.as_str()),
            (ScramMechanism::Sha512, "bob")
        );
        assert_eq!(a.credential, expected);
    }

    #[test]
    fn salted_password() {
        let a = parse_add_scram(&format!(
            "SCRAM-SHA-512=[name=alice,salt=\"{SALT_B64}\",saltedpassword=\"{SALTED_B64}\"]"
        ))
        .unwrap();
        let salted = JAVA_BASE64.decode(SALTED_B64).unwrap();
        let m = ScramMechanism::Sha512;
        assert_eq!(a.credential.salt, b"1lv4pdnw4fwq7notcxm0yy1k7q");
        assert_eq!(a.credential.stored_key, m.hash(&m.client_key(&salted)));
        assert_eq!(a.credential.server_key, m.server_key(&salted));
        assert_eq!(a.credential.iterations, 4096);
    }

    #[test]
    fn kafkas_errors() {
        assert_eq!(
            err("SCRAM-SHA-512"),
            "Failed to find equals sign in SCRAM argument 'SCRAM-SHA-512'"
        );
        assert_eq!(
            err("SCRAM-SHA-UNSUPPORTED=[name=a,password=b]"),
            "The add-scram mechanism SCRAM-SHA-UNSUPPORTED is not supported."
        );
        assert_eq!(
            err("SCRAM-SHA-256=name=a,password=b"),
            "Expected configuration string to start with ["
        );
        assert_eq!(
            err("SCRAM-SHA-256=[name=a,password=b"),
            "Expected configuration string to end with ]"
        );
        assert_eq!(
            err("SCRAM-SHA-256=[name]"),
            "No equals sign found in SCRAM component: name"
        );
        assert_eq!(
            err("SCRAM-SHA-256=[]"),
            "No equals sign found in SCRAM component: "
        );
        assert_eq!(
            err("SCRAM-SHA-256=[password=b]"),
            "You must supply 'name' to add-scram"
        );
        assert_eq!(
            err("SCRAM-SHA-256=[name=bar]"),
            "You must supply one of 'password' or 'saltedpassword' to add-scram"
        );
        assert_eq!(
            err(&format!(
                "SCRAM-SHA-256=[name=a,saltedpassword=\"{SALTED_B64}\"]"
            )),
            "You must supply 'salt' with 'saltedpassword' to add-scram"
        );
    }

    #[test]
    fn bad_values() {
        assert_eq!(
            err("SCRAM-SHA-256=[name=a,password=b,unknown=x,unknown2=y]"),
            "Unknown SCRAM configurations: unknown, unknown2"
        );
        assert_eq!(
            err("SCRAM-SHA-256=[name=a,password=b,salt=!!]"),
            "Failed to decode given salt: !!"
        );
        assert_eq!(
            err("SCRAM-SHA-256=[name=a,salt=QUJD,saltedpassword=@]"),
            "Failed to decode given saltedPassword: @"
        );
        assert_eq!(
            err("SCRAM-SHA-256=[name=a,password=b,iterations=many]"),
            "Failed to parse iterations count: many"
        );
        assert_eq!(
            err("SCRAM-SHA-256=[name=a,password=b,iterations=4095]"),
            "The 'iterations' value must be >= 4096 for add-scram using SCRAM_SHA_256"
        );
        assert_eq!(
            err("SCRAM-SHA-512=[name=a,password=b,iterations=16385]"),
            "The 'iterations' value must be <= 16384 for add-scram using SCRAM_SHA_512"
        );
    }

    #[test]
    fn components_split_like_java() {
        let c = components("name=\"\",password=\"x\",").unwrap();
        assert_eq!(c["name"], "");
        assert_eq!(c["password"], "x");
        assert_eq!(components("name=\"").unwrap()["name"], "\"");
        assert!(components(",,,").unwrap().is_empty());
        assert_eq!(components("name=a,name=b").unwrap()["name"], "b");
    }
}
