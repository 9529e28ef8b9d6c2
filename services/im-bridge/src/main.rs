//! The `im-bridge` binary: the consumer host's binary ([`consumer_runtime::host::main`])
//! running [`im_bridge::Service`].

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    Ok(consumer_runtime::host::main::<im_bridge::Service>().await?)
}
