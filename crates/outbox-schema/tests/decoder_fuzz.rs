//! Property test: the envelope and wake-up decoders never panic, whatever the bytes.

use proptest::prelude::*;

proptest! {
    #[test]
    fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = outbox_schema::decode_envelope(&bytes);
        let _ = outbox_schema::decode_wakeup(&bytes);
    }
}
