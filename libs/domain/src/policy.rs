//! Per-key signing policy: which chains, how much, to whom. The signer checks it before it
//! signs anything (it is the authority); the gateway checks the same rules at submit, so a
//! caller learns at once what the signer would refuse.
//!
//! Pure. The rolling-window limit needs the key's recent history: the signer checks it inside
//! its signing transaction.

use crate::amount::Wei;
use crate::intent::Intent;
use serde::{Deserialize, Serialize};

/// The policy of one account (or of every account without its own, with `account = "*"`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KeyPolicy {
    /// The account it governs (checksummed or lowercase), or `*`.
    pub account: String,
    /// Chain ids the key may sign for; empty: any chain the signer serves.
    pub allowed_chain_ids: Vec<u64>,
    /// Largest value of one operation, in wei (decimal); empty: no limit.
    pub max_value_wei: String,
    /// Largest total value over `window_secs`, in wei (decimal); empty: no limit.
    pub window_max_value_wei: String,
    /// The rolling window, in seconds.
    pub window_secs: u64,
    /// Recipients of transfers the key may pay; empty: any.
    pub allowed_recipients: Vec<String>,
    /// Contracts the key may call; empty: any. A contract call to anything else is refused.
    pub allowed_contracts: Vec<String>,
    /// Function selectors (`0x` + 8 hex digits) the key may call; empty: any.
    pub allowed_selectors: Vec<String>,
    /// Solana programs the key's transactions may invoke (base58); empty: any. A SOL transfer
    /// invokes the System Program, `11111111111111111111111111111111`.
    pub allowed_program_ids: Vec<String>,
}

/// A broken rule, in words for the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation(pub String);

fn same_address(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

impl KeyPolicy {
    /// Does this policy govern `account`?
    pub fn governs(&self, account: &str) -> bool {
        same_address(&self.account, account)
    }

    /// Checks the values that parse but cannot work: amounts must be decimal wei, selectors
    /// `0x` + 8 hex digits, a window limit needs a window.
    pub fn validate(&self) -> Result<(), String> {
        for (field, value) in [
            ("max_value_wei", &self.max_value_wei),
            ("window_max_value_wei", &self.window_max_value_wei),
        ] {
            if !value.is_empty() {
                Wei::parse(value)
                    .map_err(|rule| format!("policy for {}: {field} {rule}", self.account))?;
            }
        }
        if !self.window_max_value_wei.is_empty() && self.window_secs == 0 {
            return Err(format!(
                "policy for {}: window_max_value_wei needs window_secs",
                self.account
            ));
        }
        for selector in &self.allowed_selectors {
            let digits = selector.strip_prefix("0x").unwrap_or_default();
            if digits.len() != 8 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!(
                    "policy for {}: selector {selector:?} must be 0x + 8 hex digits",
                    self.account
                ));
            }
        }
        Ok(())
    }

    /// Checks an intent against the rules that need no history.
    pub fn check(&self, intent: &Intent) -> Result<(), Violation> {
        let (chain_id, to, value, data) = match intent {
            Intent::EvmTransfer(t) => (t.chain_id, t.to.to_string(), &t.value, None),
            Intent::EvmContractCall(c) => (c.chain_id, c.to.to_string(), &c.value, Some(&c.data)),
            Intent::SolanaTransfer(_) => return self.check_programs([SYSTEM_PROGRAM.to_owned()]),
            Intent::SolanaInstructions(list) => {
                return self
                    .check_programs(list.instructions.iter().map(|ix| ix.program_id.to_string()));
            }
        };
        if !self.allowed_chain_ids.is_empty() && !self.allowed_chain_ids.contains(&chain_id) {
            return Err(Violation(format!(
                "chain {chain_id} is not in allowed_chain_ids {:?}",
                self.allowed_chain_ids
            )));
        }
        if let Ok(max) = Wei::parse(&self.max_value_wei)
            && value > &max
        {
            return Err(Violation(format!(
                "value {value} wei exceeds max_value_wei {max}"
            )));
        }
        match data {
            None => {
                if !self.allowed_recipients.is_empty()
                    && !self.allowed_recipients.iter().any(|r| same_address(r, &to))
                {
                    return Err(Violation(format!(
                        "recipient {to} is not in allowed_recipients"
                    )));
                }
            }
            Some(data) => {
                if !self.allowed_contracts.is_empty()
                    && !self.allowed_contracts.iter().any(|c| same_address(c, &to))
                {
                    return Err(Violation(format!(
                        "contract {to} is not in allowed_contracts"
                    )));
                }
                if !self.allowed_selectors.is_empty() {
                    let selector = data
                        .get(..4)
                        .map(|s| format!("0x{}", hex::encode(s)))
                        .unwrap_or_default();
                    if !self
                        .allowed_selectors
                        .iter()
                        .any(|s| s.eq_ignore_ascii_case(&selector))
                    {
                        return Err(Violation(format!(
                            "function selector {selector:?} is not in allowed_selectors"
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

/// The Solana System Program, which SOL transfers invoke.
const SYSTEM_PROGRAM: &str = "11111111111111111111111111111111";

impl KeyPolicy {
    fn check_programs(&self, programs: impl IntoIterator<Item = String>) -> Result<(), Violation> {
        if self.allowed_program_ids.is_empty() {
            return Ok(());
        }
        match programs
            .into_iter()
            .find(|p| !self.allowed_program_ids.contains(p))
        {
            Some(program) => Err(Violation(format!(
                "program {program} is not in allowed_program_ids"
            ))),
            None => Ok(()),
        }
    }
}

/// The policy governing `account`: its own, else the `*` one, else none.
pub fn policy_for<'a>(policies: &'a [KeyPolicy], account: &str) -> Option<&'a KeyPolicy> {
    policies
        .iter()
        .find(|p| p.governs(account))
        .or_else(|| policies.iter().find(|p| p.account == "*"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EvmAddress, EvmContractCall, EvmTransfer};

    const A: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
    const B: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";

    fn transfer(chain_id: u64, to: &str, value: &str) -> Intent {
        Intent::EvmTransfer(EvmTransfer {
            chain_id,
            from: EvmAddress::parse(A).unwrap(),
            to: EvmAddress::parse(to).unwrap(),
            value: Wei::parse(value).unwrap(),
        })
    }

    fn call(to: &str, data: Vec<u8>) -> Intent {
        Intent::EvmContractCall(EvmContractCall {
            chain_id: 1,
            from: EvmAddress::parse(A).unwrap(),
            to: EvmAddress::parse(to).unwrap(),
            data,
            value: Wei::zero(),
            gas_limit: None,
        })
    }

    #[test]
    fn each_rule_refuses_with_its_name() {
        let policy = KeyPolicy {
            account: A.into(),
            allowed_chain_ids: vec![1],
            max_value_wei: "100".into(),
            window_max_value_wei: "150".into(),
            window_secs: 60,
            allowed_recipients: vec![B.to_lowercase()],
            allowed_contracts: vec![B.into()],
            allowed_selectors: vec!["0xa9059cbb".into()],
            allowed_program_ids: vec![],
        };
        assert_eq!(policy.check(&transfer(1, B, "100")), Ok(()));
        assert!(policy.validate().is_ok());
        let rule = |intent: &Intent| policy.check(intent).unwrap_err().0;
        assert!(rule(&transfer(5, B, "1")).contains("allowed_chain_ids"));
        assert!(rule(&transfer(1, B, "101")).contains("max_value_wei"));
        assert!(rule(&transfer(1, A, "1")).contains("allowed_recipients"));
        assert!(rule(&call(A, vec![0xa9, 0x05, 0x9c, 0xbb])).contains("allowed_contracts"));
        assert!(rule(&call(B, vec![0x09, 0x5e, 0xa7, 0xb3])).contains("allowed_selectors"));
        assert!(
            policy
                .check(&call(B, vec![0xa9, 0x05, 0x9c, 0xbb, 1]))
                .is_ok()
        );
        let bad = KeyPolicy {
            allowed_selectors: vec!["a9059cbb".into()],
            ..policy.clone()
        };
        assert!(bad.validate().unwrap_err().contains("selector"));
        let bad = KeyPolicy {
            max_value_wei: "1.5".into(),
            ..policy.clone()
        };
        assert!(bad.validate().unwrap_err().contains("max_value_wei"));
    }

    #[test]
    fn solana_program_ids() {
        use crate::{
            Lamports, SolanaInstruction, SolanaInstructions, SolanaPubkey, SolanaTransfer,
        };
        let key = SolanaPubkey::from([1; 32]);
        let policy = KeyPolicy {
            account: key.to_string(),
            allowed_program_ids: vec![SYSTEM_PROGRAM.into()],
            ..Default::default()
        };
        let transfer = Intent::SolanaTransfer(SolanaTransfer {
            cluster: "localnet".into(),
            from: key,
            to: SolanaPubkey::from([2; 32]),
            lamports: Lamports(1),
        });
        assert_eq!(policy.check(&transfer), Ok(()));
        let other_program = Intent::SolanaInstructions(SolanaInstructions {
            cluster: "localnet".into(),
            fee_payer: key,
            instructions: vec![SolanaInstruction {
                program_id: SolanaPubkey::from([3; 32]),
                accounts: vec![],
                data: vec![],
            }],
        });
        assert!(
            policy
                .check(&other_program)
                .unwrap_err()
                .0
                .contains("allowed_program_ids")
        );
    }

    #[test]
    fn the_account_policy_wins_over_the_default() {
        let own = KeyPolicy {
            account: A.to_lowercase(),
            max_value_wei: "1".into(),
            ..Default::default()
        };
        let default = KeyPolicy {
            account: "*".into(),
            ..Default::default()
        };
        let policies = [default.clone(), own.clone()];
        assert_eq!(policy_for(&policies, A), Some(&own));
        assert_eq!(policy_for(&policies, B), Some(&default));
        assert_eq!(policy_for(&[], B), None);
    }
}
