// The flows around the login and the step-up for unknown devices, against the real
// daemon binary (embedded store, temp directory, free port) with a configuration of
// two realms: `default` (the flows' defaults: 5 one-time codes in 15 minutes, a reset
// mail a minute) and `stepup` (`unknown_device = "step_up"`).

import { after, before, test } from 'node:test';
import * as assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';

import { Client, CodeFlow } from '../src';
import { Daemon, startDaemon } from './support/daemon';

// The store's operation timeout is raised from 500 ms: on a loaded CI machine one slow
// write of the embedded store would otherwise answer UNAVAILABLE (a retryable deny).
const CONFIG = `shutdown_delay = "0s"
[store]
operation_timeout = "5s"
[realms.default]
[realms.stepup]
unknown_device = "step_up"
`;

/** `correct horse battery staple` (docs/gateways.md's walkthrough). */
const PASSWORD = 'correct horse battery staple';
const STORED_HASH = '$argon2id$v=19$m=19456,t=2,p=1$9UYIR9ZIReF5HPUwKOtfHg$mXlw4iTpYMohjtsi7qzPygANdC7/hd1SbLoNsHPwwfQ';
/** One-time codes the default realm allows in a window (the sixth is denied). */
const CODES = 5;

let daemon: Daemon;

before(async () => {
  daemon = await startDaemon(CONFIG);
});

after(async () => {
  await daemon?.stop();
});

function identifier(what: string): string {
  return `${what}-${randomUUID().slice(0, 8)}@example.com`;
}

function client(): Client {
  return new Client({ endpoints: [daemon.url], callTimeoutMs: 5000 });
}

test("second_factor: two client instances share one account's five codes; the sixth is denied until a verified code clears it", async () => {
  const a = client();
  const b = client();
  try {
    const id = identifier('otp');
    const decisions: string[] = [];
    // Alternating gateways: the count is the daemon's, not each client's.
    for (let i = 0; i < CODES; i++) {
      const answer = await (i % 2 === 0 ? a : b).secondFactorAttempt('default', id);
      decisions.push(`${answer.decision}${answer.retryable ? ' (retryable)' : ''}`);
    }
    assert.deepEqual(decisions, Array(CODES).fill('allow'));
    const sixth = await a.secondFactorAttempt('default', id);
    assert.deepEqual([sixth.decision, sixth.kind, sixth.retryable], ['deny', 'deny', false], 'the sixth code is refused, right or wrong');
    assert.equal((await b.secondFactorAttempt('default', id)).decision, 'deny', 'and from the other instance too');
    // The flow's record is its own: the login throttle and the recovery codes are untouched.
    assert.equal((await b.admit('default', id)).decision, 'allow');
    assert.equal((await b.recoveryCodeAttempt('default', id)).decision, 'allow');
    // A verified code clears the flow.
    assert.equal((await b.clearFlow('default', id, 'second_factor')).decision, 'allow');
    assert.equal((await a.secondFactorAttempt('default', id)).decision, 'allow');
    // The same attempt_id (a retry's) is counted once: three calls with one id and four
    // fresh ones spend the five codes; the next is denied.
    const other = identifier('otp-dedup');
    for (let i = 0; i < 3; i++) {
      assert.equal((await a.secondFactorAttempt('default', other, { attemptId: 'the-same-code' })).decision, 'allow');
    }
    for (let i = 0; i < CODES - 1; i++) {
      assert.equal((await b.secondFactorAttempt('default', other)).decision, 'allow');
    }
    assert.equal((await a.secondFactorAttempt('default', other)).decision, 'deny');
  } finally {
    a.close();
    b.close();
  }
});

test('password_reset: a second request inside the interval is a deny; the flows keep records of their own', async () => {
  const c = client();
  try {
    const id = identifier('reset');
    const first = await c.passwordResetRequest('default', id, '198.51.100.20');
    assert.equal(first.decision, 'allow', JSON.stringify(first));
    const second = await c.passwordResetRequest('default', id, '198.51.100.21');
    assert.deepEqual([second.decision, second.retryable], ['deny', false], 'one reset mail a minute per account, whatever the address');
    // The verification mail is a record of its own.
    assert.equal((await c.verificationResendRequest('default', id, '198.51.100.20')).decision, 'allow');
    // A mail flow needs a client key: INVALID_ARGUMENT, a deny.
    const noKey = await c.recordFlowAttempt('default', identifier('reset-no-key'), 'password_reset');
    assert.deepEqual([noKey.decision, noKey.retryable], ['deny', false]);
    // No gateway call clears a mail flow's caps (INVALID_ARGUMENT, a deny).
    const cleared = await c.clearFlow('default', id, 'password_reset' as unknown as CodeFlow);
    assert.equal(cleared.decision, 'deny');
    assert.equal((await c.passwordResetRequest('default', id, '198.51.100.20')).decision, 'deny');
  } finally {
    c.close();
  }
});

test('step_up realm: the right password from an unknown device is a challenge; confirmDevice gives the device token the next login is allowed with', async () => {
  const c = client();
  try {
    const id = identifier('stepup');
    const login = { realm: 'stepup', identifier: id, password: PASSWORD, storedHash: STORED_HASH, clientKey: '203.0.113.30' };

    const challenged = await c.verify(login);
    assert.equal(challenged.kind, 'challenge', JSON.stringify(challenged));
    assert.equal(challenged.decision, 'deny');
    assert.equal(challenged.isAllowed(), false);
    assert.equal(challenged.challengeReason, 'new_device');
    assert.equal(challenged.deviceToken, undefined);
    assert.ok(challenged.challengeToken !== undefined && challenged.challengeToken.length > 0);

    // A wrong password is a plain deny, no challenge.
    const wrong = await c.verify({ ...login, password: 'not the password' });
    assert.deepEqual([wrong.kind, wrong.challengeToken], ['deny', undefined]);

    // A token that is not this challenge's: FAILED_PRECONDITION, a deny without a token.
    const forged = await c.confirmDevice({ realm: 'stepup', identifier: id, challengeToken: 'A'.repeat(60), storedHash: STORED_HASH });
    assert.deepEqual([forged.decision, forged.retryable, forged.deviceToken], ['deny', false, undefined]);
    // Another account's: the same.
    const elsewhere = await c.confirmDevice({
      realm: 'stepup',
      identifier: identifier('someone-else'),
      challengeToken: challenged.challengeToken,
      storedHash: STORED_HASH,
    });
    assert.deepEqual([elsewhere.decision, elsewhere.deviceToken], ['deny', undefined]);

    // The gateway's second factor passed: the challenge token becomes a device token.
    const confirmed = await c.confirmDevice({
      realm: 'stepup',
      identifier: id,
      challengeToken: challenged.challengeToken,
      storedHash: STORED_HASH,
    });
    assert.equal(confirmed.decision, 'allow', JSON.stringify(confirmed));
    assert.ok(confirmed.deviceToken !== undefined && confirmed.deviceToken.length > 0);

    const known = await c.verify({ ...login, deviceToken: confirmed.deviceToken });
    assert.deepEqual([known.decision, known.kind, known.isAllowed()], ['allow', 'allow', true]);
    assert.equal(known.challengeToken, undefined);
    assert.ok(known.deviceToken, 'an accept issues a fresh device token');

    // Without the device token, the same password is challenged again.
    assert.equal((await c.verify(login)).kind, 'challenge');
    // The default realm (unknown_device = "allow") accepts it outright.
    assert.equal((await c.verify({ ...login, realm: 'default' })).kind, 'allow');
  } finally {
    c.close();
  }
});
