//! Graceful shutdown: open watches end with UNAVAILABLE, the server returns, the port frees.

use crate::{Rig, transfer};
use sigcast_proto::pb;
use tokio_stream::StreamExt;
use tonic::Code;

#[tokio::test]
async fn shutdown_ends_watches_and_returns() {
    let mut rig = Rig::start().await;
    let mut client = rig.client.clone();
    client.submit_operation(transfer("w", "1")).await.unwrap();
    let mut stream = client
        .watch_operation(pb::WatchOperationRequest { op_id: "w".into() })
        .await
        .unwrap()
        .into_inner();
    stream.next().await.unwrap().unwrap();

    rig.stop();
    let ended = stream.next().await.expect("a last message").unwrap_err();
    assert_eq!(ended.code(), Code::Unavailable);
    let server = rig.server.take().unwrap();
    server
        .await
        .unwrap()
        .expect("run returns Ok after shutdown");
}
