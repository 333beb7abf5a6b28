//! The machine-bridge daemon (in progress).
