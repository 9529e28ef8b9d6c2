//! gRPC reflection maps the whole API for whoever reaches the port, so it
//! is served only when `grpc_reflection` asks for it.

mod common;

use common::*;
use tonic_reflection::pb::v1::{ServerReflectionRequest, ServerReflectionResponse};

/// The status of one reflection call to `harness` (its first answer).
async fn reflection_call(harness: &Harness) -> tonic::Code {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", harness.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    );
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            tonic_reflection::pb::v1::server_reflection_request::MessageRequest::ListServices(
                String::new(),
            ),
        ),
    };
    let codec =
        tonic_prost::ProstCodec::<ServerReflectionRequest, ServerReflectionResponse>::default();
    let answer = grpc
        .streaming(
            tonic::Request::new(futures::stream::iter([request])),
            path,
            codec,
        )
        .await;
    match answer {
        Ok(mut stream) => match stream.get_mut().message().await {
            Ok(Some(_)) => tonic::Code::Ok,
            Ok(None) => tonic::Code::Ok,
            Err(status) => status.code(),
        },
        Err(status) => status.code(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_is_served_only_when_enabled() {
    let off = Harness::start().await;
    assert_eq!(reflection_call(&off).await, tonic::Code::Unimplemented);
    off.stop().await;
    let on = Harness::start_with(|config| config.grpc_reflection = true).await;
    assert_eq!(reflection_call(&on).await, tonic::Code::Ok);
    on.stop().await;
}
