//! IM bridge: consumes room events and drives Tencent IM groups.
