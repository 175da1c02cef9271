//! Benchmarks behind `tether demo` and `tether bench ...`: each measures a
//! guest through the host next to a native baseline in the same run and
//! reports the ratio.

pub mod echo;
pub mod jmux;
pub mod quic;
