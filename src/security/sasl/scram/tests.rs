use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;

use super::*;
use crate::security::sasl::{
    Credentials, Mechanism, SaslServer, SaslStep, ScramClient, ScramClientError,
};

// RFC 7677 section 3: user "user", password "pencil".
const RFC_CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
const RFC_CLIENT_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
const RFC_SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
const RFC_SALT: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
const RFC_SERVER_FIRST: &str =
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
const RFC_CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
     p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
const RFC_SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

fn rfc_credential() -> ScramCredential {
    let salt = B64.decode(RFC_SALT).unwrap();
    ScramCredential::from_password(ScramMechanism::Sha256, "pencil", &salt, 4096).unwrap()
}

fn rfc_lookup(user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
    (user == "user" && mechanism == ScramMechanism::Sha256).then(rfc_credential)
}

fn challenge(step: Result<SaslStep, SaslError>) -> String {
    match step {
        Ok(SaslStep::Challenge(bytes)) => String::from_utf8(bytes).unwrap(),
        other => panic!("expected a challenge, got {other:?}"),
    }
}

#[test]
fn rfc7677_server_reproduces_the_vector() {
    let mut server = ScramServer::with_server_nonce(ScramMechanism::Sha256, RFC_SERVER_NONCE);
    let first = server.evaluate(RFC_CLIENT_FIRST.as_bytes(), &rfc_lookup);
    assert_eq!(challenge(first), RFC_SERVER_FIRST);
    let done = server.evaluate(RFC_CLIENT_FINAL.as_bytes(), &rfc_lookup);
    assert_eq!(
        done,
        Ok(SaslStep::Complete {
            authorization_id: "user".into(),
            final_bytes: RFC_SERVER_FINAL.as_bytes().to_vec(),
        })
    );
}

#[test]
fn rfc7677_client_reproduces_the_vector() {
    let mut client =
        ScramClient::with_nonce(ScramMechanism::Sha256, "user", "pencil", RFC_CLIENT_NONCE);
    assert_eq!(client.client_first().unwrap(), RFC_CLIENT_FIRST.as_bytes());
    let fin = client.server_first(RFC_SERVER_FIRST.as_bytes()).unwrap();
    assert_eq!(String::from_utf8(fin).unwrap(), RFC_CLIENT_FINAL);
    assert_eq!(client.server_final(RFC_SERVER_FINAL.as_bytes()), Ok(()));
}

/// A store with one user per mechanism: `al=ice,1` / `secret`.
fn store(user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
    let salt = random_nonce();
    (user == "al=ice,1").then(|| {
        ScramCredential::from_password(mechanism, "secret", salt.as_bytes(), 8192).unwrap()
    })
}

/// Runs a whole exchange through [`SaslServer`]; the client's outcome is checked too.
fn exchange(mechanism: ScramMechanism, user: &str, password: &str) -> Result<String, SaslError> {
    let credentials = Credentials {
        scram: &store,
        plain: &|_, _| false,
    };
    let mut server = SaslServer::new(mechanism.into());
    let mut client = ScramClient::new(mechanism, user, password);
    let first = client.client_first().unwrap();
    let server_first = challenge(server.evaluate(&first, &credentials));
    let fin = client.server_first(server_first.as_bytes()).unwrap();
    match server.evaluate(&fin, &credentials)? {
        SaslStep::Complete {
            authorization_id,
            final_bytes,
        } => {
            client.server_final(&final_bytes).unwrap();
            Ok(authorization_id)
        }
        step => panic!("expected completion, got {step:?}"),
    }
}

#[test]
fn round_trips_with_both_hashes() {
    for m in ScramMechanism::ALL {
        assert_eq!(exchange(m, "al=ice,1", "secret"), Ok("al=ice,1".into()));
    }
}

#[test]
fn wrong_password_is_refused() {
    let e = exchange(ScramMechanism::Sha512, "al=ice,1", "guess").unwrap_err();
    assert_eq!(e, SaslError::InvalidCredentials);
    assert_eq!(
        e.client_message(Mechanism::SCRAM_SHA_512, false),
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
    );
}

#[test]
fn unknown_user_runs_to_the_end_and_reads_as_a_wrong_password() {
    let unknown = exchange(ScramMechanism::Sha512, "mallory", "secret");
    let wrong = exchange(ScramMechanism::Sha512, "al=ice,1", "guess");
    assert_eq!(unknown, wrong);
    // Its salt is as stable as a real user's, and its iterations Kafka's default.
    let salt_of = |user: &str| {
        let mut server = ScramServer::new(ScramMechanism::Sha256);
        let first = format!("n,,n={user},r=abc");
        challenge(server.evaluate(first.as_bytes(), &store))
            .split(',')
            .skip(1)
            .collect::<Vec<_>>()
            .join(",")
    };
    assert_eq!(salt_of("mallory"), salt_of("mallory"));
    assert_ne!(salt_of("mallory"), salt_of("trudy"));
    assert!(salt_of("mallory").ends_with(",i=4096"));
}

/// Client-final for `gs2_header` computed by hand, with the RFC's user and password.
fn rfc_final(gs2_header: &str, client_first_bare: &str, server_first: &str) -> String {
    let m = ScramMechanism::Sha256;
    let salted = m.salted_password("pencil", &B64.decode(RFC_SALT).unwrap(), 4096);
    let nonce = &server_first[2..server_first.find(',').unwrap()];
    let without_proof = format!("c={},r={nonce}", B64.encode(gs2_header));
    let auth = format!("{client_first_bare},{server_first},{without_proof}");
    let client_key = m.client_key(&salted);
    let signature = m.hmac(&m.hash(&client_key), &[auth.as_bytes()]);
    format!(
        "{without_proof},p={}",
        B64.encode(xor(&client_key, &signature))
    )
}

/// Runs client-first and then `final_of(server_first)`.
fn run_rfc(client_first: &str, final_of: impl Fn(&str) -> String) -> Result<SaslStep, SaslError> {
    let mut server = ScramServer::new(ScramMechanism::Sha256);
    let server_first = challenge(server.evaluate(client_first.as_bytes(), &rfc_lookup));
    server.evaluate(final_of(&server_first).as_bytes(), &rfc_lookup)
}

#[test]
fn authzid_equal_to_the_user_and_flag_y_are_accepted() {
    let step = run_rfc("n,a=user,n=user,r=abc", |sf| {
        rfc_final("n,a=user,", "n=user,r=abc", sf)
    });
    assert!(matches!(step, Ok(SaslStep::Complete { .. })), "{step:?}");
    let step = run_rfc("y,,n=user,r=abc", |sf| rfc_final("y,,", "n=user,r=abc", sf));
    assert!(matches!(step, Ok(SaslStep::Complete { .. })), "{step:?}");
}

#[test]
fn channel_binding_must_match_the_gs2_header() {
    let step = run_rfc("y,,n=user,r=abc", |sf| rfc_final("n,,", "n=user,r=abc", sf));
    assert_eq!(step, Err(SaslError::ChannelBindingMismatch));
}

#[test]
fn nonce_must_be_the_servers() {
    let step = run_rfc("n,,n=user,r=abc", |sf| {
        rfc_final("n,,", "n=user,r=abc", sf).replacen(",r=abc", ",r=abcX", 1)
    });
    assert_eq!(step, Err(SaslError::NonceMismatch));
    let step = run_rfc("n,,n=user,r=abc", |sf| {
        rfc_final("n,,", "n=user,r=abc", sf).replacen(",r=abc", ",r=Xabc", 1)
    });
    assert_eq!(step, Err(SaslError::NonceMismatch));
}

#[test]
fn malformed_final_messages_are_refused() {
    let bad_base64 = run_rfc("n,,n=user,r=abc", |sf| {
        let fin = rfc_final("n,,", "n=user,r=abc", sf);
        format!("{}!", &fin[..fin.len() - 1])
    });
    assert!(matches!(
        bad_base64,
        Err(SaslError::InvalidClientFinalMessage(_))
    ));
    let no_proof = run_rfc("n,,n=user,r=abc", |sf| {
        let fin = rfc_final("n,,", "n=user,r=abc", sf);
        fin[..fin.find(",p=").unwrap()].to_string()
    });
    assert!(matches!(
        no_proof,
        Err(SaslError::InvalidClientFinalMessage(_))
    ));
    let short_proof = run_rfc("n,,n=user,r=abc", |sf| {
        let fin = rfc_final("n,,", "n=user,r=abc", sf);
        format!("{},p=AAAA", &fin[..fin.find(",p=").unwrap()])
    });
    assert!(matches!(
        short_proof,
        Err(SaslError::InvalidClientFinalMessage(_))
    ));
}

#[test]
fn refused_client_first_messages() {
    let first = |message: &str| {
        ScramServer::new(ScramMechanism::Sha256).evaluate(message.as_bytes(), &rfc_lookup)
    };
    assert_eq!(
        first("p=tls-server-end-point,,n=user,r=abc"),
        Err(SaslError::ChannelBindingNotSupported)
    );
    assert_eq!(
        first("n,,n=user,r=abc,tokenauth=true"),
        Err(SaslError::TokenAuthNotSupported)
    );
    assert!(challenge(first("n,,n=user,r=abc,tokenauth=false")).starts_with("r=abc"));
    assert_eq!(
        first("n,a=admin,n=user,r=abc"),
        Err(SaslError::AuthorizationIdMismatch)
    );
    assert_eq!(
        first("n,a=admin,n=nobody,r=abc"),
        Err(SaslError::AuthorizationIdMismatch),
        "the same answer whether or not the user exists"
    );
    assert!(matches!(
        first("n,,r=abc"),
        Err(SaslError::InvalidClientFirstMessage(_))
    ));
    assert!(matches!(
        first("n,,n=user"),
        Err(SaslError::InvalidClientFirstMessage(_))
    ));
}

#[test]
fn stored_credential_below_minimum_iterations_is_refused() {
    let weak = |_: &str, _: ScramMechanism| {
        Some(ScramCredential {
            iterations: 1000,
            ..rfc_credential()
        })
    };
    let step = ScramServer::new(ScramMechanism::Sha256).evaluate(b"n,,n=user,r=abc", &weak);
    assert_eq!(
        step,
        Err(SaslError::IterationsBelowMinimum {
            iterations: 1000,
            minimum: 4096,
            mechanism: ScramMechanism::Sha256,
        })
    );
    assert!(!step.unwrap_err().is_client_visible());
}

#[test]
fn credential_iterations_are_bounded() {
    let m = ScramMechanism::Sha512;
    assert_eq!(
        ScramCredential::from_password(m, "pw", b"salt", 4095),
        Err(ScramCredentialError::TooFewIterations {
            iterations: 4095,
            minimum: 4096
        })
    );
    assert_eq!(
        ScramCredential::from_password(m, "pw", b"salt", 16385),
        Err(ScramCredentialError::TooManyIterations {
            iterations: 16385,
            maximum: 16384
        })
    );
    assert_eq!(
        ScramCredentialError::TooFewIterations {
            iterations: 1,
            minimum: 4096
        }
        .to_string(),
        "Too few iterations"
    );
    assert!(ScramCredential::from_password(m, "pw", b"salt", 16384).is_ok());
    let random = ScramCredential::from_password(m, "pw", random_nonce().as_bytes(), 4096).unwrap();
    assert_eq!(random.stored_key.len(), 64);
    assert_eq!(format!("{random:?}"), "ScramCredential { [hidden] }");
}

#[test]
fn no_message_after_the_end() {
    let mut server = ScramServer::with_server_nonce(ScramMechanism::Sha256, RFC_SERVER_NONCE);
    server
        .evaluate(RFC_CLIENT_FIRST.as_bytes(), &rfc_lookup)
        .unwrap();
    server
        .evaluate(RFC_CLIENT_FINAL.as_bytes(), &rfc_lookup)
        .unwrap();
    assert_eq!(
        server.evaluate(RFC_CLIENT_FINAL.as_bytes(), &rfc_lookup),
        Err(SaslError::IllegalState("COMPLETE"))
    );
    let mut server = ScramServer::new(ScramMechanism::Sha256);
    assert!(server.evaluate(b"garbage", &rfc_lookup).is_err());
    assert_eq!(
        server.evaluate(RFC_CLIENT_FIRST.as_bytes(), &rfc_lookup),
        Err(SaslError::IllegalState("FAILED"))
    );
}

#[test]
fn mechanism_codes_are_kafkas() {
    assert_eq!(ScramMechanism::Sha256.type_code(), 1);
    assert_eq!(
        ScramMechanism::from_type_code(2),
        Some(ScramMechanism::Sha512)
    );
    assert_eq!(ScramMechanism::from_type_code(0), None);
    assert_eq!(
        ScramMechanism::from_name("SCRAM-SHA-512"),
        Some(ScramMechanism::Sha512)
    );
    assert_eq!(
        Mechanism::from(ScramMechanism::Sha256),
        Mechanism::SCRAM_SHA_256
    );
}

fn client_at_server_first() -> ScramClient {
    let mut client =
        ScramClient::with_nonce(ScramMechanism::Sha256, "user", "pencil", RFC_CLIENT_NONCE);
    client.client_first().unwrap();
    client
}

#[test]
fn client_refuses_a_bad_server() {
    let mut client = client_at_server_first();
    assert_eq!(
        client.server_first(b"r=someone-else,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"),
        Err(ScramClientError::InvalidServerNonce)
    );
    assert_eq!(
        client.server_final(RFC_SERVER_FINAL.as_bytes()),
        Err(ScramClientError::IllegalState("FAILED"))
    );
    let mut client = client_at_server_first();
    let low = format!("r={RFC_CLIENT_NONCE}x,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4095");
    assert!(matches!(
        client.server_first(low.as_bytes()),
        Err(ScramClientError::IterationsBelowMinimum {
            iterations: 4095,
            ..
        })
    ));
    let mut client = client_at_server_first();
    let high = format!("r={RFC_CLIENT_NONCE}x,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=100000000");
    assert!(matches!(
        client.server_first(high.as_bytes()),
        Err(ScramClientError::IterationsAboveMaximum { .. })
    ));
    let mut client = client_at_server_first();
    client.server_first(RFC_SERVER_FIRST.as_bytes()).unwrap();
    assert_eq!(
        client.server_final(b"v=AAAA"),
        Err(ScramClientError::InvalidServerSignature)
    );
}

#[test]
fn client_reports_the_servers_e_error() {
    let mut client = client_at_server_first();
    client.server_first(RFC_SERVER_FIRST.as_bytes()).unwrap();
    let e = client.server_final(b"e=invalid-proof").unwrap_err();
    assert_eq!(
        e.to_string(),
        "Sasl authentication using SCRAM-SHA-256 failed with error: invalid-proof"
    );
}
