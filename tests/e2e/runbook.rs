//! Every grpcurl command of the README's runbook, as written, against a running stack.

use sigcast_e2e::{Stack, StackOptions};
use std::process::Command;

/// The commands of the first `sh` block under the README heading `heading`, one string each (a
/// command continues over lines while a quote is open or a line ends with a backslash).
pub(crate) fn readme_commands(heading: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(crate::clients::repo().join("README.md")).unwrap();
    let section = readme
        .split(&format!("\n{heading}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("README section {heading}"));
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap_or_else(|| panic!("a sh block under {heading}"));
    let mut commands = Vec::new();
    let mut current = String::new();
    for line in block.lines() {
        if current.is_empty() && (line.trim().is_empty() || line.trim_start().starts_with('#')) {
            continue;
        }
        current.push_str(line);
        current.push('\n');
        let open_quote = current.matches('\'').count() % 2 == 1;
        if !open_quote && !line.trim_end().ends_with('\\') {
            commands.push(std::mem::take(&mut current));
        }
    }
    commands
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_runbook_command_works_as_written() {
    let stack = Stack::start(StackOptions {
        accounts: 1,
        ..Default::default()
    })
    .await;
    let commands = readme_commands("## Calling it with grpcurl");
    assert!(
        commands.len() >= 8,
        "the runbook has its commands: {commands:?}"
    );
    for command in commands {
        let command = command.replace("127.0.0.1:50051", &stack.gateway.addr.to_string());
        let output = Command::new("bash")
            .arg("-c")
            .arg(&command)
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        );
        println!("$ {command}{stdout}{stderr}");
        if command.contains("CancelOperation") {
            // Documented: the transfer is CONFIRMED by now.
            assert!(
                stderr.contains("Code: FailedPrecondition") && stderr.contains("CONFIRMED"),
                "{stderr}"
            );
            continue;
        }
        assert!(output.status.success(), "{command}\n{stderr}");
        if command.contains(" list") {
            assert!(stdout.contains("sigcast.v1.OperationService"));
        }
        if command.contains("WatchOperation") {
            assert!(
                stdout.contains("OPERATION_STATE_CONFIRMED"),
                "watched to the end: {stdout}"
            );
        }
        if command.contains("Health/Check") {
            assert!(stdout.contains("SERVING"));
        }
    }
}
