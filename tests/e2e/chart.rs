//! The Helm chart, checked as CI must show it: `helm lint --strict`; renders with the default,
//! production-like and small-install values that pass `kubernetes-validate --strict`; a
//! values file that breaks the schema refused; and every rendered service configuration
//! accepted by the service that will read it.

use crate::clients::repo;
use serde_json::Value;
use sigcast_runtime::ServiceConfig;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn helm() -> PathBuf {
    PathBuf::from(std::env::var("SIGCAST_HELM").expect(
        "SIGCAST_HELM names the helm binary (eval \"$(bash scripts/install-deps.sh --env)\")",
    ))
}

fn chart() -> PathBuf {
    repo().join("deploy/helm/sigcast")
}

fn run(command: &mut Command) -> Output {
    let output = command.output().expect("run");
    assert!(
        output.status.success(),
        "{command:?}:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// `helm template` with `values` (a file under the chart's `ci/`), or the defaults.
fn render(values: Option<&str>) -> String {
    let mut command = Command::new(helm());
    command
        .args(["template", "sigcast", "--namespace", "payments"])
        .arg(chart());
    if let Some(values) = values {
        command.arg("-f").arg(chart().join("ci").join(values));
    }
    String::from_utf8(run(&mut command).stdout).unwrap()
}

fn facts(rendered: &str) -> Value {
    let mut child = Command::new("python3")
        .arg(repo().join("tests/tools/chart_facts.py"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), rendered.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Runs kubernetes-validate --strict on a render; returns its warnings.
fn validate(rendered: &str, dir: &Path, name: &str) -> Vec<String> {
    let file = dir.join(name);
    std::fs::write(&file, rendered).unwrap();
    let output = run(Command::new("kubernetes-validate")
        .args(["--strict", "--quiet"])
        .arg(&file));
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .chain(String::from_utf8_lossy(&output.stderr).lines())
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

/// Each rendered TOML loaded by its service's own configuration code.
fn load_configs(facts: &Value, dir: &Path) {
    let configs = facts["configs"].as_object().expect("the config Secret");
    // RPC URLs may carry API keys: they are in the Secret, in no ConfigMap.
    assert!(
        configs["signer.toml"]
            .as_str()
            .unwrap()
            .contains("rpc_urls")
    );
    let configmaps = facts["configmaps"].as_object().cloned().unwrap_or_default();
    assert!(
        configmaps
            .values()
            .all(|v| !v.as_str().unwrap_or_default().contains("rpc_urls")),
        "RPC URLs in a ConfigMap: {configmaps:?}"
    );
    let write = |name: &str| {
        let path = dir.join(name);
        std::fs::write(&path, configs[name].as_str().unwrap()).unwrap();
        path
    };
    sigcast_gateway::Config::load(Some(&write("gateway.toml"))).expect("gateway.toml");
    sigcast_signer::Config::load(Some(&write("signer.toml"))).expect("signer.toml");
    sigcast_broadcaster::Config::load(Some(&write("broadcaster.toml"))).expect("broadcaster.toml");
}

/// The restrictive security context on every container and pod; only signer containers
/// mount the key material.
fn check_pods(facts: &Value) {
    let containers = facts["containers"].as_array().unwrap();
    assert!(!containers.is_empty());
    for c in containers {
        let s = &c["security"];
        assert_eq!(s["runAsNonRoot"], true, "{c}");
        assert_eq!(s["readOnlyRootFilesystem"], true, "{c}");
        assert_eq!(s["allowPrivilegeEscalation"], false, "{c}");
        assert_eq!(s["capabilities"]["drop"], serde_json::json!(["ALL"]), "{c}");
        assert_eq!(s["seccompProfile"]["type"], "RuntimeDefault", "{c}");
        assert_eq!(c["pod_security"]["runAsNonRoot"], true, "{c}");
        let keys = c["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == "keystores" || v == "passphrase" || v == "pkcs11-pin");
        assert_eq!(
            keys,
            c["name"] == "signer",
            "only the signer mounts keys: {c}"
        );
        if c["name"] != "fdb-cluster-file" {
            assert_eq!(
                c["probes"],
                serde_json::json!(["livenessProbe", "readinessProbe", "startupProbe"]),
                "{c}"
            );
            // The gateway is ready while its public service is: not once it begins to shut
            // down. The others are ready while they run.
            let readiness = if c["name"] == "gateway" {
                "sigcast.v1.OperationService"
            } else {
                ""
            };
            assert_eq!(c["readiness_service"], readiness, "{c}");
            // Drained, not cut: a pause while the Pod leaves its Services, then SIGTERM,
            // within a grace period longer than a call may take (30 s).
            assert_eq!(c["pre_stop"], serde_json::json!(["sleep", "5"]), "{c}");
        }
        assert!(c["grace_seconds"].as_u64().is_some_and(|s| s >= 35), "{c}");
    }
}

#[test]
fn the_chart_lints_renders_validates_and_configures_each_service() {
    let scratch = tempfile::tempdir().unwrap();
    run(Command::new(helm()).args(["lint", "--strict"]).arg(chart()));
    for values in ["production-values.yaml", "embedded-values.yaml"] {
        run(Command::new(helm())
            .args(["lint", "--strict"])
            .arg(chart())
            .arg("-f")
            .arg(chart().join("ci").join(values)));
    }

    // Defaults: the cluster layout on FoundationDB.
    let default = render(None);
    let warnings = validate(&default, scratch.path(), "default.yaml");
    assert!(warnings.is_empty(), "{warnings:?}");
    let f = facts(&default);
    check_pods(&f);
    load_configs(&f, scratch.path());
    // Without cert-manager too, the signer admits the broadcaster's certificate alone, not any
    // its CA issued (a CA that also issues callers' certificates would let them ask for
    // signatures).
    let signer = f["configs"]["signer.toml"].as_str().unwrap();
    assert!(
        signer.contains(
            "allowed_client_identities = [\"spiffe://payments/sigcast/sigcast-broadcaster\"]"
        ),
        "{signer}"
    );
    // The default chain is Ethereum mainnet: a depth of 1 would settle what a one-block reorg
    // removes.
    let broadcaster = f["configs"]["broadcaster.toml"].as_str().unwrap();
    assert!(
        broadcaster.contains("confirmations = 12\n") && signer.contains("confirmations = 12\n"),
        "{broadcaster}"
    );
    let kinds: Vec<&str> = f["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    for expected in [
        "Deployment/sigcast-gateway",
        "Deployment/sigcast-signer",
        "Deployment/sigcast-broadcaster",
        "ServiceAccount/sigcast-signer",
        "NetworkPolicy/sigcast-signer",
        "PodDisruptionBudget/sigcast-signer",
        "Service/sigcast-gateway",
    ] {
        assert!(kinds.contains(&expected), "{expected} in {kinds:?}");
    }
    assert!(
        default.contains("name: sigcast-fdb-config"),
        "the operator's cluster-file ConfigMap"
    );

    // Production-like: 3 replicas each, FoundationDB, mTLS, ServiceMonitor, alerts and
    // dashboard. Custom resources (ServiceMonitor, PrometheusRule, cert-manager Certificates)
    // have no offline schema: only they may warn.
    let production = render(Some("production-values.yaml"));
    for warning in validate(&production, scratch.path(), "production.yaml") {
        assert!(
            warning.contains("kind ServiceMonitor")
                || warning.contains("kind Certificate")
                || warning.contains("kind PrometheusRule"),
            "{warning}"
        );
    }
    assert_eq!(production.matches("replicas: 3").count(), 3);
    assert!(production.contains("kind: ServiceMonitor"));
    // The services' own `service` label (build_info, grpc_server_*) survives the scrape.
    assert!(production.contains("honorLabels: true"));
    let f = facts(&production);
    check_pods(&f);
    load_configs(&f, scratch.path());
    let signer = f["configs"]["signer.toml"].as_str().unwrap();
    assert!(
        signer.contains("[tls]") && signer.contains("[pkcs11]") && signer.contains("[[policies]]")
    );
    // The most a re-signed Solana transaction pays per compute unit.
    assert!(
        signer.contains("max_compute_unit_price_micro_lamports = 20000\n"),
        "{signer}"
    );
    let broadcaster = f["configs"]["broadcaster.toml"].as_str().unwrap();
    assert!(broadcaster.contains("signer_url = \"https://sigcast-signer.payments.svc:50054\""));
    // Operators read any operation and its audit trail (`sigcast op get`, `sigcast audit`).
    let gateway = f["configs"]["gateway.toml"].as_str().unwrap();
    assert!(
        gateway.contains("operators = [\"spiffe://corp.example/ns/ops/sa/oncall\"]\n"),
        "{gateway}"
    );
    // One depth for both: the signer skips another sender's nonce only at the depth the
    // broadcaster settles on.
    assert!(
        broadcaster.contains("confirmations = 12\n") && signer.contains("confirmations = 12\n")
    );

    // The small install: one Pod, three containers, one volume; the signer alone has keys.
    let embedded = render(Some("embedded-values.yaml"));
    for warning in validate(&embedded, scratch.path(), "embedded.yaml") {
        assert!(warning.contains("kind ServiceMonitor"), "{warning}");
    }
    let f = facts(&embedded);
    check_pods(&f);
    load_configs(&f, scratch.path());
    let pod: Vec<&Value> = f["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["workload"] == "sigcast")
        .collect();
    assert_eq!(pod.len(), 3);
    assert!(
        pod.iter()
            .all(|c| c["volumes"].as_array().unwrap().iter().any(|v| v == "data"))
    );
    assert!(embedded.contains("kind: PersistentVolumeClaim"));
    assert!(embedded.contains("type: Recreate"));
}

#[test]
fn values_that_break_the_schema_are_refused_by_helm_lint() {
    let output = Command::new(helm())
        .args(["lint", "--strict"])
        .arg(chart())
        .arg("-f")
        .arg(repo().join("deploy/helm/test-values/invalid.yaml"))
        .output()
        .unwrap();
    assert!(
        !output.status.success(),
        "helm lint accepted invalid values"
    );
    let said = String::from_utf8_lossy(&output.stdout);
    for field in [
        "store.mode",
        "gateway.replicas",
        "chains.evm.0.chainId",
        "chains.evm.0.rpcUrls",
    ] {
        assert!(said.contains(field), "{field} named in:\n{said}");
    }
}

/// `promtool` on `args`; its output.
fn promtool(args: &[&str], dir: &Path) -> String {
    let promtool = std::env::var("SIGCAST_PROMTOOL")
        .expect("SIGCAST_PROMTOOL names promtool (eval \"$(bash scripts/install-deps.sh --env)\")");
    let output = run(Command::new(promtool).args(args).current_dir(dir));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn alerts_pass_promtool_and_the_dashboard_s_queries_parse_and_both_render_as_written() {
    let monitoring = chart().join("monitoring");
    // The rules: valid, and each alert firing (and staying silent) as its unit tests say.
    let checked = promtool(&["check", "rules", "alerts.yaml"], &monitoring);
    assert!(checked.contains("SUCCESS: 8 rules found"), "{checked}");
    let tested = promtool(&["test", "rules", "alerts.test.yaml"], &monitoring);
    assert!(tested.contains("SUCCESS"), "{tested}");

    // Every alert is unit-tested.
    let rules = std::fs::read_to_string(monitoring.join("alerts.yaml")).unwrap();
    let tests = std::fs::read_to_string(monitoring.join("alerts.test.yaml")).unwrap();
    for alert in rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
    {
        assert!(
            tests.contains(&format!("alertname: {alert}\n")),
            "{alert} has no promtool test"
        );
    }

    // The dashboard's queries parse as PromQL: each becomes a recording rule promtool checks.
    let output = run(Command::new("python3")
        .arg(repo().join("tests/tools/monitoring.py"))
        .arg("queries")
        .arg(chart()));
    let queries: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    let panel_exprs: Vec<&str> = queries
        .iter()
        .filter(|q| q["source"].as_str().unwrap().starts_with("panel "))
        .map(|q| q["expr"].as_str().unwrap())
        .collect();
    assert!(panel_exprs.len() >= 15, "{panel_exprs:?}");
    let scratch = tempfile::tempdir().unwrap();
    let recording: String = panel_exprs
        .iter()
        .enumerate()
        .map(|(i, expr)| format!("      - record: dashboard:panel_{i}\n        expr: {expr:?}\n"))
        .collect();
    std::fs::write(
        scratch.path().join("panels.yaml"),
        format!("groups:\n  - name: dashboard\n    rules:\n{recording}"),
    )
    .unwrap();
    let checked = promtool(&["check", "rules", "panels.yaml"], scratch.path());
    assert!(
        checked.contains(&format!("SUCCESS: {} rules found", panel_exprs.len())),
        "{checked}"
    );

    // Rendered: off by default; when on, the PrometheusRule is the rule file as checked, and
    // the ConfigMap holds the dashboard as written, under the sidecar's label.
    let default = facts(&render(None));
    assert!(default.get("prometheus_rules").is_none());
    assert!(default["configmaps"].get("sigcast.json").is_none());
    let production = facts(&render(Some("production-values.yaml")));
    let output = run(Command::new("python3")
        .arg(repo().join("tests/tools/monitoring.py"))
        .arg("rules")
        .arg(chart()));
    let file: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(production["prometheus_rules"], serde_json::json!([file]));
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(monitoring.join("dashboard.json")).unwrap())
            .unwrap();
    let rendered: Value =
        serde_json::from_str(production["configmaps"]["sigcast.json"].as_str().unwrap()).unwrap();
    assert_eq!(rendered, dashboard);
    assert!(render(Some("production-values.yaml")).contains("grafana_dashboard: \"1\""));
}
