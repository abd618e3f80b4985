//! sigcast's Solana adapter: transactions built from intents with the Solana crates, the bytes
//! a key signs, and signed transactions assembled from signatures made elsewhere.
//!
//! It never holds keys: the signer signs `message_bytes` with its key (a keystore key or one
//! inside a PKCS#11 token) and hands the signature back here.

pub mod evidence;
mod rpc;

pub use rpc::{LatestBlockhash, SignatureStatus, SolanaRpc, is_genesis_hash, known_genesis_hash};
use sigcast_domain::SolanaTransfer;
use solana_hash::Hash;
use solana_message::Instruction;
pub use solana_message::Message;
use solana_pubkey::Pubkey;
use solana_signature::Signature;
use solana_transaction::Transaction;

/// What a `sendTransaction` answer means for the protocol: a signature back, or "already
/// processed" (a duplicate is as good as accepted), is accepted; anything else is resolved
/// from signature statuses, never from the message.
pub fn send_outcome<T>(
    answer: &Result<T, sigcast_jsonrpc::RpcError>,
) -> sigcast_protocol::SendOutcome {
    match answer {
        Ok(_) => sigcast_protocol::SendOutcome::Accepted,
        Err(sigcast_jsonrpc::RpcError::Node { message, .. })
            if message.contains("already been processed") =>
        {
            sigcast_protocol::SendOutcome::Accepted
        }
        Err(_) => sigcast_protocol::SendOutcome::Unknown,
    }
}

/// What bounds a transaction's life: a recent blockhash (valid until its last valid block
/// height), or a durable nonce (valid until the nonce account advances).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifetime {
    /// A recent blockhash.
    Blockhash([u8; 32]),
    /// A durable nonce: the transaction's first instruction advances `account` (signed by its
    /// `authority`), and the nonce `value` stands in for the blockhash.
    DurableNonce {
        /// The nonce account.
        account: [u8; 32],
        /// Its authority, a signer of the transaction.
        authority: [u8; 32],
        /// The nonce value the account holds when the transaction is signed.
        value: [u8; 32],
    },
}

impl Lifetime {
    /// The value in the message's blockhash field.
    pub fn blockhash(&self) -> [u8; 32] {
        match self {
            Self::Blockhash(hash) => *hash,
            Self::DurableNonce { value, .. } => *value,
        }
    }
}

/// The message of `instructions`, paid by `payer`, bound to `lifetime`, with a priority fee of
/// `compute_unit_price` micro-lamports per compute unit when it is not 0. With a durable nonce
/// the nonce advance comes first, as the runtime requires.
fn message(
    instructions: Vec<Instruction>,
    payer: &Pubkey,
    lifetime: &Lifetime,
    compute_unit_price: u64,
) -> Message {
    let mut all = Vec::with_capacity(instructions.len() + 2);
    if let Lifetime::DurableNonce {
        account, authority, ..
    } = lifetime
    {
        all.push(solana_system_interface::instruction::advance_nonce_account(
            &Pubkey::new_from_array(*account),
            &Pubkey::new_from_array(*authority),
        ));
    }
    all.extend(priority_fee(compute_unit_price));
    all.extend(instructions);
    Message::new_with_blockhash(
        &all,
        Some(payer),
        &Hash::new_from_array(lifetime.blockhash()),
    )
}

/// A SOL transfer's message, fee paid by the sender.
pub fn transfer_message(
    transfer: &SolanaTransfer,
    lifetime: &Lifetime,
    compute_unit_price: u64,
) -> Message {
    let from = Pubkey::new_from_array(*transfer.from.as_bytes());
    let to = Pubkey::new_from_array(*transfer.to.as_bytes());
    let transfer = solana_system_interface::instruction::transfer(&from, &to, transfer.lamports.0);
    message(vec![transfer], &from, lifetime, compute_unit_price)
}

/// The cancel of a durable-nonce operation: a transaction that only advances the nonce, paid
/// by its authority. Once it lands, nothing signed over the old value can land.
pub fn advance_nonce_message(account: [u8; 32], authority: [u8; 32], value: [u8; 32]) -> Message {
    let lifetime = Lifetime::DurableNonce {
        account,
        authority,
        value,
    };
    message(Vec::new(), &Pubkey::new_from_array(authority), &lifetime, 0)
}

/// Creates and initializes a nonce account (`NONCE_ACCOUNT_SIZE` bytes, `lamports` for rent),
/// paid by `authority`, which becomes its authority. Signed by both.
pub fn create_nonce_account_message(
    authority: [u8; 32],
    account: [u8; 32],
    lamports: u64,
    blockhash: [u8; 32],
) -> Message {
    let authority = Pubkey::new_from_array(authority);
    let instructions = solana_system_interface::instruction::create_nonce_account(
        &authority,
        &Pubkey::new_from_array(account),
        &authority,
        lamports,
    );
    Message::new_with_blockhash(
        &instructions,
        Some(&authority),
        &Hash::new_from_array(blockhash),
    )
}

/// Size of a nonce account's data.
pub const NONCE_ACCOUNT_SIZE: usize = 80;

/// An initialized nonce account's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NonceState {
    /// Who may advance it.
    pub authority: [u8; 32],
    /// The value a transaction must carry as its blockhash.
    pub value: [u8; 32],
}

/// Reads a nonce account's data: the system program's `Versions::Current(State::Initialized)`
/// layout (u32 version 1, u32 state 1, authority, nonce value, fee calculator). `None` for an
/// uninitialized, legacy or foreign account.
pub fn parse_nonce_account(data: &[u8]) -> Option<NonceState> {
    if data.len() != NONCE_ACCOUNT_SIZE || data[0..4] != [1, 0, 0, 0] || data[4..8] != [1, 0, 0, 0]
    {
        return None;
    }
    Some(NonceState {
        authority: data[8..40].try_into().ok()?,
        value: data[40..72].try_into().ok()?,
    })
}

/// The ComputeBudget instruction setting a priority fee, or none for 0.
fn priority_fee(compute_unit_price: u64) -> Vec<Instruction> {
    if compute_unit_price == 0 {
        return Vec::new();
    }
    vec![
        solana_compute_budget_interface::ComputeBudgetInstruction::set_compute_unit_price(
            compute_unit_price,
        ),
    ]
}

/// The priority fee a message sets, in micro-lamports per compute unit (0 when none).
pub fn compute_unit_price(message: &Message) -> u64 {
    let program = solana_compute_budget_interface::id();
    message
        .instructions
        .iter()
        .filter(|ix| message.account_keys.get(usize::from(ix.program_id_index)) == Some(&program))
        .find_map(|ix| match ix.data.as_slice() {
            [3, rest @ ..] => rest.try_into().ok().map(u64::from_le_bytes),
            _ => None,
        })
        .unwrap_or(0)
}

/// The bytes the message's transaction takes on the wire, once signed.
pub fn wire_size(message: &Message) -> usize {
    let signatures = usize::from(message.header.num_required_signatures);
    let compact = match signatures {
        0..0x80 => 1,
        0x80..0x4000 => 2,
        _ => 3,
    };
    compact + 64 * signatures + message.serialize().len()
}

/// The bytes every signer of the message signs.
pub fn message_bytes(message: &Message) -> Vec<u8> {
    message.serialize()
}

/// The signed transaction: `signatures` in the order of the message's signer keys.
pub fn assemble(message: Message, signatures: &[[u8; 64]]) -> Transaction {
    Transaction {
        signatures: signatures.iter().map(|s| Signature::from(*s)).collect(),
        message,
    }
}

/// Whether every required signature is present and verifies.
pub fn verify(transaction: &Transaction) -> bool {
    transaction.signatures.len() == usize::from(transaction.message.header.num_required_signatures)
        && transaction.verify().is_ok()
}

/// A message for a list of instructions, fee paid by `fee_payer`.
pub fn instructions_message(
    list: &sigcast_domain::SolanaInstructions,
    lifetime: &Lifetime,
    compute_unit_price: u64,
) -> Message {
    use solana_message::AccountMeta;
    let listed: Vec<Instruction> = list
        .instructions
        .iter()
        .map(|ix| Instruction {
            program_id: Pubkey::new_from_array(*ix.program_id.as_bytes()),
            accounts: ix
                .accounts
                .iter()
                .map(|meta| AccountMeta {
                    pubkey: Pubkey::new_from_array(*meta.pubkey.as_bytes()),
                    is_signer: meta.is_signer,
                    is_writable: meta.is_writable,
                })
                .collect(),
            data: ix.data.clone(),
        })
        .collect();
    let payer = Pubkey::new_from_array(*list.fee_payer.as_bytes());
    message(listed, &payer, lifetime, compute_unit_price)
}

/// The keys that must sign a message, in signature order.
pub fn signers(message: &Message) -> Vec<[u8; 32]> {
    message
        .account_keys
        .iter()
        .take(usize::from(message.header.num_required_signatures))
        .map(|k| k.to_bytes())
        .collect()
}

/// A signed transaction's wire bytes (what `sendTransaction` takes, base64-encoded).
pub fn wire_bytes(transaction: &Transaction) -> Vec<u8> {
    wincode::serialize(transaction).expect("a transaction always serializes")
}

/// The signed transaction in wire bytes.
pub fn from_wire(bytes: &[u8]) -> Option<Transaction> {
    wincode::deserialize(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sigcast_domain::{Lamports, SolanaPubkey};

    /// The gateway's bound, from the intent alone, is the size of the smallest transaction
    /// the signer makes of it (no priority fee, a blockhash), byte for byte; what the signer
    /// adds only makes it larger.
    #[test]
    fn the_least_size_of_an_instruction_list_is_its_bare_transaction_s() {
        use sigcast_domain::{SolanaAccountMeta, SolanaInstruction, SolanaInstructions};
        let key = |n: u8| SolanaPubkey::from([n; 32]);
        let meta = |n, is_signer, is_writable| SolanaAccountMeta {
            pubkey: key(n),
            is_signer,
            is_writable,
        };
        let lists = [
            vec![SolanaInstruction {
                program_id: key(0),
                accounts: vec![meta(1, true, true), meta(2, false, true)],
                data: vec![2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0],
            }],
            // Keys named again (the fee payer as a meta, one key in two instructions), a
            // second signer, a large datum and one of 200 bytes (a two-byte length).
            vec![
                SolanaInstruction {
                    program_id: key(9),
                    accounts: vec![
                        meta(1, true, true),
                        meta(3, true, false),
                        meta(4, false, false),
                    ],
                    data: vec![7; 200],
                },
                SolanaInstruction {
                    program_id: key(9),
                    accounts: vec![meta(4, false, true)],
                    data: vec![1; 900],
                },
            ],
        ];
        let lifetimes = [
            Lifetime::Blockhash([5; 32]),
            Lifetime::DurableNonce {
                account: [6; 32],
                authority: [1; 32],
                value: [5; 32],
            },
        ];
        for instructions in lists {
            let list = SolanaInstructions {
                cluster: "localnet".into(),
                fee_payer: key(1),
                instructions,
            };
            let bare = instructions_message(&list, &lifetimes[0], 0);
            assert_eq!(list.least_transaction_bytes(), wire_size(&bare));
            let signers = usize::from(bare.header.num_required_signatures);
            let signed = assemble(bare, &vec![[0; 64]; signers]);
            assert_eq!(wire_bytes(&signed).len(), wire_size(&signed.message));
            for (lifetime, price) in [(&lifetimes[0], 1_000), (&lifetimes[1], 0)] {
                let more = instructions_message(&list, lifetime, price);
                assert!(wire_size(&more) > list.least_transaction_bytes());
            }
        }
    }

    #[test]
    fn an_unsigned_or_wrongly_signed_transfer_does_not_verify() {
        let transfer = SolanaTransfer {
            cluster: "localnet".into(),
            from: SolanaPubkey::from([7; 32]),
            to: SolanaPubkey::from([9; 32]),
            lamports: Lamports(5_000),
        };
        let message = transfer_message(&transfer, &Lifetime::Blockhash([1; 32]), 0);
        assert_eq!(compute_unit_price(&message), 0);
        assert_eq!(
            compute_unit_price(&transfer_message(
                &transfer,
                &Lifetime::Blockhash([1; 32]),
                2_500
            )),
            2_500
        );
        assert_eq!(message.header.num_required_signatures, 1);
        assert!(!message_bytes(&message).is_empty());
        assert!(!verify(&assemble(message.clone(), &[])));
        assert!(!verify(&assemble(message, &[[3; 64]])));
    }

    #[test]
    fn a_durable_nonce_transfer_advances_the_nonce_first_and_carries_its_value() {
        let transfer = SolanaTransfer {
            cluster: "localnet".into(),
            from: SolanaPubkey::from([7; 32]),
            to: SolanaPubkey::from([9; 32]),
            lamports: Lamports(5_000),
        };
        let lifetime = Lifetime::DurableNonce {
            account: [4; 32],
            authority: [7; 32],
            value: [5; 32],
        };
        let message = transfer_message(&transfer, &lifetime, 100);
        assert_eq!(message.recent_blockhash.to_bytes(), [5; 32]);
        let first = &message.instructions[0];
        let program = message.account_keys[usize::from(first.program_id_index)];
        assert_eq!(program, Pubkey::default(), "the system program");
        assert_eq!(first.data, 4u32.to_le_bytes(), "AdvanceNonceAccount");
        assert_eq!(compute_unit_price(&message), 100);
        assert_eq!(
            signers(&message),
            vec![[7; 32]],
            "the sender is the authority"
        );

        let cancel = advance_nonce_message([4; 32], [7; 32], [5; 32]);
        assert_eq!(cancel.instructions.len(), 1);
        assert_eq!(cancel.recent_blockhash.to_bytes(), [5; 32]);
    }

    #[test]
    fn nonce_account_data_parses_only_when_initialized() {
        let mut data = vec![0u8; NONCE_ACCOUNT_SIZE];
        assert_eq!(parse_nonce_account(&data), None, "uninitialized");
        data[0] = 1;
        data[4] = 1;
        data[8..40].copy_from_slice(&[2; 32]);
        data[40..72].copy_from_slice(&[3; 32]);
        assert_eq!(
            parse_nonce_account(&data),
            Some(NonceState {
                authority: [2; 32],
                value: [3; 32]
            })
        );
        assert_eq!(parse_nonce_account(&data[..79]), None);
    }
}
