// What a gateway passes to the client's calls, and the wire enum each name stands for
// (the generated enums: no number is written here).

import * as pb from './gen/portcullis/v1/governor_pb';
import { TraceContext } from './trace';

/** Why a password's record is cleared (docs/architecture.md: nothing else clears it). */
export type ClearReason = 'password_verified' | 'password_reset_completed';

/** Per-call options. */
export type CallOptions = TraceContext;

/**
 * A flow around the login (`portcullis.v1.Flow`; docs/flows.md), each with its own
 * record per account: attempts at a one-time code or a recovery code, requests to send
 * a password-reset or an address-verification mail.
 */
export type Flow = 'second_factor' | 'recovery_code' | 'password_reset' | 'verification_resend';

/** The flows whose record a verified code clears (`clearFlow`); a mail flow's caps are never cleared by a gateway. */
export type CodeFlow = 'second_factor' | 'recovery_code';

/** The inputs of one `confirmDevice`. */
export interface DeviceConfirmation extends TraceContext {
  /** Realm name, as in the `verify` that answered `'challenge'`. */
  realm: string;
  /** The identifier, as in that `verify`. */
  identifier: string;
  /** That answer's `challengeToken`. */
  challengeToken: string;
  /** The stored hash sent with that `verify` (the token vouches for that credential). */
  storedHash: string;
}

/** The inputs of one `verify`. */
export interface Login extends TraceContext {
  /** Realm name. */
  realm: string;
  /** What the user typed to name the account. */
  identifier: string;
  /** What the user typed as the password (a string is sent as UTF-8). */
  password: string | Uint8Array;
  /** The account's stored hash; `''` for an unknown or disabled account. */
  storedHash: string;
  /** The end client's address (see `clientKeyFromForwarded`). */
  clientKey: string;
  /** Idempotency id; generated (a UUID) when absent, and kept across retries. */
  attemptId?: string;
  /** The device token an earlier accept of this account returned to this device. */
  deviceToken?: string;
}

const CLEAR_REASONS: Record<ClearReason, pb.ClearReason> = {
  password_verified: pb.ClearReason.PASSWORD_VERIFIED,
  password_reset_completed: pb.ClearReason.PASSWORD_RESET_COMPLETED,
};

const FLOWS: Record<Flow, pb.Flow> = {
  second_factor: pb.Flow.SECOND_FACTOR,
  recovery_code: pb.Flow.RECOVERY_CODE,
  password_reset: pb.Flow.PASSWORD_RESET,
  verification_resend: pb.Flow.VERIFICATION_RESEND,
};

/** The wire value of a name from `table`, or `undefined` for anything else (no inherited keys). */
function wireValue<K extends string, V>(table: Record<K, V>, name: unknown): V | undefined {
  return typeof name === 'string' && Object.prototype.hasOwnProperty.call(table, name) ? table[name as K] : undefined;
}

/** `flow`'s wire value; `undefined` for anything that is no flow of this client's (a deny without a call). */
export function wireFlow(flow: unknown): pb.Flow | undefined {
  return wireValue(FLOWS, flow);
}

/** `reason`'s wire value; `undefined` for anything that is no reason of this client's (a deny without a call). */
export function wireClearReason(reason: unknown): pb.ClearReason | undefined {
  return wireValue(CLEAR_REASONS, reason);
}

/** The account of a request. */
export function account(realm: string, identifier: string): { realm: string; identifier: string } {
  return { realm, identifier };
}

/** Non-Verify calls are spread over endpoints by account, as the Rust client does. */
export function routeKey(realm: string, identifier: string): string {
  return `${Buffer.byteLength(realm, 'utf8')}\0${realm}\0${identifier}`;
}
