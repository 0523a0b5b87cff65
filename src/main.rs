//! The `isthmus` binary: flags and wiring only. Every behaviour lives in a library crate.

#![forbid(unsafe_code)]

mod cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

// jemalloc, not glibc's malloc: with two worker threads glibc's per-thread arenas returned
// h2's 64 KiB frame buffers to the kernel after each DATA frame and faulted them in again
// (~125k page faults per tunnelled GB); jemalloc keeps freed extents for reuse. Measured in
// docs/benchmarks-history.md ("Issue 28, round 2"; BENCHMARKS.md keeps the figures), proxy
// and tunnel alike, since this binary is both.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// isthmus: the networking data plane for Gardener's live control-plane migration.
#[derive(Debug, Parser)]
#[command(name = "isthmus", version, about, long_about = None)]
struct Cli {
    /// Log format: `text` for people, `json` for log pipelines.
    #[arg(long, global = true, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the L4 SNI proxy (routes TLS by ClientHello SNI; never terminates TLS).
    Proxy(cmd::proxy::Args),
    /// Run the seed-side tunnel server (agents dial in; kube-apiserver CONNECTs through it).
    TunnelServer(cmd::tunnel::Args),
    /// Run the shoot-side tunnel agent (dials out to servers; dials allowed targets).
    TunnelAgent(cmd::tunnel::Args),
    /// Validate a proxy configuration file and print every error with file:line:col.
    CheckConfig(cmd::check_config::Args),
    /// Run the live-migration controller (DNS records, proxy routes, Etcd fields) on this seed.
    // Boxed: its many flags would make every other variant as large.
    Controller(Box<cmd::controller::Args>),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    cmd::init_logging(&cli.log_format);
    let result = match cli.command {
        Command::Proxy(args) => cmd::proxy::run(args),
        Command::CheckConfig(args) => cmd::check_config::run(args),
        Command::Controller(args) => cmd::controller::run(*args),
        Command::TunnelServer(args) => cmd::tunnel::run_server(args),
        Command::TunnelAgent(args) => cmd::tunnel::run_agent(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("isthmus: {e:#}");
            ExitCode::FAILURE
        }
    }
}
