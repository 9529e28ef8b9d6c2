//! Broken states planted straight in the backends, where no service call
//! makes them: sagas a crash left between debit and commit, and Redis keys
//! a foreign writer overwrote.

use super::{faults::ROOM, stack::Stack};
use hyapp_api::wallet::{DebitRequest, wallet_service_client::WalletServiceClient};
use service_kit::time::now_ms;

/// Sagas left by a crash between the wallet debit and the commit: debited
/// at the wallet, their rows `debited` ten minutes ago.
pub async fn crashed_sagas(stack: &Stack, count: usize) {
    let mut wallet = WalletServiceClient::connect(stack.wallet.endpoint())
        .await
        .unwrap();
    let long_ago = now_ms() - 10 * 60_000;
    for _ in 0..count {
        let command_id = testkit::unique("crashed-gift-");
        wallet
            .debit(DebitRequest {
                idempotency_key: command_id.clone(),
                user_id: "alice".into(),
                amount: 70,
                reason: "gift".into(),
            })
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO room_gift_saga (command_id, room_id, sender_id, amount, status, \
             created_at_ms, updated_at_ms) VALUES (?, ?, 'alice', 70, 'debited', ?, ?)",
        )
        .bind(&command_id)
        .bind(ROOM)
        .bind(long_ago)
        .bind(long_ago)
        .execute(&stack.db.pool)
        .await
        .unwrap();
    }
}

/// Overwrites the room list and presence keys of this stack's Redis prefix
/// with plain strings, as a foreign writer or a botched manual fix would:
/// every projection write to them then fails (WRONGTYPE), while the room
/// leases, on keys of their own, keep working.
pub async fn clobber_projection_keys(stack: &Stack) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let url = testkit::redis_url();
    let address = url.trim_start_matches("redis://").trim_end_matches('/');
    let mut redis = tokio::net::TcpStream::connect(address).await.unwrap();
    for key in ["room:list:heat", "room:presence"] {
        let key = format!("{}:{key}", stack.db.name);
        let command = format!(
            "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$9\r\nclobbered\r\n",
            key.len()
        );
        redis.write_all(command.as_bytes()).await.unwrap();
        let mut reply = [0u8; 5];
        redis.read_exact(&mut reply).await.unwrap();
        assert_eq!(&reply, b"+OK\r\n");
    }
}
