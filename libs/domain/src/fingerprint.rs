//! The intent fingerprint: SHA-256 over a canonical encoding of a parsed intent.
//!
//! The encoding is ours and versioned rather than the protobuf bytes, because protobuf
//! encodings are not canonical across implementations and field additions; a fingerprint must
//! stay equal for equal intents for as long as operations are stored.

use crate::intent::{Intent, SolanaInstruction};
use sha2::{Digest, Sha256};

/// SHA-256 of an intent's canonical encoding. Equal intents, equal fingerprints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

/// Length-prefixed fields, so no two different field lists encode alike.
struct Canonical(Sha256);

impl Canonical {
    fn new(kind: &[u8]) -> Self {
        let mut c = Self(Sha256::new());
        c.bytes(b"sigcast.intent.v1");
        c.bytes(kind);
        c
    }
    fn bytes(&mut self, value: &[u8]) -> &mut Self {
        self.0.update((value.len() as u64).to_be_bytes());
        self.0.update(value);
        self
    }
    fn u64(&mut self, value: u64) -> &mut Self {
        self.bytes(&value.to_be_bytes())
    }
    fn text(&mut self, value: &str) -> &mut Self {
        self.bytes(value.as_bytes())
    }
    fn instruction(&mut self, ix: &SolanaInstruction) -> &mut Self {
        self.bytes(ix.program_id.as_bytes())
            .u64(ix.accounts.len() as u64);
        for meta in &ix.accounts {
            self.bytes(meta.pubkey.as_bytes())
                .bytes(&[u8::from(meta.is_signer), u8::from(meta.is_writable)]);
        }
        self.bytes(&ix.data)
    }
    fn finish(self) -> Fingerprint {
        Fingerprint(self.0.finalize().into())
    }
}

impl Intent {
    /// The intent's fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        match self {
            Intent::EvmTransfer(t) => {
                let mut c = Canonical::new(b"evm_transfer");
                c.u64(t.chain_id)
                    .bytes(t.from.as_bytes())
                    .bytes(t.to.as_bytes())
                    .text(t.value.as_str());
                c.finish()
            }
            Intent::EvmContractCall(call) => {
                let mut c = Canonical::new(b"evm_contract_call");
                c.u64(call.chain_id)
                    .bytes(call.from.as_bytes())
                    .bytes(call.to.as_bytes())
                    .bytes(&call.data)
                    .text(call.value.as_str());
                // Absent and present gas limits must differ: an estimate is not a fixed limit.
                match call.gas_limit {
                    Some(limit) => c.bytes(b"gas").u64(limit),
                    None => c.bytes(b"estimate"),
                };
                c.finish()
            }
            Intent::SolanaTransfer(t) => {
                let mut c = Canonical::new(b"solana_transfer");
                c.text(&t.cluster)
                    .bytes(t.from.as_bytes())
                    .bytes(t.to.as_bytes())
                    .u64(t.lamports.0);
                c.finish()
            }
            Intent::SolanaInstructions(list) => {
                let mut c = Canonical::new(b"solana_instructions");
                c.text(&list.cluster)
                    .bytes(list.fee_payer.as_bytes())
                    .u64(list.instructions.len() as u64);
                for ix in &list.instructions {
                    c.instruction(ix);
                }
                c.finish()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::*;

    /// Pinned across versions: a stored operation's fingerprint decides whether a resubmit
    /// after an upgrade is a replay or a conflict. Computed by an independent implementation
    /// (Python's hashlib over the documented length-prefixed encoding), not by this code.
    #[test]
    fn fingerprints_are_pinned() {
        let from = EvmAddress::parse("0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266").unwrap();
        let to = EvmAddress::parse("0x70997970c51812dc3a010c7d01b50e0d17dc79c8").unwrap();
        let cases = [
            (
                Intent::EvmTransfer(EvmTransfer {
                    chain_id: 31337,
                    from,
                    to,
                    value: Wei::parse("1000").unwrap(),
                }),
                "d01be8df9c2208153c64135ddb1bf084196be54887fd73911a4e00f024178697",
            ),
            (
                Intent::EvmContractCall(EvmContractCall {
                    chain_id: 31337,
                    from,
                    to,
                    data: vec![0xa9, 0x05, 0x9c, 0xbb],
                    value: Wei::zero(),
                    gas_limit: Some(60_000),
                }),
                "7e377d5d461620dbb6e026e52771b13e62e9b9cb1823ada30869db6240e41f69",
            ),
            (
                Intent::SolanaTransfer(SolanaTransfer {
                    cluster: "localnet".into(),
                    from: SolanaPubkey::from([1; 32]),
                    to: SolanaPubkey::from([2; 32]),
                    lamports: Lamports(5_000),
                }),
                "ee526ec78f0f1ef1622a73cf9afc3c3fa2dff5b7c559d19f95441218e21f990a",
            ),
            (
                Intent::SolanaInstructions(SolanaInstructions {
                    cluster: "localnet".into(),
                    fee_payer: SolanaPubkey::from([1; 32]),
                    instructions: vec![SolanaInstruction {
                        program_id: SolanaPubkey::from([3; 32]),
                        accounts: vec![SolanaAccountMeta {
                            pubkey: SolanaPubkey::from([1; 32]),
                            is_signer: true,
                            is_writable: true,
                        }],
                        data: vec![2, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0],
                    }],
                }),
                "a12e143c193d0a42b0e238932b25a4573e0365d28490090396c9b75e2433c1e7",
            ),
        ];
        for (intent, expected) in cases {
            assert_eq!(intent.fingerprint().to_string(), expected, "{intent:?}");
        }
    }

    fn transfer(value: &str) -> Intent {
        Intent::EvmTransfer(EvmTransfer {
            chain_id: 31337,
            from: EvmAddress::parse("0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266").unwrap(),
            to: EvmAddress::parse("0x70997970C51812dc3A010C7d01b50e0d17dc79C8").unwrap(),
            value: Wei::parse(value).unwrap(),
        })
    }

    #[test]
    fn equal_intents_equal_fingerprints() {
        assert_eq!(
            transfer("1000").fingerprint(),
            transfer("0001000").fingerprint()
        );
        assert_ne!(
            transfer("1000").fingerprint(),
            transfer("1001").fingerprint()
        );
        assert_eq!(transfer("1").fingerprint().to_string().len(), 64);
    }

    #[test]
    fn kinds_and_gas_limits_differ() {
        let Intent::EvmTransfer(t) = transfer("5") else {
            unreachable!()
        };
        let call = |gas_limit| {
            Intent::EvmContractCall(EvmContractCall {
                chain_id: t.chain_id,
                from: t.from,
                to: t.to,
                data: vec![],
                value: t.value.clone(),
                gas_limit,
            })
        };
        assert_ne!(call(None).fingerprint(), transfer("5").fingerprint());
        assert_ne!(call(None).fingerprint(), call(Some(21000)).fingerprint());
    }
}
