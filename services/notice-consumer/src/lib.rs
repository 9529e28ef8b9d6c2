//! Notice consumer: private notices delivered as C2C IM messages.
