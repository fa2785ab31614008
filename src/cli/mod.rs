//! The commands of the binary besides the dispatch: serving the daemon, the operator
//! client (its network commands in [`network`]), the health probe, the breach filter's
//! builder ([`breach`]). Each command's arguments live with it.

pub mod breach;
pub mod health;
pub mod network;
pub mod operator;
pub mod serve;
