//! The image's Dockerfile (no Docker engine runs here to build it): every file it downloads
//! is checked against a SHA-256 given to the build, and the check it runs refuses a missing or
//! wrong checksum, run here as the build would run it.

use crate::clients::repo;
use std::process::Command;

/// The Dockerfile's instructions, continuation lines joined, comments dropped.
fn instructions() -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("deploy/Dockerfile")).unwrap();
    let mut instructions = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || (current.is_empty() && line.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(line);
                instructions.push(std::mem::take(&mut current));
            }
        }
    }
    instructions
}

#[test]
fn every_download_of_the_image_build_is_verified_before_use() {
    let instructions = instructions();
    // Downloads go through ADD, each checked in its own stage before anything uses it.
    for line in &instructions {
        assert!(
            !(line.starts_with("RUN") && (line.contains("curl ") || line.contains("wget "))),
            "a download outside ADD, which nothing here checks: {line}"
        );
    }
    let downloads: Vec<(usize, String)> = instructions
        .iter()
        .enumerate()
        .filter_map(|(i, line)| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let remote = words
                .iter()
                .any(|w| w.starts_with("https://") || w.starts_with("http://"));
            (words.first() == Some(&"ADD") && remote)
                .then(|| (i, words.last().unwrap().to_string()))
        })
        .collect();
    assert!(
        !downloads.is_empty(),
        "the FoundationDB package is downloaded"
    );
    for (at, path) in downloads {
        let stage_end = instructions[at + 1..]
            .iter()
            .position(|line| line.starts_with("FROM"))
            .map_or(instructions.len(), |end| at + 1 + end);
        let stage = &instructions[at + 1..stage_end];
        let checked = stage.iter().position(|line| {
            line.starts_with("RUN") && line.contains("sha256sum --check") && line.contains(&path)
        });
        let used = stage
            .iter()
            .position(|line| line.contains(&path) && !line.contains("sha256sum"));
        let checked = checked
            .unwrap_or_else(|| panic!("{path} is never checked in the stage that downloads it"));
        assert!(
            used.is_none_or(|used| checked < used),
            "{path} is used before it is checked"
        );
    }
}

#[test]
fn the_checksum_step_refuses_a_missing_or_wrong_checksum() {
    let step = instructions()
        .into_iter()
        .find(|line| line.starts_with("RUN") && line.contains("sha256sum --check"))
        .expect("a checksum step");
    let dir = tempfile::tempdir().unwrap();
    let package = dir.path().join("fdb-clients.deb");
    std::fs::write(&package, b"a FoundationDB clients package").unwrap();
    // As the build runs it (`sh -c`, the ARGs in the environment), on a file of our own.
    let script = step
        .trim_start_matches("RUN")
        .replace("/fdb-clients.deb", &package.display().to_string());
    let run = |sha256: &str| {
        Command::new("sh")
            .args(["-c", &script])
            .env("FDB_VERSION", "7.3.43")
            .env("FDB_CLIENTS_SHA256", sha256)
            .output()
            .unwrap()
    };
    let missing = run("");
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("--build-arg FDB_CLIENTS_SHA256"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
    assert!(!run(&"0".repeat(64)).status.success(), "a wrong checksum");
    use sha2::Digest;
    let right = hex::encode(sha2::Sha256::digest(std::fs::read(&package).unwrap()));
    let passed = run(&right);
    assert!(
        passed.status.success(),
        "{}",
        String::from_utf8_lossy(&passed.stderr)
    );
}
