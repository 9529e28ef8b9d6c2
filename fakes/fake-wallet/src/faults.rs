//! Injectable faults: fail the next N calls of a method with a chosen gRPC
//! code, optionally after the call took effect (a lost reply), and a fixed
//! latency added to every call.

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The wallet RPCs a fault can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// `Debit`.
    Debit,
    /// `Refund`.
    Refund,
    /// `GetBalance`.
    GetBalance,
}

/// gRPC codes a fault may answer with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultCode {
    /// `UNAVAILABLE`.
    Unavailable,
    /// `INTERNAL`.
    Internal,
    /// `DEADLINE_EXCEEDED`.
    DeadlineExceeded,
}

impl FaultCode {
    /// The tonic code.
    pub fn code(self) -> tonic::Code {
        match self {
            FaultCode::Unavailable => tonic::Code::Unavailable,
            FaultCode::Internal => tonic::Code::Internal,
            FaultCode::DeadlineExceeded => tonic::Code::DeadlineExceeded,
        }
    }
}

/// "Fail the next `count` calls of `method` with `code`".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultRule {
    /// Targeted RPC.
    pub method: Method,
    /// How many calls fail.
    pub count: u32,
    /// Answer code.
    pub code: FaultCode,
    /// Apply the call first and fail the reply (the caller cannot tell it happened).
    #[serde(default)]
    pub after_apply: bool,
}

/// When a pending fault fires for a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FiredFault {
    /// Answer code.
    pub code: FaultCode,
    /// Whether the call is applied before failing.
    pub after_apply: bool,
}

/// Pending faults and the added latency.
#[derive(Debug, Default)]
pub struct Faults {
    pending: HashMap<Method, Vec<FaultRule>>,
    latency: Duration,
}

impl Faults {
    /// Queues a rule behind the rules already pending for its method.
    pub fn add(&mut self, rule: FaultRule) {
        if rule.count > 0 {
            self.pending.entry(rule.method).or_default().push(rule);
        }
    }

    /// Drops every pending fault and the latency.
    pub fn clear(&mut self) {
        self.pending.clear();
        self.latency = Duration::ZERO;
    }

    /// Sets the latency added to every call.
    pub fn set_latency(&mut self, latency: Duration) {
        self.latency = latency;
    }

    /// The latency added to every call.
    pub fn latency(&self) -> Duration {
        self.latency
    }

    /// Consumes one call's worth of the first pending rule of `method`.
    pub fn take(&mut self, method: Method) -> Option<FiredFault> {
        let rules = self.pending.get_mut(&method)?;
        let rule = rules.first_mut()?;
        let fired = FiredFault {
            code: rule.code,
            after_apply: rule.after_apply,
        };
        rule.count -= 1;
        if rule.count == 0 {
            rules.remove(0);
        }
        Some(fired)
    }

    /// Rules not yet used up.
    pub fn pending(&self) -> Vec<FaultRule> {
        self.pending.values().flatten().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_fire_count_times_in_order() {
        let mut faults = Faults::default();
        faults.add(FaultRule {
            method: Method::Debit,
            count: 2,
            code: FaultCode::Unavailable,
            after_apply: false,
        });
        faults.add(FaultRule {
            method: Method::Debit,
            count: 1,
            code: FaultCode::Internal,
            after_apply: true,
        });
        assert_eq!(faults.take(Method::Refund), None);
        assert_eq!(
            faults.take(Method::Debit).unwrap().code,
            FaultCode::Unavailable
        );
        assert_eq!(
            faults.take(Method::Debit).unwrap().code,
            FaultCode::Unavailable
        );
        let third = faults.take(Method::Debit).unwrap();
        assert_eq!((third.code, third.after_apply), (FaultCode::Internal, true));
        assert_eq!(faults.take(Method::Debit), None);
        assert!(faults.pending().is_empty());
    }
}
