//! Gateway integration tests: the real gRPC server on a free port, a real SQLite store in a
//! temp dir, and the generated tonic client.

mod read;
mod shutdown;
mod submit;

use sigcast_gateway::Config;
use sigcast_proto::pb;
use sigcast_proto::sigcast::v1::operation_service_client::OperationServiceClient;
use sigcast_store::{Store, StoreConfig};
use tonic::transport::Channel;

/// A gateway served in-process, stopped when dropped.
pub(crate) struct Rig {
    pub(crate) client: OperationServiceClient<Channel>,
    pub(crate) config: Config,
    /// The public listener's address.
    pub(crate) addr: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub(crate) server: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    _dir: tempfile::TempDir,
}

impl Rig {
    pub(crate) async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    pub(crate) async fn start_with(adjust: impl FnOnce(&mut Config)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config {
            store: StoreConfig::sqlite(dir.path().join("sigcast.db")),
            watch_poll_ms: 20,
            ..Config::default()
        };
        adjust(&mut config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(sigcast_gateway::run(config.clone(), listener, async move {
            let _ = stopped.await;
        }));
        let client = OperationServiceClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        Self {
            client,
            config,
            addr,
            stop: Some(stop),
            server: Some(server),
            _dir: dir,
        }
    }

    /// A second handle on the gateway's store, as another process would open it.
    pub(crate) fn store(&self) -> Store {
        Store::open(&self.config.store).unwrap()
    }

    /// Every stored operation, encoded, in op_id order: what "the store is unchanged" means.
    pub(crate) fn snapshot(&self) -> Vec<u8> {
        let store = self.store();
        let (begin, end) = store.root().range();
        let rows = store
            .read(|tx| tx.get_range(&begin, &end, usize::MAX, false))
            .unwrap();
        rows.into_iter()
            .flat_map(|(k, v)| k.into_iter().chain(v))
            .collect()
    }

    pub(crate) fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Callers identified by the mesh's forwarded header, sent from this host (a sidecar's place).
pub(crate) fn behind_a_mesh(config: &mut Config) {
    config.allow_plaintext = true;
    config.mesh = Some(sigcast_gateway::identity::MeshConfig {
        sidecars: vec!["127.0.0.1".parse().unwrap()],
        header: "x-forwarded-client-cert".into(),
    });
}

/// `message` as the mesh-forwarded identity `uri` sends it.
pub(crate) fn as_caller<T>(uri: &str, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        "x-forwarded-client-cert",
        format!("URI={uri}").parse().unwrap(),
    );
    request
}

pub(crate) const ALICE: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
pub(crate) const BOB: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";

pub(crate) fn transfer(op_id: &str, value_wei: &str) -> pb::SubmitOperationRequest {
    pb::SubmitOperationRequest {
        op_id: op_id.into(),
        intent: Some(pb::Intent {
            kind: Some(pb::intent::Kind::EvmTransfer(pb::EvmTransfer {
                chain_id: 31337,
                from: ALICE.into(),
                to: BOB.into(),
                value_wei: value_wei.into(),
            })),
        }),
    }
}
