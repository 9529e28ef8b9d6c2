//! Faithful local fake of the wallet/v1 gRPC service with injectable faults.
