//! Capability checks: which destinations a guest may dial and where it may
//! listen. Deny by default.
//!
//! The rules, the host spellings and the decisions live in the sans-IO
//! crate `tether-policy`, re-exported here whole; [`crate::net`] resolves
//! names and dials exactly the addresses the policy admitted. See
//! [`Policy`] for the decision and [`parse_host`] for the spellings.

pub use tether_policy::*;
