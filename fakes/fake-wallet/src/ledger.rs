//! The fake's in-memory ledger: balances, debits and refunds keyed by their
//! idempotency keys, and the counters checkers read. Pure data, no I/O: the
//! gRPC layer locks it, calls one method and turns the outcome into a reply.

use std::collections::HashMap;

use serde::Serialize;

/// Why a debit was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DebitError {
    /// Amount ≤ 0, or an empty key or user.
    Invalid(String),
    /// The key was used before with a different user or amount.
    KeyConflict(String),
    /// The user cannot afford it.
    InsufficientBalance,
    /// The key was refunded before any debit arrived, so it can never debit.
    Cancelled,
}

/// A recorded debit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DebitRecord {
    /// The debited user.
    pub user_id: String,
    /// Amount moved.
    pub amount: i64,
    /// Wallet transaction id.
    pub transaction_id: String,
    /// Balance right after the debit.
    pub balance_after: i64,
    /// Set once the debit has been refunded.
    pub refunded: bool,
}

/// The outcome of a debit: the (possibly stored) record and whether it is a replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebitOutcome {
    /// The debit as stored.
    pub record: DebitRecord,
    /// True when the key was seen before.
    pub replayed: bool,
}

/// A recorded refund.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RefundRecord {
    /// The refunded debit's key.
    pub debit_key: String,
    /// Wallet transaction id ("" when nothing was refunded).
    pub transaction_id: String,
    /// Balance right after the refund (0 when the debit was not found).
    pub balance_after: i64,
    /// True when the debit never happened.
    pub debit_not_found: bool,
}

/// The outcome of a refund.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundOutcome {
    /// The refund as stored.
    pub record: RefundRecord,
    /// True when this refund (or another refund of the same debit) was seen before.
    pub replayed: bool,
}

/// Counters for checkers: money moved and calls that moved it (replays excluded).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WalletStats {
    /// Debits applied.
    pub debits: u64,
    /// Refunds applied (a refund of an unknown debit moves nothing and is not counted).
    pub refunds: u64,
    /// Sum of applied debits.
    pub total_debited: i64,
    /// Sum of applied refunds.
    pub total_refunded: i64,
    /// Debit calls answered from the idempotency record.
    pub debit_replays: u64,
    /// Refund calls answered from the idempotency record.
    pub refund_replays: u64,
    /// Refunds of debits the wallet never saw.
    pub refunds_not_found: u64,
}

/// Balances and idempotency records.
#[derive(Debug)]
pub struct Ledger {
    initial_balance: i64,
    balances: HashMap<String, i64>,
    debits: HashMap<String, DebitRecord>,
    /// Refund key → record.
    refunds: HashMap<String, RefundRecord>,
    /// Debit key → the refund key that compensated it, so a second refund key
    /// for the same debit moves no money twice.
    refund_of_debit: HashMap<String, String>,
    next_transaction: u64,
    stats: WalletStats,
}

impl Ledger {
    /// An empty ledger where unknown users start with `initial_balance`.
    pub fn new(initial_balance: i64) -> Self {
        Self {
            initial_balance,
            balances: HashMap::new(),
            debits: HashMap::new(),
            refunds: HashMap::new(),
            refund_of_debit: HashMap::new(),
            next_transaction: 1,
            stats: WalletStats::default(),
        }
    }

    /// Current balance of `user_id`.
    pub fn balance(&self, user_id: &str) -> i64 {
        self.balances
            .get(user_id)
            .copied()
            .unwrap_or(self.initial_balance)
    }

    /// Sets a user's balance.
    pub fn set_balance(&mut self, user_id: &str, balance: i64) {
        self.balances.insert(user_id.to_owned(), balance);
    }

    /// Counters so far.
    pub fn stats(&self) -> WalletStats {
        self.stats.clone()
    }

    /// The debit stored under `key`, if any.
    pub fn debit_record(&self, key: &str) -> Option<DebitRecord> {
        self.debits.get(key).cloned()
    }

    fn transaction_id(&mut self) -> String {
        let id = format!("wtx-{}", self.next_transaction);
        self.next_transaction += 1;
        id
    }

    /// Debits `amount` from `user_id` once per `key`.
    pub fn debit(
        &mut self,
        key: &str,
        user_id: &str,
        amount: i64,
    ) -> Result<DebitOutcome, DebitError> {
        if key.is_empty() || user_id.is_empty() {
            return Err(DebitError::Invalid(
                "idempotency_key and user_id are required".into(),
            ));
        }
        if amount <= 0 {
            return Err(DebitError::Invalid(format!(
                "amount must be > 0, got {amount}"
            )));
        }
        if let Some(record) = self.debits.get(key) {
            if record.user_id != user_id || record.amount != amount {
                return Err(DebitError::KeyConflict(format!(
                    "idempotency_key {key} was used for user {} amount {}",
                    record.user_id, record.amount
                )));
            }
            self.stats.debit_replays += 1;
            return Ok(DebitOutcome {
                record: record.clone(),
                replayed: true,
            });
        }
        if self.refund_of_debit.contains_key(key) {
            return Err(DebitError::Cancelled);
        }
        let balance = self.balance(user_id);
        if balance < amount {
            return Err(DebitError::InsufficientBalance);
        }
        let balance_after = balance - amount;
        self.balances.insert(user_id.to_owned(), balance_after);
        let record = DebitRecord {
            user_id: user_id.to_owned(),
            amount,
            transaction_id: self.transaction_id(),
            balance_after,
            refunded: false,
        };
        self.debits.insert(key.to_owned(), record.clone());
        self.stats.debits += 1;
        self.stats.total_debited += amount;
        Ok(DebitOutcome {
            record,
            replayed: false,
        })
    }

    /// Refunds the debit stored under `debit_key`, once, whatever refund key is used.
    pub fn refund(&mut self, key: &str, debit_key: &str) -> Result<RefundOutcome, String> {
        if key.is_empty() || debit_key.is_empty() {
            return Err("idempotency_key and debit_idempotency_key are required".into());
        }
        if let Some(record) = self.refunds.get(key) {
            if record.debit_key != debit_key {
                return Err(format!(
                    "idempotency_key {key} was used to refund debit {}",
                    record.debit_key
                ));
            }
            self.stats.refund_replays += 1;
            return Ok(RefundOutcome {
                record: record.clone(),
                replayed: true,
            });
        }
        if let Some(earlier_key) = self.refund_of_debit.get(debit_key) {
            let record = self
                .refunds
                .get(earlier_key)
                .cloned()
                .unwrap_or(RefundRecord {
                    debit_key: debit_key.to_owned(),
                    transaction_id: String::new(),
                    balance_after: 0,
                    debit_not_found: true,
                });
            self.stats.refund_replays += 1;
            return Ok(RefundOutcome {
                record,
                replayed: true,
            });
        }
        let record = match self.debits.get(debit_key).cloned() {
            None => {
                // Remembered as a tombstone: a debit arriving late with this key is refused,
                // so a compensated saga can never be charged afterwards.
                self.stats.refunds_not_found += 1;
                RefundRecord {
                    debit_key: debit_key.to_owned(),
                    transaction_id: String::new(),
                    balance_after: 0,
                    debit_not_found: true,
                }
            }
            Some(debit) => {
                let balance_after = self.balance(&debit.user_id) + debit.amount;
                self.balances.insert(debit.user_id.clone(), balance_after);
                if let Some(stored) = self.debits.get_mut(debit_key) {
                    stored.refunded = true;
                }
                self.stats.refunds += 1;
                self.stats.total_refunded += debit.amount;
                RefundRecord {
                    debit_key: debit_key.to_owned(),
                    transaction_id: self.transaction_id(),
                    balance_after,
                    debit_not_found: false,
                }
            }
        };
        self.refunds.insert(key.to_owned(), record.clone());
        self.refund_of_debit
            .insert(debit_key.to_owned(), key.to_owned());
        Ok(RefundOutcome {
            record,
            replayed: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debit_is_idempotent_by_key() {
        let mut ledger = Ledger::new(100);
        let first = ledger.debit("k1", "u1", 30).unwrap();
        assert!(!first.replayed);
        assert_eq!(first.record.balance_after, 70);
        let again = ledger.debit("k1", "u1", 30).unwrap();
        assert!(again.replayed);
        assert_eq!(again.record, first.record);
        assert_eq!(ledger.balance("u1"), 70);
        assert!(matches!(
            ledger.debit("k1", "u1", 31),
            Err(DebitError::KeyConflict(_))
        ));
        assert!(matches!(
            ledger.debit("k1", "u2", 30),
            Err(DebitError::KeyConflict(_))
        ));
        assert_eq!(ledger.stats().debits, 1);
        assert_eq!(ledger.stats().total_debited, 30);
    }

    #[test]
    fn insufficient_balance_and_invalid_amounts_move_nothing() {
        let mut ledger = Ledger::new(10);
        assert_eq!(
            ledger.debit("k", "u", 11),
            Err(DebitError::InsufficientBalance)
        );
        assert!(matches!(
            ledger.debit("k", "u", 0),
            Err(DebitError::Invalid(_))
        ));
        assert!(matches!(
            ledger.debit("k", "u", -5),
            Err(DebitError::Invalid(_))
        ));
        assert_eq!(ledger.balance("u"), 10);
        assert_eq!(ledger.stats(), WalletStats::default());
    }

    #[test]
    fn refund_moves_money_back_once() {
        let mut ledger = Ledger::new(100);
        ledger.debit("d1", "u1", 40).unwrap();
        let refund = ledger.refund("r1", "d1").unwrap();
        assert!(!refund.replayed && !refund.record.debit_not_found);
        assert_eq!(refund.record.balance_after, 100);
        assert!(ledger.refund("r1", "d1").unwrap().replayed);
        // Another refund key for the same debit is answered from the first refund.
        assert!(ledger.refund("r2", "d1").unwrap().replayed);
        assert_eq!(ledger.balance("u1"), 100);
        let stats = ledger.stats();
        assert_eq!((stats.refunds, stats.total_refunded), (1, 40));
    }

    #[test]
    fn refund_of_unknown_debit_is_a_tombstone() {
        let mut ledger = Ledger::new(100);
        let refund = ledger.refund("r1", "never").unwrap();
        assert!(refund.record.debit_not_found);
        assert_eq!(ledger.debit("never", "u1", 5), Err(DebitError::Cancelled));
        assert_eq!(ledger.balance("u1"), 100);
    }
}
