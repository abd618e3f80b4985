//! End-to-end: the real `sigcast-gateway` binary, configured by file and environment, driven
//! by the real grpcurl without proto files (server reflection), stopped by SIGTERM.

mod batch;
mod callers;
mod chart;
mod clients;
mod direct;
mod endpoints;
mod evm;
mod exhaustion;
mod fuzz;
mod gateway;
mod image;
mod keys;
mod load_generator;
mod mtls;
mod naive;
mod observability;
mod operator_cli;
mod replacements;
mod run_script;
mod runbook;
mod solana;
mod solana_nonce;
mod solana_ops;
mod trust;
