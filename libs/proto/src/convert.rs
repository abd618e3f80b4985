//! Protobuf ↔ domain. Parsing collects every broken rule with the path of its field, so one
//! INVALID_ARGUMENT names all that is wrong with a request.

use crate::pb;
use sigcast_domain::{
    EvmAddress, EvmContractCall, EvmTransfer, Intent, IntentRules, Lamports, MAX_SOLANA_ACCOUNTS,
    MAX_SOLANA_INSTRUCTION_DATA, MAX_SOLANA_INSTRUCTIONS, OpId, OperationState, Rule,
    SOLANA_PACKET_BYTES, SolanaAccountMeta, SolanaInstruction, SolanaInstructions, SolanaPubkey,
    SolanaTransfer, Wei,
};

/// A field of a request and the rule its value broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldViolation {
    /// Path of the field in the request, e.g. `intent.evm_transfer.to`.
    pub field: String,
    /// What the value must be.
    pub rule: Rule,
}

impl std::fmt::Display for FieldViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.rule)
    }
}

#[derive(Default)]
struct Violations(Vec<FieldViolation>);

impl Violations {
    /// `parsed`, or `None` with its violation recorded under the path `field` names (made
    /// only then: a valid request formats no path).
    fn check<T>(&mut self, field: impl FnOnce() -> String, parsed: Result<T, Rule>) -> Option<T> {
        parsed
            .map_err(|rule| {
                self.0.push(FieldViolation {
                    field: field(),
                    rule,
                })
            })
            .ok()
    }
}

/// Parses an op_id field.
pub fn parse_op_id(field: &str, text: &str) -> Result<OpId, FieldViolation> {
    OpId::parse(text).map_err(|rule| FieldViolation {
        field: field.to_owned(),
        rule,
    })
}

/// Whether an instruction list's transaction fits a Solana packet, named as `field` (the
/// list's instructions) when it does not. A rule of what is submitted, not of what is
/// stored: an operation accepted before is still signed or refused, cancelled, settled.
pub fn fits_a_packet(field: &str, list: &SolanaInstructions) -> Result<(), FieldViolation> {
    let bytes = list.least_transaction_bytes();
    if bytes <= SOLANA_PACKET_BYTES {
        return Ok(());
    }
    Err(FieldViolation {
        field: field.to_owned(),
        rule: Rule(format!(
            "make a transaction of at least {bytes} bytes, more than the \
             {SOLANA_PACKET_BYTES} of a Solana packet: no node would take it"
        )),
    })
}

/// Parses and validates a request's intent against the deployment's rules (`None`: its
/// shape alone, any chain, cluster or call-data size, as a retry is matched against an
/// operation accepted under the rules of its time). `field` is the intent's path in the
/// request (`intent`).
pub fn intent_from_proto(
    field: &str,
    intent: Option<&pb::Intent>,
    rules: Option<&IntentRules>,
) -> Result<Intent, Vec<FieldViolation>> {
    use pb::intent::Kind;
    let mut v = Violations::default();
    let Some(kind) = intent.and_then(|i| i.kind.as_ref()) else {
        v.check::<()>(|| field.to_owned(), Err(Rule(
            "is required: set one of evm_transfer, evm_contract_call, solana_transfer, solana_instructions".into(),
        )));
        return Err(v.0);
    };
    let parsed = match kind {
        Kind::EvmTransfer(t) => {
            let at = format!("{field}.evm_transfer");
            let chain = v.check(
                || format!("{at}.chain_id"),
                rules.map_or(Ok(()), |r| r.check_evm_chain(t.chain_id)),
            );
            let from = v.check(|| format!("{at}.from"), EvmAddress::parse(&t.from));
            let to = v.check(|| format!("{at}.to"), EvmAddress::parse(&t.to));
            let value = v.check(|| format!("{at}.value_wei"), Wei::parse(&t.value_wei));
            (|| {
                chain?;
                Some(Intent::EvmTransfer(EvmTransfer {
                    chain_id: t.chain_id,
                    from: from?,
                    to: to?,
                    value: value?,
                }))
            })()
        }
        Kind::EvmContractCall(c) => {
            let at = format!("{field}.evm_contract_call");
            let chain = v.check(
                || format!("{at}.chain_id"),
                rules.map_or(Ok(()), |r| r.check_evm_chain(c.chain_id)),
            );
            let from = v.check(|| format!("{at}.from"), EvmAddress::parse(&c.from));
            let to = v.check(|| format!("{at}.to"), EvmAddress::parse(&c.to));
            let data = v.check(
                || format!("{at}.data"),
                rules.map_or(Ok(()), |r| r.check_evm_call_data(&c.data)),
            );
            let value = if c.value_wei.is_empty() {
                Some(Wei::zero())
            } else {
                v.check(|| format!("{at}.value_wei"), Wei::parse(&c.value_wei))
            };
            let gas = v.check(|| format!("{at}.gas_limit"), check_gas_limit(c.gas_limit));
            (|| {
                chain?;
                data?;
                Some(Intent::EvmContractCall(EvmContractCall {
                    chain_id: c.chain_id,
                    from: from?,
                    to: to?,
                    data: c.data.clone(),
                    value: value?,
                    gas_limit: gas?,
                }))
            })()
        }
        Kind::SolanaTransfer(t) => {
            let at = format!("{field}.solana_transfer");
            let cluster = v.check(
                || format!("{at}.cluster"),
                rules.map_or(Ok(()), |r| r.check_solana_cluster(&t.cluster)),
            );
            let from = v.check(|| format!("{at}.from"), SolanaPubkey::parse(&t.from));
            let to = v.check(|| format!("{at}.to"), SolanaPubkey::parse(&t.to));
            let lamports = v.check(|| format!("{at}.lamports"), Lamports::parse(&t.lamports));
            (|| {
                cluster?;
                Some(Intent::SolanaTransfer(SolanaTransfer {
                    cluster: t.cluster.clone(),
                    from: from?,
                    to: to?,
                    lamports: lamports?,
                }))
            })()
        }
        Kind::SolanaInstructions(list) => {
            let at = format!("{field}.solana_instructions");
            let cluster = v.check(
                || format!("{at}.cluster"),
                rules.map_or(Ok(()), |r| r.check_solana_cluster(&list.cluster)),
            );
            let fee_payer = v.check(
                || format!("{at}.fee_payer"),
                SolanaPubkey::parse(&list.fee_payer),
            );
            let count = v.check(
                || format!("{at}.instructions"),
                check_count(
                    list.instructions.len(),
                    1,
                    MAX_SOLANA_INSTRUCTIONS,
                    "instructions",
                ),
            );
            // Past the count, nothing else is read: a megabyte of empty instructions would
            // otherwise make a violation of each.
            let instructions: Vec<_> = match count {
                Some(()) => list
                    .instructions
                    .iter()
                    .enumerate()
                    .map(|(i, ix)| {
                        solana_instruction(&mut v, &format!("{at}.instructions[{i}]"), ix)
                    })
                    .collect(),
                None => Vec::new(),
            };
            (|| {
                cluster?;
                count?;
                Some(Intent::SolanaInstructions(SolanaInstructions {
                    cluster: list.cluster.clone(),
                    fee_payer: fee_payer?,
                    instructions: instructions.into_iter().collect::<Option<_>>()?,
                }))
            })()
        }
    };
    match parsed {
        Some(intent) if v.0.is_empty() => Ok(intent),
        _ => Err(v.0),
    }
}

fn solana_instruction(
    v: &mut Violations,
    at: &str,
    ix: &pb::SolanaInstruction,
) -> Option<SolanaInstruction> {
    let program_id = v.check(
        || format!("{at}.program_id"),
        SolanaPubkey::parse(&ix.program_id),
    );
    let count = v.check(
        || format!("{at}.accounts"),
        check_count(ix.accounts.len(), 0, MAX_SOLANA_ACCOUNTS, "accounts"),
    );
    let data = v.check(
        || format!("{at}.data"),
        check_count(ix.data.len(), 0, MAX_SOLANA_INSTRUCTION_DATA, "bytes"),
    );
    let accounts: Vec<_> = ix
        .accounts
        .iter()
        .take(if count.is_some() { usize::MAX } else { 0 })
        .enumerate()
        .map(|(j, meta)| {
            v.check(
                || format!("{at}.accounts[{j}].pubkey"),
                SolanaPubkey::parse(&meta.pubkey),
            )
            .map(|pubkey| SolanaAccountMeta {
                pubkey,
                is_signer: meta.is_signer,
                is_writable: meta.is_writable,
            })
        })
        .collect();
    count?;
    data?;
    Some(SolanaInstruction {
        program_id: program_id?,
        accounts: accounts.into_iter().collect::<Option<_>>()?,
        data: ix.data.clone(),
    })
}

fn check_count(len: usize, min: usize, max: usize, what: &str) -> Result<(), Rule> {
    if (min..=max).contains(&len) {
        Ok(())
    } else {
        Err(Rule(format!("must hold {min} to {max} {what} (got {len})")))
    }
}

/// Smallest and largest explicit gas limits accepted: below 21,000 no transaction is valid;
/// above 100M no current chain's block could hold it.
const GAS_LIMIT_RANGE: std::ops::RangeInclusive<u64> = 21_000..=100_000_000;

fn check_gas_limit(gas_limit: Option<u64>) -> Result<Option<u64>, Rule> {
    match gas_limit {
        Some(limit) if !GAS_LIMIT_RANGE.contains(&limit) => Err(Rule(format!(
            "must be {} to {} when set (got {limit}); leave it unset to estimate",
            GAS_LIMIT_RANGE.start(),
            GAS_LIMIT_RANGE.end()
        ))),
        other => Ok(other),
    }
}

/// The protobuf form of a parsed intent: canonical spellings, as stored and returned.
pub fn intent_to_proto(intent: &Intent) -> pb::Intent {
    use pb::intent::Kind;
    let kind = match intent {
        Intent::EvmTransfer(t) => Kind::EvmTransfer(pb::EvmTransfer {
            chain_id: t.chain_id,
            from: t.from.to_string(),
            to: t.to.to_string(),
            value_wei: t.value.to_string(),
        }),
        Intent::EvmContractCall(c) => Kind::EvmContractCall(pb::EvmContractCall {
            chain_id: c.chain_id,
            from: c.from.to_string(),
            to: c.to.to_string(),
            data: c.data.clone(),
            value_wei: c.value.to_string(),
            gas_limit: c.gas_limit,
        }),
        Intent::SolanaTransfer(t) => Kind::SolanaTransfer(pb::SolanaTransfer {
            cluster: t.cluster.clone(),
            from: t.from.to_string(),
            to: t.to.to_string(),
            lamports: t.lamports.to_string(),
        }),
        Intent::SolanaInstructions(list) => Kind::SolanaInstructions(pb::SolanaInstructions {
            cluster: list.cluster.clone(),
            fee_payer: list.fee_payer.to_string(),
            instructions: list
                .instructions
                .iter()
                .map(|ix| pb::SolanaInstruction {
                    program_id: ix.program_id.to_string(),
                    accounts: ix
                        .accounts
                        .iter()
                        .map(|m| pb::SolanaAccountMeta {
                            pubkey: m.pubkey.to_string(),
                            is_signer: m.is_signer,
                            is_writable: m.is_writable,
                        })
                        .collect(),
                    data: ix.data.clone(),
                })
                .collect(),
        }),
    };
    pb::Intent { kind: Some(kind) }
}

/// A new operation, as recorded when it is accepted: RECEIVED, its intent in canonical form
/// and fingerprinted, its chain and account taken from the intent.
pub fn new_operation(op_id: &OpId, intent: &Intent) -> pb::Operation {
    pb::Operation {
        op_id: op_id.to_string(),
        intent: Some(intent_to_proto(intent)),
        intent_fingerprint: intent.fingerprint().to_string(),
        state: state_to_proto(OperationState::Received).into(),
        chain: intent.chain().to_string(),
        account: intent.account(),
        ..Default::default()
    }
}

/// The protobuf form of a state.
pub fn state_to_proto(state: OperationState) -> pb::OperationState {
    match state {
        OperationState::Received => pb::OperationState::Received,
        OperationState::Signed => pb::OperationState::Signed,
        OperationState::Sent => pb::OperationState::Sent,
        OperationState::Confirmed => pb::OperationState::Confirmed,
        OperationState::Rejected => pb::OperationState::Rejected,
        OperationState::Cancelled => pb::OperationState::Cancelled,
    }
}

/// The domain form of a state; `None` for UNSPECIFIED.
pub fn state_from_proto(state: pb::OperationState) -> Option<OperationState> {
    Some(match state {
        pb::OperationState::Unspecified => return None,
        pb::OperationState::Received => OperationState::Received,
        pb::OperationState::Signed => OperationState::Signed,
        pb::OperationState::Sent => OperationState::Sent,
        pb::OperationState::Confirmed => OperationState::Confirmed,
        pb::OperationState::Rejected => OperationState::Rejected,
        pb::OperationState::Cancelled => OperationState::Cancelled,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::intent::Kind;

    fn rules() -> IntentRules {
        IntentRules::default()
    }

    fn fields(result: Result<Intent, Vec<FieldViolation>>) -> Vec<String> {
        result.unwrap_err().into_iter().map(|v| v.field).collect()
    }

    /// Without the deployment's rules an intent is read for its shape: any chain, cluster or
    /// call-data size, each its own fingerprint; a malformed field is still refused.
    #[test]
    fn the_shape_alone_admits_what_a_deployment_does_not_serve() {
        // Past the default call-data limit, on a chain the defaults do not serve.
        let large_call = || {
            Kind::EvmContractCall(pb::EvmContractCall {
                chain_id: 5,
                from: "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266".into(),
                to: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8".into(),
                data: vec![1; 128 * 1024 + 1],
                value_wei: String::new(),
                gas_limit: None,
            })
        };
        let intents = [
            Kind::EvmTransfer(pb::EvmTransfer {
                chain_id: 1,
                from: "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266".into(),
                to: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8".into(),
                value_wei: "1".into(),
            }),
            large_call(),
            Kind::SolanaTransfer(pb::SolanaTransfer {
                cluster: "devnet".into(),
                from: "4Nd1mBQtrMJVYVfKf2PJy9NZUZdTAsp7D4xWLs4gDB4T".into(),
                to: "11111111111111111111111111111111".into(),
                lamports: "1".into(),
            }),
            Kind::SolanaInstructions(pb::SolanaInstructions {
                cluster: "testnet".into(),
                fee_payer: "4Nd1mBQtrMJVYVfKf2PJy9NZUZdTAsp7D4xWLs4gDB4T".into(),
                instructions: vec![pb::SolanaInstruction {
                    program_id: "11111111111111111111111111111111".into(),
                    ..Default::default()
                }],
            }),
        ];
        let expected = [
            "intent.evm_transfer.chain_id",
            "intent.evm_contract_call.chain_id",
            "intent.solana_transfer.cluster",
            "intent.solana_instructions.cluster",
        ];
        for (kind, field) in intents.into_iter().zip(expected) {
            let intent = pb::Intent { kind: Some(kind) };
            assert!(intent_from_proto("intent", Some(&intent), None).is_ok());
            let refused = fields(intent_from_proto("intent", Some(&intent), Some(&rules())));
            assert_eq!(refused[0], field, "{refused:?}");
        }
        let mut large = rules();
        large.evm_chain_ids.insert(5);
        let call = pb::Intent {
            kind: Some(large_call()),
        };
        assert_eq!(
            fields(intent_from_proto("intent", Some(&call), Some(&large))),
            ["intent.evm_contract_call.data"]
        );
        let mut malformed = call;
        if let Some(Kind::EvmContractCall(c)) = malformed.kind.as_mut() {
            c.to = "0x7099".into();
        }
        assert_eq!(
            fields(intent_from_proto("intent", Some(&malformed), None)),
            ["intent.evm_contract_call.to"]
        );
    }

    #[test]
    fn a_list_past_its_count_is_not_read_entry_by_entry() {
        // A megabyte of empty entries: one violation for the count, not one per entry (each
        // a formatted path, a hundred megabytes in all, built on a request thread; review,
        // fourteenth session).
        let list = |instructions| pb::Intent {
            kind: Some(Kind::SolanaInstructions(pb::SolanaInstructions {
                cluster: String::new(),
                fee_payer: String::new(),
                instructions,
            })),
        };
        let many_accounts = vec![pb::SolanaInstruction {
            accounts: vec![pb::SolanaAccountMeta::default(); 100_000],
            ..Default::default()
        }];
        let many_instructions = vec![pb::SolanaInstruction::default(); 100_000];
        for (instructions, counted) in [
            (
                many_accounts,
                "intent.solana_instructions.instructions[0].accounts",
            ),
            (many_instructions, "intent.solana_instructions.instructions"),
        ] {
            let named = fields(intent_from_proto(
                "intent",
                Some(&list(instructions)),
                Some(&rules()),
            ));
            assert!(named.len() <= 4, "{} violations", named.len());
            assert!(named.iter().any(|f| f == counted), "{named:?}");
        }
    }

    #[test]
    fn every_broken_field_is_named() {
        let intent = pb::Intent {
            kind: Some(Kind::EvmTransfer(pb::EvmTransfer {
                chain_id: 1,
                from: "nope".into(),
                to: "0x70997970c51812dc3a010c7d01b50e0d17dc79c8".into(),
                value_wei: "-3".into(),
            })),
        };
        assert_eq!(
            fields(intent_from_proto("intent", Some(&intent), Some(&rules()))),
            [
                "intent.evm_transfer.chain_id",
                "intent.evm_transfer.from",
                "intent.evm_transfer.value_wei"
            ]
        );
        assert_eq!(
            fields(intent_from_proto("intent", None, Some(&rules()))),
            ["intent"]
        );
        assert_eq!(
            fields(intent_from_proto(
                "intent",
                Some(&pb::Intent { kind: None }),
                Some(&rules())
            )),
            ["intent"]
        );
    }

    #[test]
    fn nested_solana_paths() {
        let good = "11111111111111111111111111111111";
        let intent = pb::Intent {
            kind: Some(Kind::SolanaInstructions(pb::SolanaInstructions {
                cluster: "localnet".into(),
                fee_payer: good.into(),
                instructions: vec![pb::SolanaInstruction {
                    program_id: good.into(),
                    accounts: vec![
                        pb::SolanaAccountMeta {
                            pubkey: good.into(),
                            is_signer: true,
                            is_writable: true,
                        },
                        pb::SolanaAccountMeta {
                            pubkey: "bad!".into(),
                            is_signer: false,
                            is_writable: false,
                        },
                    ],
                    data: vec![1, 2],
                }],
            })),
        };
        assert_eq!(
            fields(intent_from_proto("intent", Some(&intent), Some(&rules()))),
            ["intent.solana_instructions.instructions[0].accounts[1].pubkey"]
        );
    }

    #[test]
    fn round_trip_is_canonical() {
        let intent = pb::Intent {
            kind: Some(Kind::EvmContractCall(pb::EvmContractCall {
                chain_id: 31337,
                from: "0xF39FD6E51AAD88F6F4CE6AB8827279CFFFB92266".into(),
                to: "0x70997970c51812dc3a010c7d01b50e0d17dc79c8".into(),
                data: vec![0xa9, 0x05, 0x9c, 0xbb],
                value_wei: "".into(),
                gas_limit: Some(50_000),
            })),
        };
        let parsed = intent_from_proto("intent", Some(&intent), Some(&rules())).unwrap();
        let Some(Kind::EvmContractCall(back)) = intent_to_proto(&parsed).kind else {
            panic!()
        };
        assert_eq!(back.from, "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266");
        assert_eq!(back.value_wei, "0");
        assert_eq!(
            intent_from_proto("intent", Some(&intent_to_proto(&parsed)), Some(&rules())).unwrap(),
            parsed
        );
    }
}
