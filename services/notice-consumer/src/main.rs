//! The `notice-consumer` binary: the consumer host's binary ([`consumer_runtime::host::main`])
//! running [`notice_consumer::Service`].

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    Ok(consumer_runtime::host::main::<notice_consumer::Service>().await?)
}
