//! placeholder

pub mod client_hello;
