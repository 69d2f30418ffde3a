//! The other ways a service proves itself to NATS and reaches it: an nkey instead of a
//! password, and TLS verified against the configured CA file.

use capstan_bus::{
    access::{Auth, BusUser},
    testsuite::NatsServer,
    Bus, ConnectOptions, Credentials, SecretString,
};
use capstan_events::Domain;
use std::{path::Path, process::Command, time::Duration};

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn a_service_connects_with_its_nkey_seed_and_another_seed_is_refused() {
    let mut seeds = Vec::new();
    let mut public = Vec::new();
    for user in BusUser::every() {
        let pair = nkeys::KeyPair::new_user();
        public.push((user, pair.public_key()));
        seeds.push((user, pair.seed().unwrap()));
    }
    let server = NatsServer::start_configured(Auth::Nkey, public, None);
    let seed_of = |user| {
        seeds
            .iter()
            .find(|(known, _)| *known == user)
            .unwrap()
            .1
            .clone()
    };
    let connect = |seed: String| {
        let mut options = ConnectOptions::new(&server.url(), "nkey-test");
        options.inbox_prefix = Some(Domain::Billing.inbox_prefix());
        options.credentials = Credentials::NkeySeed(SecretString::from(seed));
        options
    };
    let billing = Bus::connect_with(&connect(seed_of(BusUser::Service(Domain::Billing))))
        .await
        .unwrap();
    billing.ensure_streams(Domain::Billing).await.unwrap();

    let stranger = nkeys::KeyPair::new_user().seed().unwrap();
    let refused = Bus::connect_with(&connect(stranger)).await.unwrap();
    let ensured = tokio::time::timeout(WAIT, refused.ensure_streams(Domain::Billing)).await;
    assert!(!matches!(ensured, Ok(Ok(()))), "an unknown nkey was let in");
}

/// A CA and a server certificate for 127.0.0.1, made with the openssl command line.
fn certificates(dir: &Path) {
    let run = |args: &[&str]| {
        let status = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl is installed");
        assert!(status.status.success(), "openssl {args:?}: {status:?}");
    };
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    run(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=capstan test CA",
    ]);
    run(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    ]);
}

#[tokio::test]
async fn tls_to_nats_is_verified_against_the_configured_ca_file() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let passwords = BusUser::every()
        .into_iter()
        .map(|user| (user, format!("{}-tls", user.name())))
        .collect();
    let server = NatsServer::start_configured(
        Auth::Password,
        passwords,
        Some((dir.path().join("server.pem"), dir.path().join("server.key"))),
    );
    let user = BusUser::Service(Domain::Billing);

    let mut options = server.options(user);
    options.tls_ca_file = Some(dir.path().join("ca.pem"));
    let trusted = Bus::connect_with(&options).await.unwrap();
    tokio::time::timeout(WAIT, trusted.ensure_streams(Domain::Billing))
        .await
        .expect("an answer over TLS")
        .unwrap();

    // Without the CA the server's certificate is not trusted: nothing gets through.
    let untrusted = Bus::connect_with(&server.options(user)).await.unwrap();
    let ensured = tokio::time::timeout(WAIT, untrusted.ensure_streams(Domain::Billing)).await;
    assert!(
        !matches!(ensured, Ok(Ok(()))),
        "a server certificate no CA vouches for was accepted"
    );
}
