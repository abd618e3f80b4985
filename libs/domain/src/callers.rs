//! Who may do what: the `[[callers]]` table maps an authenticated caller identity to the
//! accounts, chains and intent kinds it may use, and whether it may cancel. The gateway checks
//! it at submit (before anything is stored) and the signer checks it again against the caller
//! recorded with the operation. Pure.

use crate::Wei;
use crate::intent::Intent;
use crate::policy::{Violation, same_address};
use serde::{Deserialize, Serialize};

/// What one caller may do.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CallerRule {
    /// The caller's identity: its client certificate's URI SAN (e.g. `spiffe://…`), else its
    /// first DNS SAN, else `cn:` and its subject CN.
    pub identity: String,
    /// Accounts (keys) it may submit from; `"*"`: any. Empty: none.
    pub accounts: Vec<String>,
    /// Chains (`eip155:<id>`, `solana:<cluster>`) it may use; empty: any.
    pub chains: Vec<String>,
    /// Intent kinds it may submit (`evm_transfer`, `evm_contract_call`, `solana_transfer`,
    /// `solana_instructions`); empty: any.
    pub intent_kinds: Vec<String>,
    /// Whether it may cancel its operations.
    pub may_cancel: bool,
}

/// The intent kinds by name.
pub const INTENT_KINDS: [&str; 4] = [
    "evm_transfer",
    "evm_contract_call",
    "solana_transfer",
    "solana_instructions",
];

/// The name of an intent's kind, as `intent_kinds` lists it.
pub fn intent_kind(intent: &Intent) -> &'static str {
    match intent {
        Intent::EvmTransfer(_) => INTENT_KINDS[0],
        Intent::EvmContractCall(_) => INTENT_KINDS[1],
        Intent::SolanaTransfer(_) => INTENT_KINDS[2],
        Intent::SolanaInstructions(_) => INTENT_KINDS[3],
    }
}

impl CallerRule {
    /// Checks the values that parse but cannot work.
    pub fn validate(&self) -> Result<(), String> {
        if self.identity.trim().is_empty() {
            return Err("callers: every rule needs an identity".into());
        }
        if let Some(kind) = self
            .intent_kinds
            .iter()
            .find(|k| !INTENT_KINDS.contains(&k.as_str()))
        {
            return Err(format!(
                "callers: {}: intent kind {kind:?} is not one of {INTENT_KINDS:?}",
                self.identity
            ));
        }
        Ok(())
    }

    fn allows(&self, intent: &Intent) -> Result<(), Violation> {
        // Every key that signs: the account, and an instruction list's co-signers (which the
        // fee payer's policy allows for any of its callers, not for this one).
        let keys = match intent {
            Intent::SolanaInstructions(list) => crate::policy::signing_keys(list),
            _ => vec![intent.account()],
        };
        if let Some(account) = keys.iter().find(|key| {
            !self
                .accounts
                .iter()
                .any(|a| a == "*" || same_address(a, key))
        }) {
            return Err(Violation(format!(
                "caller {} may not use account {account}",
                self.identity
            )));
        }
        let chain = intent.chain().to_string();
        if !self.chains.is_empty() && !self.chains.contains(&chain) {
            return Err(Violation(format!(
                "caller {} may not use chain {chain}",
                self.identity
            )));
        }
        let kind = intent_kind(intent);
        if !self.intent_kinds.is_empty() && !self.intent_kinds.iter().any(|k| k == kind) {
            return Err(Violation(format!(
                "caller {} may not submit {kind} intents",
                self.identity
            )));
        }
        // A contract call that carries value pays its target, whatever its data: a transfer
        // too, as the key policy holds it.
        if let Intent::EvmContractCall(call) = intent
            && call.value != Wei::zero()
            && !self.intent_kinds.is_empty()
            && !self.intent_kinds.iter().any(|k| k == INTENT_KINDS[0])
        {
            return Err(Violation(format!(
                "caller {} may not send value (a contract call carrying {} wei is a transfer \
                 too: it needs evm_transfer in intent_kinds)",
                self.identity, call.value
            )));
        }
        Ok(())
    }
}

/// The callers table. Empty: authorization is off (a development setup that authenticates
/// nobody); every caller may do everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Callers<'a>(pub &'a [CallerRule]);

impl Callers<'_> {
    fn rule(&self, caller: &str) -> Result<Option<&CallerRule>, Violation> {
        if self.0.is_empty() {
            return Ok(None);
        }
        match self.0.iter().find(|r| r.identity == caller) {
            Some(rule) => Ok(Some(rule)),
            None if caller.is_empty() => Err(Violation(
                "the caller is not authenticated, and only callers listed in [[callers]] may call"
                    .into(),
            )),
            None => Err(Violation(format!("caller {caller} is not in [[callers]]"))),
        }
    }

    /// May `caller` submit `intent`?
    pub fn may_submit(&self, caller: &str, intent: &Intent) -> Result<(), Violation> {
        match self.rule(caller)? {
            Some(rule) => rule.allows(intent),
            None => Ok(()),
        }
    }

    /// May `caller` read (get, watch, list) its operations? Any caller the table names; with
    /// no table, anyone.
    pub fn may_read(&self, caller: &str) -> Result<(), Violation> {
        self.rule(caller).map(|_| ())
    }

    /// May `caller` cancel its operations?
    pub fn may_cancel(&self, caller: &str) -> Result<(), Violation> {
        match self.rule(caller)? {
            Some(rule) if !rule.may_cancel => Err(Violation(format!(
                "caller {caller} may not cancel (may_cancel is false)"
            ))),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EvmAddress, EvmTransfer, Lamports, SolanaPubkey, SolanaTransfer, Wei};

    const A: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
    const B: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";

    fn transfer(from: &str) -> Intent {
        Intent::EvmTransfer(EvmTransfer {
            chain_id: 31337,
            from: EvmAddress::parse(from).unwrap(),
            to: EvmAddress::parse(A).unwrap(),
            value: Wei::zero(),
        })
    }

    #[test]
    fn a_caller_uses_only_its_accounts_chains_and_kinds() {
        let rules = [
            CallerRule {
                identity: "spiffe://corp/payments".into(),
                accounts: vec![A.to_lowercase()],
                chains: vec!["eip155:31337".into()],
                intent_kinds: vec!["evm_transfer".into()],
                may_cancel: true,
            },
            CallerRule {
                identity: "reports".into(),
                ..Default::default()
            },
        ];
        let callers = Callers(&rules);
        assert_eq!(
            callers.may_submit("spiffe://corp/payments", &transfer(A)),
            Ok(())
        );
        let refused =
            |caller: &str, intent: &Intent| callers.may_submit(caller, intent).unwrap_err().0;
        assert!(refused("spiffe://corp/payments", &transfer(B)).contains("account"));
        assert!(
            refused("reports", &transfer(A)).contains("account"),
            "no accounts: none"
        );
        assert!(refused("someone", &transfer(A)).contains("not in [[callers]]"));
        assert!(refused("", &transfer(A)).contains("not authenticated"));
        let sol = Intent::SolanaTransfer(SolanaTransfer {
            cluster: "localnet".into(),
            from: SolanaPubkey::from([1; 32]),
            to: SolanaPubkey::from([2; 32]),
            lamports: Lamports(1),
        });
        let any_account = [CallerRule {
            identity: "x".into(),
            accounts: vec!["*".into()],
            chains: vec!["eip155:31337".into()],
            ..Default::default()
        }];
        assert!(
            Callers(&any_account)
                .may_submit("x", &sol)
                .unwrap_err()
                .0
                .contains("chain solana:localnet")
        );
        assert_eq!(callers.may_read("reports"), Ok(()));
        assert!(callers.may_read("").is_err(), "unauthenticated: nothing");
        assert!(callers.may_read("someone").is_err());
        assert_eq!(callers.may_cancel("spiffe://corp/payments"), Ok(()));
        assert!(callers.may_cancel("reports").is_err());
        assert!(callers.may_cancel("someone").is_err());
    }

    #[test]
    fn intent_kinds_limit_only_when_listed() {
        let call = Intent::EvmContractCall(crate::EvmContractCall {
            chain_id: 31337,
            from: EvmAddress::parse(A).unwrap(),
            to: EvmAddress::parse(B).unwrap(),
            data: vec![1],
            value: Wei::zero(),
            gas_limit: None,
        });
        let transfers_only = [CallerRule {
            identity: "x".into(),
            accounts: vec!["*".into()],
            intent_kinds: vec!["evm_transfer".into()],
            ..Default::default()
        }];
        assert_eq!(
            Callers(&transfers_only).may_submit("x", &transfer(A)),
            Ok(())
        );
        assert!(
            Callers(&transfers_only)
                .may_submit("x", &call)
                .unwrap_err()
                .0
                .contains("evm_contract_call")
        );
        let any_kind = [CallerRule {
            identity: "x".into(),
            accounts: vec!["*".into()],
            ..Default::default()
        }];
        assert_eq!(Callers(&any_kind).may_submit("x", &call), Ok(()));
        assert_eq!(intent_kind(&call), "evm_contract_call");
    }

    #[test]
    fn a_contract_call_that_carries_value_is_a_transfer_too() {
        // Value sent with any data (empty, or one byte to an account with no code) pays its
        // target as a transfer does.
        let call = |data: Vec<u8>, value: u64| {
            Intent::EvmContractCall(crate::EvmContractCall {
                chain_id: 31337,
                from: EvmAddress::parse(A).unwrap(),
                to: EvmAddress::parse(B).unwrap(),
                data,
                value: Wei::parse(&value.to_string()).unwrap(),
                gas_limit: None,
            })
        };
        let calls_only = [CallerRule {
            identity: "x".into(),
            accounts: vec!["*".into()],
            intent_kinds: vec!["evm_contract_call".into()],
            ..Default::default()
        }];
        assert_eq!(
            Callers(&calls_only).may_submit("x", &call(vec![1], 0)),
            Ok(())
        );
        for data in [Vec::new(), vec![0]] {
            let refused = Callers(&calls_only)
                .may_submit("x", &call(data, 1))
                .unwrap_err()
                .0;
            assert!(refused.contains("evm_transfer"), "{refused}");
        }
        let both = [CallerRule {
            intent_kinds: vec!["evm_contract_call".into(), "evm_transfer".into()],
            ..calls_only[0].clone()
        }];
        assert_eq!(Callers(&both).may_submit("x", &call(Vec::new(), 1)), Ok(()));
    }

    #[test]
    fn every_key_that_signs_an_instruction_list_is_one_the_caller_may_use() {
        let (payer, other) = (SolanaPubkey::from([1; 32]), SolanaPubkey::from([2; 32]));
        let meta = |pubkey, is_signer| crate::SolanaAccountMeta {
            pubkey,
            is_signer,
            is_writable: true,
        };
        // A transfer out of `other`, co-signed: the fee payer's policy may allow it as a
        // co-signer, but this caller was given the fee payer only.
        let spend_other = Intent::SolanaInstructions(crate::SolanaInstructions {
            cluster: "localnet".into(),
            fee_payer: payer,
            instructions: vec![crate::SolanaInstruction {
                program_id: SolanaPubkey::from([0; 32]),
                accounts: vec![meta(other, true), meta(payer, false)],
                data: vec![2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0],
            }],
        });
        let payer_only = [CallerRule {
            identity: "x".into(),
            accounts: vec![payer.to_string()],
            ..Default::default()
        }];
        let refused = Callers(&payer_only)
            .may_submit("x", &spend_other)
            .unwrap_err()
            .0;
        assert!(refused.contains(&other.to_string()), "{refused}");
        let both = [CallerRule {
            accounts: vec![payer.to_string(), other.to_string()],
            ..payer_only[0].clone()
        }];
        assert_eq!(Callers(&both).may_submit("x", &spend_other), Ok(()));
        let any = [CallerRule {
            accounts: vec!["*".into()],
            ..payer_only[0].clone()
        }];
        assert_eq!(Callers(&any).may_submit("x", &spend_other), Ok(()));
    }

    #[test]
    fn no_table_authorizes_everyone_and_bad_rules_are_named() {
        assert_eq!(Callers(&[]).may_submit("", &transfer(B)), Ok(()));
        assert_eq!(Callers(&[]).may_cancel(""), Ok(()));
        let bad = CallerRule {
            identity: "x".into(),
            intent_kinds: vec!["transfer".into()],
            ..Default::default()
        };
        assert!(bad.validate().unwrap_err().contains("\"transfer\""));
        assert!(CallerRule::default().validate().is_err());
    }
}
