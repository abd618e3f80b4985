//! The load generator runs (CI runs it once, small, to prove it works; its figures are not
//! checked: benchmarks are not tests).

#[test]
fn the_load_generator_runs_a_small_load_and_reports_its_ratios() {
    run_small_load(&[]);
}

#[test]
fn the_load_generator_runs_a_small_load_on_solana_and_reports_its_ratios() {
    run_small_load(&["--chain", "solana"]);
}

fn run_small_load(chain: &[&str]) {
    let output = std::process::Command::new(sigcast_e2e::binary("sigcast-bench"))
        .args(chain)
        .args([
            "--ops",
            "40",
            "--accounts",
            "2",
            "--concurrency",
            "8",
            "--replays",
            "20",
        ])
        .output()
        .expect("run sigcast-bench");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for line in [
        "| operations / accounts / concurrency | 40 / 2 / 8 |",
        "ratio sigcast / baseline",
        "ratio replay / health** (again, from memory)",
        "ratio replay / health** (first, from the store)",
        "gateway reads of one operation, from memory / from the store",
        "peak RSS gateway / signer / broadcaster",
    ] {
        assert!(report.contains(line), "{line} in:\n{report}");
    }
    assert!(
        !String::from_utf8_lossy(&output.stderr).contains("baseline send failed"),
        "the baseline's sends all went through"
    );
    if chain.is_empty() {
        // Both EVM sides ran on nodes whose base fee stays at zero, so neither side's ratio
        // depends on the fee its node's earlier blocks left.
        let blocks = report
            .lines()
            .find(|line| line.starts_with("| transactions per block"))
            .unwrap_or_else(|| panic!("a blocks line in:\n{report}"));
        assert_eq!(
            blocks.matches("base fee 0 gwei").count(),
            2,
            "sigcast's blocks and the baseline's at a zero base fee: {blocks}"
        );
    }
}
