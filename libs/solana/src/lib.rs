//! sigcast's Solana adapter: transactions built from intents with the Solana crates, the bytes
//! a key signs, and signed transactions assembled from signatures made elsewhere.
//!
//! It never holds keys: the signer signs `message_bytes` with its key (a keystore key or one
//! inside a PKCS#11 token) and hands the signature back here.

mod rpc;

pub use rpc::{SignatureStatus, SolanaRpc};
use sigcast_domain::SolanaTransfer;
use solana_hash::Hash;
use solana_message::Message;
use solana_pubkey::Pubkey;
use solana_signature::Signature;
use solana_transaction::Transaction;

/// A SOL transfer's message, fee paid by the sender, bound to `blockhash` (a recent blockhash
/// or a durable nonce value), with a priority fee of `compute_unit_price` micro-lamports per
/// compute unit when it is not 0.
pub fn transfer_message(
    transfer: &SolanaTransfer,
    blockhash: [u8; 32],
    compute_unit_price: u64,
) -> Message {
    let from = Pubkey::new_from_array(*transfer.from.as_bytes());
    let to = Pubkey::new_from_array(*transfer.to.as_bytes());
    let mut instructions = priority_fee(compute_unit_price);
    instructions.push(solana_system_interface::instruction::transfer(
        &from,
        &to,
        transfer.lamports.0,
    ));
    Message::new_with_blockhash(&instructions, Some(&from), &Hash::new_from_array(blockhash))
}

/// The ComputeBudget instruction setting a priority fee, or none for 0.
fn priority_fee(compute_unit_price: u64) -> Vec<solana_message::Instruction> {
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

/// A message for a list of instructions, fee paid by `fee_payer`, with an optional priority fee.
pub fn instructions_message(
    list: &sigcast_domain::SolanaInstructions,
    blockhash: [u8; 32],
    compute_unit_price: u64,
) -> Message {
    use solana_message::{AccountMeta, Instruction};
    let mut instructions = priority_fee(compute_unit_price);
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
    instructions.extend(listed);
    let payer = Pubkey::new_from_array(*list.fee_payer.as_bytes());
    Message::new_with_blockhash(
        &instructions,
        Some(&payer),
        &Hash::new_from_array(blockhash),
    )
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

    #[test]
    fn an_unsigned_or_wrongly_signed_transfer_does_not_verify() {
        let transfer = SolanaTransfer {
            cluster: "localnet".into(),
            from: SolanaPubkey::from([7; 32]),
            to: SolanaPubkey::from([9; 32]),
            lamports: Lamports(5_000),
        };
        let message = transfer_message(&transfer, [1; 32], 0);
        assert_eq!(compute_unit_price(&message), 0);
        assert_eq!(
            compute_unit_price(&transfer_message(&transfer, [1; 32], 2_500)),
            2_500
        );
        assert_eq!(message.header.num_required_signatures, 1);
        assert!(!message_bytes(&message).is_empty());
        assert!(!verify(&assemble(message.clone(), &[])));
        assert!(!verify(&assemble(message, &[[3; 64]])));
    }
}
