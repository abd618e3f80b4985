//! The signer's servers, in process.

use sigcast_signer::Config;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_socket_that_cannot_be_bound_is_named_and_nothing_stays_served() {
    let dir = tempfile::tempdir().unwrap();
    let passphrase = dir.path().join("passphrase");
    std::fs::write(&passphrase, "correct horse").unwrap();
    let config = Config {
        // A directory that does not exist: the API's socket cannot be bound.
        unix_socket: Some(dir.path().join("missing").join("signer.sock")),
        store: sigcast_store::StoreConfig::sqlite(dir.path().join("store.db")),
        keystore_dir: dir.path().join("keys"),
        passphrase_file: Some(passphrase),
        evm_chains: Vec::new(),
        ..Config::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let health = listener.local_addr().unwrap();
    let ended = sigcast_signer::run(config, listener, std::future::pending()).await;
    let error = ended.expect_err("the signer runs without its API socket");
    assert!(
        format!("{error:#}").contains("signer.sock"),
        "the error names the socket: {error:#}"
    );
    // A health check that answered here would tell a readiness probe to send callers to an
    // API that never came up.
    assert!(
        tokio::net::TcpStream::connect(health).await.is_err(),
        "the health endpoint at {health} is served though the API socket was never bound"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_that_authenticates_nobody_is_not_served_off_loopback_whatever_the_command_line() {
    // `serve --listen 0.0.0.0:…` replaces the address after the configuration was checked:
    // the listener handed over is what must be on loopback (review, fourteenth session).
    let dir = tempfile::tempdir().unwrap();
    let passphrase = dir.path().join("passphrase");
    std::fs::write(&passphrase, "correct horse").unwrap();
    let config = Config {
        store: sigcast_store::StoreConfig::sqlite(dir.path().join("store.db")),
        keystore_dir: dir.path().join("keys"),
        passphrase_file: Some(passphrase),
        evm_chains: Vec::new(),
        ..Config::default()
    };
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let ended = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        sigcast_signer::run(config, listener, std::future::pending()),
    )
    .await
    .expect("refused at once, not served");
    let error = ended.expect_err("an unauthenticated API on 0.0.0.0");
    assert!(format!("{error:#}").contains("loopback"), "{error:#}");
    assert!(
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err(),
        "nothing stays served"
    );
}
