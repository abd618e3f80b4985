//! `sigcast-sim`: runs seeds of the deterministic simulation and prints failures as seeds;
//! replays one seed step by step with its trace.

use clap::{Parser, Subcommand};
use sigcast_sim::solana::SolanaSettings;
use sigcast_sim::{Report, Settings, Tamper, run, say};
use std::process::ExitCode;

#[derive(Parser)]
#[command(about = "sigcast's deterministic simulation: run seeds, replay one")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs seeds FROM..FROM+SEEDS; prints each failing seed and its first violation.
    Run {
        /// How many seeds.
        #[arg(long, default_value_t = 1_000)]
        seeds: u64,
        /// The first seed.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Break a decision on purpose, to see it caught.
        #[arg(long, default_value = "none", value_parser = tamper)]
        tamper: Tamper,
        /// The chain simulated.
        #[arg(long, value_enum, default_value_t = SimChain::Evm)]
        chain: SimChain,
    },
    /// Visits every state of the small world of the model check; prints a shortest
    /// counterexample if an invariant breaks.
    Model {
        /// Break a decision on purpose, to see it found.
        #[arg(long, default_value = "none", value_parser = tamper)]
        tamper: Tamper,
        /// Stop after this many states.
        #[arg(long, default_value_t = 5_000_000)]
        limit: usize,
        /// Which configuration of the suite (0, 1, 2); all when absent.
        #[arg(long)]
        config: Option<usize>,
    },
    /// Runs one seed, printing its trace as it goes, then its report.
    Replay {
        /// The seed.
        #[arg(long)]
        seed: u64,
        /// Break a decision on purpose, as in the run that found the seed.
        #[arg(long, default_value = "none", value_parser = tamper)]
        tamper: Tamper,
        /// The chain simulated.
        #[arg(long, value_enum, default_value_t = SimChain::Evm)]
        chain: SimChain,
    },
}

/// Which chain a run simulates.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum SimChain {
    /// An EVM chain (mempool, nonces, receipts, reorgs).
    Evm,
    /// A Solana cluster (slots, blockhash expiry, durable nonces, pruned history).
    Solana,
}

/// A tamper by its name.
fn tamper(name: &str) -> Result<Tamper, String> {
    Tamper::ALL
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .ok_or_else(|| {
            let names: Vec<&str> = Tamper::ALL.iter().map(|(n, _)| *n).collect();
            format!("one of: {}", names.join(", "))
        })
}

/// Runs seed `seed` on `chain`, broken by `tamper`.
fn run_seed(seed: u64, tamper: Tamper, chain: SimChain, live_trace: bool) -> Report {
    match chain {
        SimChain::Evm => {
            let mut settings = Settings::draw(seed);
            settings.tamper = tamper;
            run(seed, settings, live_trace)
        }
        SimChain::Solana => {
            let mut settings = SolanaSettings::draw(seed);
            settings.tamper = tamper;
            sigcast_sim::solana::run(seed, settings, live_trace)
        }
    }
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run {
            seeds,
            from,
            tamper,
            chain,
        } => {
            let started = std::time::Instant::now();
            let mut failed = 0;
            let (mut steps, mut blocks, mut retries) = (0, 0, 0);
            for seed in from..from + seeds {
                let report = run_seed(seed, tamper, chain, false);
                steps += report.steps;
                blocks += report.blocks;
                retries += report.retries;
                if let Some(first) = report.violations.first() {
                    failed += 1;
                    say!("FAILED seed {seed}: {first}");
                }
            }
            say!(
                "{seeds} seeds from {from}: {failed} failed; {steps} steps, {blocks} blocks, {retries} store retries, {:.1} s",
                started.elapsed().as_secs_f64()
            );
            if failed > 0 {
                let chain = match chain {
                    SimChain::Evm => "evm",
                    SimChain::Solana => "solana",
                };
                say!("replay one with: sigcast-sim replay --seed <seed> --chain {chain}");
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Command::Model {
            tamper,
            limit,
            config,
        } => {
            let suite = sigcast_sim::model::Bounds::SUITE;
            let chosen: Vec<_> = match config {
                Some(i) if i < suite.len() => vec![suite[i]],
                Some(i) => {
                    eprintln!("--config {i}: the suite has {} configurations", suite.len());
                    return ExitCode::FAILURE;
                }
                None => suite.to_vec(),
            };
            let mut failed = false;
            for bounds in chosen {
                let started = std::time::Instant::now();
                let outcome = sigcast_sim::model::Model::new(bounds, tamper).check(limit);
                say!(
                    "{bounds:?}: {} states in {:.1} s{}",
                    outcome.states,
                    started.elapsed().as_secs_f64(),
                    if outcome.states >= limit {
                        " (stopped at the limit)"
                    } else {
                        ""
                    }
                );
                if let Some((violation, path)) = outcome.counterexample {
                    failed = true;
                    say!("VIOLATION: {violation}");
                    for (i, step) in path.iter().enumerate() {
                        say!("{i:>3}. {step}");
                    }
                }
            }
            if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Command::Replay {
            seed,
            tamper,
            chain,
        } => {
            let report = run_seed(seed, tamper, chain, true);
            say!(
                "\nseed {seed}: {} steps, {} ms simulated, {} blocks, {} store retries",
                report.steps,
                report.sim_ms,
                report.blocks,
                report.retries
            );
            for violation in &report.violations {
                say!("VIOLATION: {violation}");
            }
            if report.violations.is_empty() {
                say!("no invariant broken");
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
