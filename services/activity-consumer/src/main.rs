//! The `activity-consumer` binary: the consumer host's binary ([`consumer_runtime::host::main`])
//! running [`activity_consumer::Service`].

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    Ok(consumer_runtime::host::main::<activity_consumer::Service>().await?)
}
