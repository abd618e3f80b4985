"""The package against a live gateway (tests/e2e/clients.rs starts one and runs this).

Environment: SIGCAST_GATEWAY (host:port), SIGCAST_FROM and SIGCAST_TO (a funded EVM dev account
the signer holds, and a recipient), SIGCAST_CLI (the `sigcast` binary, whose derive-op-id this
package must agree with), SIGCAST_RUN (a prefix making this run's op_ids unique).
"""

import os
import socket
import subprocess
import time
import unittest

import grpc
import sigcast_client as sc
from sigcast_client import pb

GATEWAY = os.environ["SIGCAST_GATEWAY"]
FROM, TO = os.environ["SIGCAST_FROM"], os.environ["SIGCAST_TO"]
RUN = os.environ["SIGCAST_RUN"]
SOL_A = "oeYf6KAJkLYhBuR8CiGc6L4D4Xtfepr85fuDgA9kq96"
SOL_B = "AqynRZwvVqUPRwRJXvm6odUb3t93fDjnWe3p6BeuUFxD"


def cli_op_id(chain, sender, recipient, amount, reference):
    return subprocess.run(
        [os.environ["SIGCAST_CLI"], "derive-op-id", "--chain", chain, "--from", sender,
         "--to", recipient, "--amount", amount, "--reference", reference],
        check=True, capture_output=True, text=True,
    ).stdout.strip()


class DeriveOpId(unittest.TestCase):
    def test_agrees_with_the_service_for_every_spelling(self):
        cases = [
            ("eip155:1", FROM, TO, "1000000000000000000", "invoice-2026-0001"),
            ("eip155:01", FROM.lower(), TO.upper().replace("0X", "0x"), "007", "r"),
            ("eip155:31337", FROM, TO, str(2**256 - 1), "max"),
            ("solana:localnet", SOL_A, SOL_B, "0", "payout-9"),
            ("solana:devnet", SOL_B, SOL_A, "18446744073709551615", "r"),
            ("eip155:+0001", FROM, TO, "0" * 5000 + "7", "padded"),
        ]
        for case in cases:
            with self.subTest(case=case):
                self.assertEqual(sc.derive_op_id(*case), cli_op_id(*case))
        # Pinned in sigcast_domain: an upgrade must not move anyone's op_ids.
        self.assertEqual(
            sc.derive_op_id(*cases[0]),
            "sc1-0a528abe818a551b5179fb6160145bed7deabda8c3d9f1fb7fb17a822d2c0fce",
        )

    def test_refuses_what_the_service_refuses(self):
        for bad in [
            ("eip155:1", FROM[:-1], TO, "1", "r"),
            ("eip155:1", FROM, TO, "-1", "r"),
            ("eip155:1", FROM, TO, "1.5", "r"),
            ("eip155:1", FROM, TO, str(2**256), "r"),
            ("eip155:1", "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92267", TO, "1", "r"),
            ("solana:localnet", SOL_A + "1", SOL_B, "1", "r"),
            ("solana:localnet", SOL_A + " \n", SOL_B, "1", "r"),
            ("btc:1", FROM, TO, "1", "r"),
            ("eip155:1", FROM, TO, "1", ""),
        ]:
            with self.subTest(bad=bad):
                with self.assertRaises(ValueError):
                    sc.derive_op_id(*bad)


class Live(unittest.TestCase):
    def setUp(self):
        self.client = sc.Client(GATEWAY, timeout=10)

    def tearDown(self):
        self.client.close()

    def test_submit_replay_and_watch_to_confirmed(self):
        op_id = sc.derive_op_id("eip155:31337", FROM, TO, "1234", f"{RUN}-pay")
        intent = sc.evm_transfer(31337, FROM, TO, "1234")
        first = self.client.submit(op_id, intent)
        self.assertFalse(first.replayed)
        again = self.client.submit(op_id, intent)
        self.assertTrue(again.replayed)
        states = [op.state for op in self.client.watch(op_id, timeout=120)]
        self.assertEqual(states[-1], pb.OPERATION_STATE_CONFIRMED, states)
        self.assertEqual(self.client.get(op_id).result.execution_status, pb.EXECUTION_STATUS_SUCCESS)
        listed = [op.op_id for op in self.client.list(chain="eip155:31337", page_size=1)]
        self.assertIn(op_id, listed)

    def test_an_op_id_of_another_intent_is_a_conflict_with_both_fingerprints(self):
        op_id = f"{RUN}-conflict"
        self.client.submit(op_id, sc.evm_transfer(31337, FROM, TO, "1"))
        with self.assertRaises(sc.OpIdConflict) as caught:
            self.client.submit(op_id, sc.evm_transfer(31337, FROM, TO, "2"))
        error = caught.exception
        self.assertEqual(error.code, grpc.StatusCode.ALREADY_EXISTS)
        self.assertEqual(error.reason, "OP_ID_CONFLICT")
        self.assertEqual(error.metadata["op_id"], op_id)
        self.assertNotEqual(
            error.metadata["stored_fingerprint"], error.metadata["submitted_fingerprint"]
        )
        self.assertFalse(error.retryable)

    def test_a_bad_field_is_named(self):
        with self.assertRaises(sc.InvalidArgument) as caught:
            self.client.submit(f"{RUN}-bad", sc.evm_transfer(31337, FROM, "0x12", "1"))
        fields = [field for field, _ in caught.exception.violations]
        self.assertEqual(fields, ["intent.evm_transfer.to"], caught.exception.violations)
        with self.assertRaises(sc.NotFound):
            self.client.get(f"{RUN}-bad")

    def test_a_co_signer_the_policy_does_not_name_is_policy_denied(self):
        system_program = "11111111111111111111111111111111"
        intent = pb.Intent(
            solana_instructions=pb.SolanaInstructions(
                cluster="localnet",
                fee_payer=SOL_A,
                instructions=[
                    pb.SolanaInstruction(
                        program_id=system_program,
                        accounts=[pb.SolanaAccountMeta(pubkey=SOL_B, is_signer=True, is_writable=True)],
                        data=b"\x02\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00",
                    )
                ],
            )
        )
        with self.assertRaises(sc.PolicyDenied) as caught:
            self.client.submit(f"{RUN}-cosigner", intent)
        self.assertEqual(caught.exception.code, grpc.StatusCode.PERMISSION_DENIED)
        self.assertEqual(caught.exception.reason, "POLICY_DENIED")

    def test_only_an_unavailable_service_is_retried(self):
        # Nothing listens there: every attempt is UNAVAILABLE, tried as often as the policy says.
        attempts = []
        policy = sc.RetryPolicy(attempts=3, initial_backoff=0.01, max_backoff=0.02)
        with sc.Client("127.0.0.1:1", timeout=2, retry=policy) as down:
            original = down._stub.GetOperation

            def counted(*args, **kwargs):
                attempts.append(1)
                return original(*args, **kwargs)

            down._stub.GetOperation = counted
            with self.assertRaises(sc.SigcastError) as caught:
                down.get("x")
        self.assertEqual(caught.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(len(attempts), 3)
        # A refusal is answered at once: one attempt.
        attempts.clear()
        original = self.client._stub.GetOperation

        def counted_live(*args, **kwargs):
            attempts.append(1)
            return original(*args, **kwargs)

        self.client._stub.GetOperation = counted_live
        with self.assertRaises(sc.NotFound):
            self.client.get(f"{RUN}-missing")
        self.assertEqual(len(attempts), 1)

    def test_every_call_has_a_deadline(self):
        # A peer that takes the connection and never answers: only the client's own deadline
        # can end the call. (Against the gateway a near-zero deadline races the server, which
        # may answer CANCELLED first.)
        with socket.socket() as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen()
            address = "127.0.0.1:%d" % silent.getsockname()[1]
            with sc.Client(address, timeout=0.5, retry=sc.RetryPolicy(attempts=1)) as hurried:
                started = time.monotonic()
                with self.assertRaises(sc.SigcastError) as caught:
                    hurried.get(f"{RUN}-anything")
        self.assertEqual(caught.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertLess(time.monotonic() - started, 5, "ended by the 0.5 s deadline")


if __name__ == "__main__":
    unittest.main(verbosity=2)
