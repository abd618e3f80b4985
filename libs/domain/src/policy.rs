//! Per-key signing policy: which chains, how much, to whom. The signer checks it before it
//! signs anything (it is the authority); the gateway checks the same rules at submit, so a
//! caller learns at once what the signer would refuse.
//!
//! Pure. The rolling-window limit needs the key's recent history: the signer checks it inside
//! its signing transaction.

use crate::SolanaPubkey;
use crate::amount::{Lamports, Wei};
use crate::intent::{Intent, SolanaInstructions};
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
    /// Largest amount of lamports one Solana operation of the key may move (decimal); empty:
    /// no limit. Counted: a transfer's lamports, and in an instruction list every System
    /// Program instruction that moves lamports out (transfer, create account, withdraw nonce).
    pub max_lamports: String,
    /// Largest total lamports over `window_secs` (decimal); empty: no limit.
    pub window_max_lamports: String,
    /// Keys (base58) other than the fee payer that the key's Solana instruction lists may
    /// name as signers; empty: none. Each such key signs too, so naming it lets this key's
    /// callers spend from it, within the co-signer's own policy (which bounds every
    /// transaction it signs, as it bounds its own operations).
    pub allowed_co_signers: Vec<String>,
    /// The most an EVM transaction of the key may offer per gas, in gwei (its fee cap, or
    /// its gas price), below the chain's `max_fee_per_gas_gwei`; 0: the chain's alone.
    pub max_fee_per_gas_gwei: u64,
    /// The most it may offer as priority fee per gas, in gwei; 0: no limit of its own. (A
    /// legacy transaction has no priority fee: only the per-gas limits hold it.)
    pub max_priority_fee_per_gas_gwei: u64,
    /// The most one EVM transaction of the key may cost in fees (gas limit × fee cap), in wei
    /// (decimal); empty: no limit.
    pub max_fee_wei: String,
    /// How many fee bumps one operation of the key may have signed; absent: the
    /// broadcaster's `max_fee_bumps` alone.
    pub max_fee_bumps: Option<u32>,
}

/// A broken rule, in words for the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation(pub String);

/// EVM addresses compare without their checksum case; a Solana key (base58) is case-sensitive.
/// (An EVM address never equals a base58 key in any case, so `a` alone tells which rule.)
pub(crate) fn same_address(a: &str, b: &str) -> bool {
    if a.starts_with("0x") {
        a.eq_ignore_ascii_case(b)
    } else {
        a == b
    }
}

impl KeyPolicy {
    /// Does this policy govern `account`?
    pub fn governs(&self, account: &str) -> bool {
        same_address(&self.account, account)
    }

    /// Checks the values that parse but cannot work: amounts must be decimal wei, selectors
    /// `0x` + 8 hex digits, a window limit needs a window.
    pub fn validate(&self) -> Result<(), String> {
        // A typo would leave the key it meant governed by no policy at all.
        let parsed = if self.account.starts_with("0x") {
            crate::EvmAddress::parse(&self.account).map(|_| ())
        } else {
            SolanaPubkey::parse(&self.account).map(|_| ())
        };
        if let (false, Err(rule)) = (self.account == "*", parsed) {
            return Err(format!(
                "policy for {:?}: account must be an EVM address (0x…), a Solana key (base58) \
                 or \"*\": {rule}",
                self.account
            ));
        }
        for (field, value) in [
            ("max_value_wei", &self.max_value_wei),
            ("window_max_value_wei", &self.window_max_value_wei),
            ("max_fee_wei", &self.max_fee_wei),
        ] {
            if !value.is_empty() {
                Wei::parse(value)
                    .map_err(|rule| format!("policy for {}: {field} {rule}", self.account))?;
            }
        }
        if Wei::parse(&self.max_fee_wei).is_ok_and(|max| max == Wei::zero()) {
            return Err(format!(
                "policy for {}: max_fee_wei 0 would leave every transaction unpaid",
                self.account
            ));
        }
        for (field, value) in [
            ("max_lamports", &self.max_lamports),
            ("window_max_lamports", &self.window_max_lamports),
        ] {
            if !value.is_empty() {
                Lamports::parse(value)
                    .map_err(|rule| format!("policy for {}: {field} {rule}", self.account))?;
            }
        }
        for (field, value) in [
            ("window_max_value_wei", &self.window_max_value_wei),
            ("window_max_lamports", &self.window_max_lamports),
        ] {
            if !value.is_empty() && self.window_secs == 0 {
                return Err(format!(
                    "policy for {}: {field} needs window_secs",
                    self.account
                ));
            }
        }
        for key in &self.allowed_co_signers {
            SolanaPubkey::parse(key).map_err(|rule| {
                format!(
                    "policy for {}: allowed_co_signers {key:?} {rule}",
                    self.account
                )
            })?;
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
            Intent::SolanaTransfer(_) | Intent::SolanaInstructions(_) => {
                return self.check_solana(intent);
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
        // A contract call that carries value pays its target: it is a transfer too.
        if (data.is_none() || value != &Wei::zero()) && !self.allowed_recipient(&to) {
            return Err(Violation(format!(
                "recipient {to} is not in allowed_recipients"
            )));
        }
        if let Some(data) = data {
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
        Ok(())
    }

    fn allowed_recipient(&self, to: &str) -> bool {
        self.allowed_recipients.is_empty()
            || self.allowed_recipients.iter().any(|r| same_address(r, to))
    }

    fn check_solana(&self, intent: &Intent) -> Result<(), Violation> {
        let programs: Vec<String> = match intent {
            Intent::SolanaInstructions(list) => list
                .instructions
                .iter()
                .map(|ix| ix.program_id.to_string())
                .collect(),
            _ => vec![SYSTEM_PROGRAM.to_owned()],
        };
        self.check_programs(programs)?;
        let limited = !self.max_lamports.is_empty()
            || !self.window_max_lamports.is_empty()
            || !self.allowed_recipients.is_empty();
        if !limited {
            return Ok(());
        }
        if let (Intent::SolanaInstructions(list), true) =
            (intent, self.allowed_program_ids.is_empty())
        {
            // Another program handed a signer can move its lamports through the System Program
            // itself, out of sight of this count: with lamport limits, only programs the policy
            // trusts (allowed_program_ids) may be given one. The runtime hands it one whenever
            // it names a key that signs the transaction, flagged as a signer there or not.
            let signing = signing_keys(list);
            if let Some((index, ix)) = list.instructions.iter().enumerate().find(|(_, ix)| {
                ix.program_id.to_string() != SYSTEM_PROGRAM
                    && ix
                        .accounts
                        .iter()
                        .any(|meta| signing.contains(&meta.pubkey.to_string()))
            }) {
                return Err(Violation(format!(
                    "instruction {index}: program {} is given a signer; with lamport limits \
                     set, list the programs trusted with one in allowed_program_ids",
                    ix.program_id
                )));
            }
        }
        let moved = lamports_moved(intent)?;
        if let Ok(max) = Lamports::parse(&self.max_lamports) {
            let total = moved.iter().map(|(_, l)| u128::from(*l)).sum::<u128>();
            if total > u128::from(max.0) {
                return Err(Violation(format!(
                    "{total} lamports exceed max_lamports {max}"
                )));
            }
        }
        if let Some((to, _)) = moved.iter().find(|(to, _)| !self.allowed_recipient(to)) {
            return Err(Violation(format!(
                "recipient {to} is not in allowed_recipients"
            )));
        }
        Ok(())
    }
}

/// Checks an intent against the policy of the account the intent itself names (never a
/// separate field), and against the rules that hold without any policy: a Solana instruction
/// list may make no key but its fee payer sign, unless the fee payer's policy names it in
/// `allowed_co_signers`; and a co-signer's own policy holds for the whole transaction it signs.
pub fn check_intent(policies: &[KeyPolicy], intent: &Intent) -> Result<(), Violation> {
    let account = intent.account();
    let policy = policy_for(policies, &account);
    if let Intent::SolanaInstructions(list) = intent {
        let allowed = policy.map_or(&[][..], |p| p.allowed_co_signers.as_slice());
        check_co_signers(&list.fee_payer.to_string(), allowed, co_signers(list))?;
        check_no_priority_fee(list)?;
        // Naming a co-signer lets the fee payer's callers use its signature, not its
        // limits: the transaction moves what the co-signer signs for, so its policy bounds it.
        let fee_payer = list.fee_payer.to_string();
        for key in co_signers(list).iter().filter(|key| **key != fee_payer) {
            if let Some(own) = policy_for(policies, key) {
                own.check(intent)
                    .map_err(|v| Violation(format!("co-signer {key}: {}", v.0)))?;
            }
        }
    }
    match policy {
        Some(policy) => policy.check(intent),
        None => Ok(()),
    }
}

/// Refuses any signer but the fee payer that `allowed` does not name. Applied to the intent
/// at submit, and by the signer to the message it is about to sign.
pub fn check_co_signers<I>(fee_payer: &str, allowed: &[String], signers: I) -> Result<(), Violation>
where
    I: IntoIterator<Item = String>,
{
    match signers
        .into_iter()
        .find(|key| key != fee_payer && !allowed.iter().any(|a| a == key))
    {
        Some(key) => Err(Violation(format!(
            "the instructions need a signature of {key}, not only of the fee payer {fee_payer}; \
             only keys in the fee payer's allowed_co_signers may co-sign"
        ))),
        None => Ok(()),
    }
}

/// Refuses an instruction that sets the priority fee. The signer sets it, from its
/// `compute_unit_price_micro_lamports`; one a caller set would be paid by the fee payer at any
/// price, past every limit of its policy. (The compute unit limit is the caller's to set.)
fn check_no_priority_fee(list: &SolanaInstructions) -> Result<(), Violation> {
    const SET_COMPUTE_UNIT_PRICE: u8 = 3;
    match list.instructions.iter().position(|ix| {
        ix.program_id.to_string() == COMPUTE_BUDGET_PROGRAM
            && ix.data.first() == Some(&SET_COMPUTE_UNIT_PRICE)
    }) {
        Some(index) => Err(Violation(format!(
            "instruction {index}: sets a priority fee (compute unit price); the signer sets it \
             (compute_unit_price_micro_lamports)"
        ))),
        None => Ok(()),
    }
}

/// Refuses an instruction that names one of `nonce_accounts`: the durable-nonce accounts
/// registered for the list's signing keys, which the signer's own operations hold. Their
/// authority signs the list, so it could withdraw, advance or hand over an account another
/// operation's signed transaction depends on: that operation could then never be proven
/// landed or expired. Under any policy, as the signer alone knows which accounts these are.
pub fn check_nonce_accounts(
    list: &SolanaInstructions,
    nonce_accounts: &[String],
) -> Result<(), Violation> {
    for (index, ix) in list.instructions.iter().enumerate() {
        if let Some(meta) = ix
            .accounts
            .iter()
            .find(|meta| nonce_accounts.contains(&meta.pubkey.to_string()))
        {
            return Err(Violation(format!(
                "instruction {index}: names {}, a durable-nonce account the signer's operations \
                 use; no instruction list may touch one",
                meta.pubkey
            )));
        }
    }
    Ok(())
}

/// Every key that signs the list's transaction: its fee payer and each key an instruction
/// flags as a signer. The runtime makes each a signer of every instruction that names it.
pub fn signing_keys(list: &SolanaInstructions) -> Vec<String> {
    std::iter::once(list.fee_payer.to_string())
        .chain(co_signers(list))
        .collect()
}

/// The keys an instruction list marks as signers.
fn co_signers(list: &SolanaInstructions) -> Vec<String> {
    list.instructions
        .iter()
        .flat_map(|ix| ix.accounts.iter())
        .filter(|meta| meta.is_signer)
        .map(|meta| meta.pubkey.to_string())
        .collect()
}

/// Where the intent moves lamports to, and how many. Only the System Program can debit an
/// account it owns (every wallet), so its instructions are all that move a signer's SOL; one
/// whose lamports cannot be read is refused rather than counted as zero.
pub fn lamports_moved(intent: &Intent) -> Result<Vec<(String, u64)>, Violation> {
    let list = match intent {
        Intent::SolanaTransfer(t) => return Ok(vec![(t.to.to_string(), t.lamports.0)]),
        Intent::SolanaInstructions(list) => list,
        _ => return Ok(Vec::new()),
    };
    let mut moved = Vec::new();
    for (index, ix) in list.instructions.iter().enumerate() {
        if ix.program_id.to_string() != SYSTEM_PROGRAM {
            continue;
        }
        let unreadable = || {
            Violation(format!(
                "instruction {index}: a System Program instruction whose lamports this policy \
                 cannot bound (create account with seed, assign, allocate, initialize or \
                 authorize a nonce, or unreadable)"
            ))
        };
        let kind = ix
            .data
            .get(..4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(unreadable)?;
        // The recipient's position among the instruction's accounts, for the kinds that move
        // lamports with the amount right after the kind: create account, transfer, withdraw
        // from a nonce account, transfer with seed.
        let recipient = match kind {
            0 | 2 | 5 => 1,
            11 => 2,
            // Advance or upgrade a nonce account: nothing moves.
            4 | 12 => continue,
            // Assign (with seed) hands an account, all its lamports with it, to a program, and
            // so does allocate with seed; allocate and initialize a nonce make a wallet a nonce
            // account, its balance then its authority's; authorizing a nonce account hands its
            // balance to a new authority; create account with seed has its amount behind a
            // variable-length seed. Refused, not counted.
            _ => return Err(unreadable()),
        };
        let lamports = ix
            .data
            .get(4..12)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
            .ok_or_else(unreadable)?;
        let to = ix.accounts.get(recipient).ok_or_else(unreadable)?;
        moved.push((to.pubkey.to_string(), lamports));
    }
    Ok(moved)
}

/// The Solana System Program, which SOL transfers invoke.
const SYSTEM_PROGRAM: &str = "11111111111111111111111111111111";

/// The Solana program whose instructions set a transaction's compute budget and priority fee.
const COMPUTE_BUDGET_PROGRAM: &str = "ComputeBudget111111111111111111111111111111";

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
    use crate::{
        EvmAddress, EvmContractCall, EvmTransfer, Lamports, SolanaAccountMeta, SolanaInstruction,
        SolanaTransfer,
    };

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
            ..Default::default()
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

    fn call_with_value(to: &str, value: &str) -> Intent {
        let Intent::EvmContractCall(call) = call(to, vec![0xa9, 0x05, 0x9c, 0xbb]) else {
            unreachable!()
        };
        Intent::EvmContractCall(EvmContractCall {
            value: Wei::parse(value).unwrap(),
            ..call
        })
    }

    #[test]
    fn a_contract_call_that_carries_value_is_held_to_the_recipient_rule() {
        let policy = KeyPolicy {
            account: A.into(),
            allowed_recipients: vec![B.into()],
            ..Default::default()
        };
        assert_eq!(policy.check(&call_with_value(A, "0")), Ok(()));
        assert!(
            policy
                .check(&call_with_value(A, "1"))
                .unwrap_err()
                .0
                .contains("recipient")
        );
        assert_eq!(policy.check(&call_with_value(B, "1")), Ok(()));
    }

    fn system_ix(kind: u32, lamports: u64, accounts: &[SolanaPubkey]) -> SolanaInstruction {
        let mut data = kind.to_le_bytes().to_vec();
        data.extend_from_slice(&lamports.to_le_bytes());
        SolanaInstruction {
            program_id: SolanaPubkey::parse(SYSTEM_PROGRAM).unwrap(),
            accounts: accounts
                .iter()
                .enumerate()
                .map(|(i, key)| SolanaAccountMeta {
                    pubkey: *key,
                    is_signer: i == 0,
                    is_writable: true,
                })
                .collect(),
            data,
        }
    }

    fn instructions(payer: SolanaPubkey, list: Vec<SolanaInstruction>) -> Intent {
        Intent::SolanaInstructions(SolanaInstructions {
            cluster: "localnet".into(),
            fee_payer: payer,
            instructions: list,
        })
    }

    #[test]
    fn lamports_are_limited_in_transfers_and_in_instruction_lists() {
        let (payer, friend, stranger) = (
            SolanaPubkey::from([1; 32]),
            SolanaPubkey::from([2; 32]),
            SolanaPubkey::from([3; 32]),
        );
        let policy = KeyPolicy {
            account: payer.to_string(),
            max_lamports: "1000".into(),
            allowed_recipients: vec![friend.to_string()],
            ..Default::default()
        };
        policy.validate().unwrap();
        let transfer = |to: SolanaPubkey, lamports: u64| {
            Intent::SolanaTransfer(SolanaTransfer {
                cluster: "localnet".into(),
                from: payer,
                to,
                lamports: Lamports(lamports),
            })
        };
        assert_eq!(policy.check(&transfer(friend, 1000)), Ok(()));
        let rule = |intent: &Intent| policy.check(intent).unwrap_err().0;
        assert!(rule(&transfer(friend, 1001)).contains("max_lamports"));
        assert!(rule(&transfer(stranger, 1)).contains("allowed_recipients"));
        // The same limits inside an instruction list: two transfers that add up past the
        // limit, a transfer to a stranger, a create-account that funds one.
        let two = instructions(
            payer,
            vec![
                system_ix(2, 600, &[payer, friend]),
                system_ix(2, 600, &[payer, friend]),
            ],
        );
        assert!(rule(&two).contains("1200 lamports exceed max_lamports"));
        let to_stranger = instructions(payer, vec![system_ix(2, 1, &[payer, stranger])]);
        assert!(rule(&to_stranger).contains(&stranger.to_string()));
        let create = instructions(payer, vec![system_ix(0, 5000, &[payer, friend])]);
        assert!(rule(&create).contains("max_lamports"));
        let advance = instructions(payer, vec![system_ix(4, 0, &[friend])]);
        assert_eq!(
            policy.check(&advance),
            Ok(()),
            "advancing a nonce moves nothing"
        );
        let mut truncated = system_ix(2, 1, &[payer, friend]);
        truncated.data.truncate(6);
        for (ix, why) in [
            (truncated, "a transfer whose amount is cut short"),
            (
                system_ix(99, 0, &[payer, friend]),
                "an instruction kind unknown",
            ),
            (
                system_ix(1, 0, &[payer, friend]),
                "assign hands the wallet to a program",
            ),
            (
                system_ix(7, 0, &[friend, payer]),
                "authorize hands a nonce balance over",
            ),
        ] {
            assert!(
                rule(&instructions(payer, vec![ix])).contains("cannot bound"),
                "{why}: refused, not counted as 0"
            );
        }
        // Withdrawing from a nonce account pays accounts[1]; a transfer with seed accounts[2].
        let withdraw = instructions(payer, vec![system_ix(5, 1, &[friend, stranger])]);
        assert!(rule(&withdraw).contains(&stranger.to_string()));
        let seeded = instructions(payer, vec![system_ix(11, 1, &[payer, friend, stranger])]);
        assert!(rule(&seeded).contains(&stranger.to_string()));
        let seeded_ok = instructions(payer, vec![system_ix(11, 1, &[payer, stranger, friend])]);
        assert_eq!(policy.check(&seeded_ok), Ok(()));
        // Another program given the payer as signer could move its lamports unseen.
        let mut other = system_ix(2, 0, &[payer]);
        other.program_id = stranger;
        assert!(rule(&instructions(payer, vec![other.clone()])).contains("allowed_program_ids"));
        let trusting = KeyPolicy {
            allowed_program_ids: vec![SYSTEM_PROGRAM.into(), stranger.to_string()],
            ..policy.clone()
        };
        assert_eq!(trusting.check(&instructions(payer, vec![other])), Ok(()));
        // Base58 is case-sensitive: a recipient differing only in case is another key.
        let swapped: String = friend
            .to_string()
            .chars()
            .map(|c| {
                if c.is_ascii_lowercase() {
                    c.to_ascii_uppercase()
                } else {
                    c.to_ascii_lowercase()
                }
            })
            .collect();
        assert!(!same_address(&swapped, &friend.to_string()));
        let bad = KeyPolicy {
            window_max_lamports: "5".into(),
            ..policy.clone()
        };
        assert!(bad.validate().unwrap_err().contains("window_secs"));
    }

    #[test]
    fn only_the_fee_payer_signs_unless_its_policy_names_a_co_signer() {
        let (payer, other) = (SolanaPubkey::from([1; 32]), SolanaPubkey::from([2; 32]));
        // A transfer out of another held key, which the fee payer's caller asks it to sign.
        let spend_other = instructions(payer, vec![system_ix(2, 1, &[other, payer])]);
        let refused = check_intent(&[], &spend_other).unwrap_err().0;
        assert!(
            refused.contains(&other.to_string()) && refused.contains("allowed_co_signers"),
            "{refused}"
        );
        let allowing = KeyPolicy {
            account: payer.to_string(),
            allowed_co_signers: vec![other.to_string()],
            ..Default::default()
        };
        assert_eq!(
            check_intent(std::slice::from_ref(&allowing), &spend_other),
            Ok(())
        );
        let elsewhere = KeyPolicy {
            account: other.to_string(),
            allowed_co_signers: vec![other.to_string()],
            ..Default::default()
        };
        assert!(
            check_intent(&[elsewhere], &spend_other).is_err(),
            "only the fee payer's own policy may allow it"
        );
        let own = instructions(payer, vec![system_ix(2, 1, &[payer, other])]);
        assert_eq!(check_intent(&[], &own), Ok(()));
        let bad = KeyPolicy {
            allowed_co_signers: vec!["not base58!".into()],
            ..allowing
        };
        assert!(bad.validate().unwrap_err().contains("allowed_co_signers"));
    }

    #[test]
    fn a_co_signer_s_own_policy_bounds_the_transaction_it_signs() {
        let (payer, friend, elsewhere) = (
            SolanaPubkey::from([1; 32]),
            SolanaPubkey::from([2; 32]),
            SolanaPubkey::from([3; 32]),
        );
        let payer_policy = KeyPolicy {
            account: payer.to_string(),
            allowed_co_signers: vec![friend.to_string()],
            ..Default::default()
        };
        let friend_policy = KeyPolicy {
            account: friend.to_string(),
            max_lamports: "1000".into(),
            allowed_recipients: vec![payer.to_string()],
            ..Default::default()
        };
        let policies = [payer_policy.clone(), friend_policy];
        let spend = |lamports, to| instructions(payer, vec![system_ix(2, lamports, &[friend, to])]);
        assert_eq!(check_intent(&policies, &spend(1000, payer)), Ok(()));
        for (intent, rule) in [
            (spend(1001, payer), "max_lamports"),
            (spend(10, elsewhere), "allowed_recipients"),
        ] {
            let refused = check_intent(&policies, &intent).unwrap_err().0;
            assert!(
                refused.contains(&format!("co-signer {friend}")) && refused.contains(rule),
                "{refused}"
            );
        }
        // Without a policy of its own (nor a `*` one) the co-signer adds no rule.
        assert_eq!(
            check_intent(std::slice::from_ref(&payer_policy), &spend(1001, elsewhere)),
            Ok(())
        );
    }

    #[test]
    fn a_program_named_with_a_signing_key_gets_its_signature_whatever_its_flag_says() {
        // The runtime makes a key a signer of the whole message: an instruction that names
        // the fee payer unflagged (a token transfer with it as owner) is still handed its
        // signature.
        let (payer, friend, program) = (
            SolanaPubkey::from([1; 32]),
            SolanaPubkey::from([2; 32]),
            SolanaPubkey::from([4; 32]),
        );
        let policy = KeyPolicy {
            account: payer.to_string(),
            max_lamports: "1000".into(),
            allowed_co_signers: vec![friend.to_string()],
            ..Default::default()
        };
        let mut unflagged = system_ix(3, 0, &[friend, payer]);
        unflagged.program_id = program;
        unflagged
            .accounts
            .iter_mut()
            .for_each(|meta| meta.is_signer = false);
        let refused = policy
            .check(&instructions(payer, vec![unflagged.clone()]))
            .unwrap_err()
            .0;
        assert!(refused.contains("allowed_program_ids"), "{refused}");
        // A co-signer is a signer of the message too: named unflagged where another
        // instruction flags it.
        let mut names_co_signer = unflagged.clone();
        names_co_signer.accounts = vec![SolanaAccountMeta {
            pubkey: friend,
            is_signer: false,
            is_writable: false,
        }];
        let co_signed = instructions(
            payer,
            vec![system_ix(2, 1, &[friend, payer]), names_co_signer],
        );
        assert!(policy.check(&co_signed).is_err());
        // A program named with no signing key is not.
        let mut no_signer = unflagged;
        no_signer.accounts = vec![SolanaAccountMeta {
            pubkey: SolanaPubkey::from([9; 32]),
            is_signer: false,
            is_writable: true,
        }];
        assert_eq!(policy.check(&instructions(payer, vec![no_signer])), Ok(()));
    }

    #[test]
    fn a_held_key_is_never_allocated_or_made_a_nonce_account_under_lamport_limits() {
        // Allocate then initialize a nonce on the fee payer with another authority: the
        // wallet becomes a nonce account whose balance that authority withdraws, and not
        // one lamport was "moved". Allocate with seed also assigns its account to a program.
        let (payer, thief) = (SolanaPubkey::from([1; 32]), SolanaPubkey::from([5; 32]));
        let policy = KeyPolicy {
            account: payer.to_string(),
            max_lamports: "1000".into(),
            ..Default::default()
        };
        let mut allocate = system_ix(8, 80, &[payer]);
        allocate.data.truncate(12);
        let initialize = system_ix(6, 0, &[payer, thief]);
        let seeded = system_ix(9, 0, &[thief, payer]);
        for (list, why) in [
            (
                vec![allocate.clone(), initialize.clone()],
                "allocate, then a nonce",
            ),
            (vec![allocate], "allocate alone freezes the wallet"),
            (vec![initialize], "initialize a nonce"),
            (vec![seeded], "allocate with seed assigns"),
        ] {
            let refused = policy.check(&instructions(payer, list)).map_err(|v| v.0);
            assert!(
                refused.as_ref().is_err_and(|r| r.contains("cannot bound")),
                "{why}: {refused:?}"
            );
        }
        // Without lamport limits the key's callers may do anything with it, as before.
        let free = KeyPolicy {
            account: payer.to_string(),
            ..Default::default()
        };
        assert_eq!(
            free.check(&instructions(payer, vec![system_ix(6, 0, &[payer, thief])])),
            Ok(())
        );
    }

    #[test]
    fn an_instruction_list_never_sets_its_own_priority_fee() {
        // The signer sets the priority fee (compute_unit_price_micro_lamports); one the
        // caller sets would burn the fee payer's balance, past every limit.
        let payer = SolanaPubkey::from([1; 32]);
        let budget = |data: Vec<u8>| SolanaInstruction {
            program_id: SolanaPubkey::parse(COMPUTE_BUDGET_PROGRAM).unwrap(),
            accounts: Vec::new(),
            data,
        };
        let mut price = vec![3];
        price.extend_from_slice(&u64::MAX.to_le_bytes());
        let refused = check_intent(&[], &instructions(payer, vec![budget(price)]))
            .unwrap_err()
            .0;
        assert!(refused.contains("priority fee"), "{refused}");
        let mut limit = vec![2];
        limit.extend_from_slice(&400_000u32.to_le_bytes());
        assert_eq!(
            check_intent(&[], &instructions(payer, vec![budget(limit)])),
            Ok(()),
            "a compute unit limit is the caller's to set"
        );
    }

    #[test]
    fn no_instruction_names_a_durable_nonce_account_the_signer_uses() {
        let (payer, nonce, friend) = (
            SolanaPubkey::from([1; 32]),
            SolanaPubkey::from([6; 32]),
            SolanaPubkey::from([2; 32]),
        );
        let registered = [nonce.to_string()];
        let list = |ix: SolanaInstruction| SolanaInstructions {
            cluster: "localnet".into(),
            fee_payer: payer,
            instructions: vec![system_ix(2, 1, &[payer, friend]), ix],
        };
        // Withdrawing its balance: named first, as the account withdrawn from.
        let withdraw = list(system_ix(5, 1, &[nonce, friend, payer]));
        let refused = check_nonce_accounts(&withdraw, &registered).unwrap_err().0;
        assert!(
            refused.contains("instruction 1") && refused.contains(&nonce.to_string()),
            "{refused}"
        );
        // Named anywhere, by any program.
        let mut other = system_ix(0, 0, &[friend, nonce]);
        other.program_id = SolanaPubkey::from([4; 32]);
        assert!(check_nonce_accounts(&list(other), &registered).is_err());
        let elsewhere = list(system_ix(2, 1, &[payer, friend]));
        assert_eq!(check_nonce_accounts(&elsewhere, &registered), Ok(()));
        assert_eq!(check_nonce_accounts(&withdraw, &[]), Ok(()));
    }

    #[test]
    fn a_policy_names_an_account_that_parses_or_every_one() {
        for account in [
            A.to_string(),
            A.to_lowercase(),
            SolanaPubkey::from([1; 32]).to_string(),
            "*".into(),
        ] {
            let policy = KeyPolicy {
                account: account.clone(),
                ..Default::default()
            };
            assert_eq!(policy.validate(), Ok(()), "{account}");
        }
        // A typo would leave the key it meant under no policy at all.
        for account in [
            "",
            "0x1234",
            "0Xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
            "not base58!",
        ] {
            let policy = KeyPolicy {
                account: account.into(),
                ..Default::default()
            };
            let refused = policy.validate().unwrap_err();
            assert!(refused.contains("account"), "{account:?}: {refused}");
        }
        // A checksum typo (one letter's case) says so.
        let typo = KeyPolicy {
            account: A.replacen('F', "f", 1),
            ..Default::default()
        };
        let refused = typo.validate().unwrap_err();
        assert!(refused.contains("checksum"), "{refused}");
    }

    #[test]
    fn lamports_are_counted_only_under_a_lamport_limit() {
        let payer = SolanaPubkey::from([1; 32]);
        let unknown = instructions(payer, vec![system_ix(99, 0, &[payer])]);
        assert_eq!(
            KeyPolicy::default().check(&unknown),
            Ok(()),
            "no lamport limit: an instruction is not read for lamports"
        );
        for limited in [
            KeyPolicy {
                max_lamports: "1".into(),
                ..Default::default()
            },
            KeyPolicy {
                window_max_lamports: "1".into(),
                window_secs: 1,
                ..Default::default()
            },
            KeyPolicy {
                allowed_recipients: vec![payer.to_string()],
                ..Default::default()
            },
        ] {
            assert!(limited.check(&unknown).is_err(), "{limited:?}");
        }
    }

    #[test]
    fn a_fee_limit_of_zero_is_refused_and_others_accepted() {
        let zero = KeyPolicy {
            account: "*".into(),
            max_fee_wei: "0".into(),
            ..Default::default()
        };
        assert!(zero.validate().unwrap_err().contains("max_fee_wei"));
        let some = KeyPolicy {
            account: "*".into(),
            max_fee_wei: "21000000000000".into(),
            ..Default::default()
        };
        assert_eq!(some.validate(), Ok(()));
    }

    #[test]
    fn addresses_compare_by_their_kind() {
        assert!(same_address(A, &A.to_lowercase()));
        assert!(!same_address(A, B));
        let key = SolanaPubkey::from([7; 32]).to_string();
        assert!(same_address(&key, &key));
        assert!(!same_address(&key, &key.to_lowercase()));
        assert!(!same_address(A, &key) && !same_address(&key, A));
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
