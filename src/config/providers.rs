//! Kafka's config providers (KIP-297, KIP-421, KIP-887): a value `${name:path:key}` is replaced
//! by what provider `name` reads (a file's property, a directory's file, an environment variable),
//! so that a secret need not stand in a command line or a properties file beside the others.
//!
//! As in Kafka, `config.providers=a,b` names the providers and `config.providers.a.class` says
//! which kind each is; the classes known are Kafka's own `FileConfigProvider`,
//! `DirectoryConfigProvider` and `EnvVarConfigProvider`. A variable of an undeclared provider is
//! left as written, as Kafka leaves it. Unlike Kafka, which leaves a variable whose key its
//! provider lacks unresolved (to fail later on a value nobody wrote), that is an error here, naming
//! the key and the variable.

use std::collections::BTreeMap;
use std::path::Path;

use super::{invalid, load_properties, ConfigError};

/// The key that lists the providers.
pub const PROVIDERS: &str = "config.providers";

const FILE_CLASS: &str = "org.apache.kafka.common.config.provider.FileConfigProvider";
const DIRECTORY_CLASS: &str = "org.apache.kafka.common.config.provider.DirectoryConfigProvider";
const ENV_CLASS: &str = "org.apache.kafka.common.config.provider.EnvVarConfigProvider";

/// What a declared provider reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `${name:/path/to/file.properties:key}`: a property of a properties file.
    File,
    /// `${name:/path/to/dir:file}`: the whole content of a file in a directory (a mounted
    /// Kubernetes Secret has one file per key).
    Directory,
    /// `${name:VARIABLE}`: an environment variable.
    Env,
}

/// `props` with every variable of a declared provider replaced, and the `config.providers*`
/// keys removed (they configure this step, not the client). Without `config.providers` the
/// properties come back as they were.
pub fn resolve(props: &BTreeMap<String, String>) -> Result<BTreeMap<String, String>, ConfigError> {
    let providers = declared(props)?;
    let mut out = BTreeMap::new();
    for (key, value) in props {
        if key == PROVIDERS || key.starts_with("config.providers.") {
            continue;
        }
        let value = if providers.is_empty() {
            value.clone()
        } else {
            substitute(key, value, &providers)?
        };
        out.insert(key.clone(), value);
    }
    Ok(out)
}

/// The providers `config.providers` declares, by name, each with its kind.
fn declared(props: &BTreeMap<String, String>) -> Result<BTreeMap<String, Kind>, ConfigError> {
    let Some(list) = props.get(PROVIDERS) else {
        return Ok(BTreeMap::new());
    };
    let mut out = BTreeMap::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let class_key = format!("config.providers.{name}.class");
        let class = props.get(&class_key).map(|c| c.trim()).unwrap_or("");
        let kind = match class {
            FILE_CLASS => Kind::File,
            DIRECTORY_CLASS => Kind::Directory,
            ENV_CLASS => Kind::Env,
            "" => {
                return Err(invalid(
                    &class_key,
                    "",
                    format!("provider {name} is listed in {PROVIDERS} but has no class"),
                ))
            }
            other => {
                return Err(invalid(
                    &class_key,
                    other,
                    format!("known providers are {FILE_CLASS}, {DIRECTORY_CLASS} and {ENV_CLASS}"),
                ))
            }
        };
        out.insert(name.to_string(), kind);
    }
    Ok(out)
}

/// `value` with each `${name:[path:]key}` of a declared provider replaced.
fn substitute(
    key: &str,
    value: &str,
    providers: &BTreeMap<String, Kind>,
) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        let Some(len) = rest[start..].find('}') else {
            break;
        };
        let variable = &rest[start..start + len + 1];
        out.push_str(&rest[..start]);
        match parse(&variable[2..variable.len() - 1]) {
            Some((name, path, item)) if providers.contains_key(name) => {
                let read =
                    read(providers[name], path, item).map_err(|why| invalid(key, variable, why))?;
                out.push_str(&read);
            }
            _ => out.push_str(variable),
        }
        rest = &rest[start + len + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `name:path:key` or `name:key` (Kafka's pattern: the path is everything between the first and
/// the last colon).
fn parse(inner: &str) -> Option<(&str, &str, &str)> {
    let (name, tail) = inner.split_once(':')?;
    match tail.rsplit_once(':') {
        Some((path, key)) => Some((name, path, key)),
        None => Some((name, "", tail)),
    }
}

/// What provider `kind` holds for `path` and `key`, or why nothing.
fn read(kind: Kind, path: &str, key: &str) -> Result<String, String> {
    match kind {
        Kind::File => {
            let props = load_properties(Path::new(path)).map_err(|e| e.to_string())?;
            props
                .get(key)
                .cloned()
                .ok_or_else(|| format!("{path} has no property {key}"))
        }
        Kind::Directory => {
            if key.contains('/') || key == ".." {
                return Err(format!("{key} is not a file name"));
            }
            let file = Path::new(path).join(key);
            std::fs::read_to_string(&file)
                .map_err(|e| format!("cannot read {}: {e}", file.display()))
        }
        Kind::Env => {
            if !path.is_empty() {
                return Err("an environment variable takes no path: ${name:VARIABLE}".into());
            }
            std::env::var(key).map_err(|_| format!("environment variable {key} is not set"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::props;

    #[test]
    fn without_providers_nothing_changes_even_what_looks_like_a_variable() {
        let p = props(&[("sasl.jaas.config", "x ${dir:/a:b} y"), ("acks", "all")]);
        assert_eq!(resolve(&p).unwrap(), p);
    }

    #[test]
    fn a_directory_provider_reads_a_file_of_a_mounted_secret() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("sasl.jaas.config"), "Login required;").unwrap();
        let variable = format!("${{secrets:{}:sasl.jaas.config}}", dir.path().display());
        let p = props(&[
            ("config.providers", "secrets"),
            ("config.providers.secrets.class", DIRECTORY_CLASS),
            ("sasl.jaas.config", &variable),
            ("other", "before ${undeclared:x:y} after"),
        ]);
        let out = resolve(&p).unwrap();
        assert_eq!(out["sasl.jaas.config"], "Login required;");
        assert_eq!(out["other"], "before ${undeclared:x:y} after");
        assert!(
            !out.keys().any(|k| k.starts_with("config.providers")),
            "{out:?}"
        );
        let missing = format!("${{secrets:{}:nope}}", dir.path().display());
        let p2 = props(&[
            ("config.providers", "secrets"),
            ("config.providers.secrets.class", DIRECTORY_CLASS),
            ("sasl.jaas.config", &missing),
        ]);
        let e = resolve(&p2).unwrap_err().to_string();
        assert!(e.contains("sasl.jaas.config") && e.contains("nope"), "{e}");
        let escape = format!("${{secrets:{}:../x}}", dir.path().display());
        let p3 = props(&[
            ("config.providers", "secrets"),
            ("config.providers.secrets.class", DIRECTORY_CLASS),
            ("k", &escape),
        ]);
        assert!(resolve(&p3).is_err());
    }

    #[test]
    fn a_file_provider_reads_a_property_and_env_a_variable() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("creds.properties");
        std::fs::write(&file, "password=s3cret\n").unwrap();
        std::env::set_var("EVENKEEL_PROVIDER_TEST", "from-env");
        let value = format!(
            "p={} e=${{env:EVENKEEL_PROVIDER_TEST}}",
            format_args!("${{file:{}:password}}", file.display())
        );
        let p = props(&[
            ("config.providers", "file, env"),
            ("config.providers.file.class", FILE_CLASS),
            ("config.providers.env.class", ENV_CLASS),
            ("k", &value),
        ]);
        assert_eq!(resolve(&p).unwrap()["k"], "p=s3cret e=from-env");
    }

    #[test]
    fn a_provider_without_a_known_class_is_refused_naming_its_key() {
        let p = props(&[
            ("config.providers", "vault"),
            ("config.providers.vault.class", "com.example.Vault"),
        ]);
        let e = resolve(&p).unwrap_err().to_string();
        assert!(e.contains("config.providers.vault.class"), "{e}");
        let p = props(&[("config.providers", "x")]);
        assert!(resolve(&p).is_err());
    }
}
