// The shared conformance table (clients/conformance.json): for each case a fresh
// endpoint behaves as the case says, a fresh client calls it once, and the decision,
// its kind (a challenge or a required change is a deny of its own), the tokens it
// carries, retryable, the retries, the flow sent and the attempt_id of every try are
// checked.

import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';

import { Answer, Client, Flow } from '../src';
import { Behaviour, Fault, startCaseEndpoint } from './support/endpoint';

interface Case {
  name: string;
  rpc: string;
  answer?: Record<string, unknown>;
  fault?: Fault;
  expect: 'allow' | 'deny';
  kind?: 'challenge' | 'change_required';
  flow?: Flow;
  retryable: boolean;
  retried_with_same_attempt_id?: boolean;
  note?: string;
}

const TABLE_PATH = path.resolve(__dirname, '..', '..', '..', 'conformance.json');
const table = JSON.parse(fs.readFileSync(TABLE_PATH, 'utf8')) as { call_deadline_ms: number; cases: Case[] };
const DEADLINE = table.call_deadline_ms;
/**
 * How late past the deadline an answer may come (timers, a loaded CI machine). The
 * table's late answers come 3000 ms after the request, so a deny within the deadline
 * and this slack still shows the client did not wait for them.
 */
const SLACK_MS = 1000;
const MAX_RETRIES = 2;
const PASSWORD = 'conformance-password-Tr0ub4dor&3';
const STORED_HASH = '$2b$04$abcdefghijklmnopqrstuu5Ay2Yp2fD9XqVwqkbDq0KZK3zT6Xh2K';
const FLOW_NUMBERS: Record<Flow, number> = { second_factor: 1, recovery_code: 2, password_reset: 3, verification_resend: 4 };
/** The calls that carry an attempt_id. */
const COUNTING = new Set(['RecordAttempt', 'Verify', 'RecordFlowAttempt']);

/** The flow's own method, as a gateway calls it. */
function flowCall(client: Client, flow: Flow): Promise<Answer> {
  switch (flow) {
    case 'second_factor':
      return client.secondFactorAttempt('default', 'user@example.com');
    case 'recovery_code':
      return client.recoveryCodeAttempt('default', 'user@example.com');
    case 'password_reset':
      return client.passwordResetRequest('default', 'user@example.com', '203.0.113.7');
    case 'verification_resend':
      return client.verificationResendRequest('default', 'user@example.com', '203.0.113.7');
  }
}

export async function callRpc(client: Client, rpc: string, flow: Flow = 'second_factor'): Promise<Answer> {
  switch (rpc) {
    case 'Admit':
      return client.admit('default', 'user@example.com');
    case 'RecordAttempt':
      return client.recordAttempt('default', 'user@example.com', { clientKey: '203.0.113.7' });
    case 'Verify':
      return client.verify({
        realm: 'default',
        identifier: 'user@example.com',
        password: PASSWORD,
        storedHash: STORED_HASH,
        clientKey: '203.0.113.7',
      });
    case 'ClearAttempts':
      return client.clearAttempts('default', 'user@example.com', 'password_verified');
    case 'RecordFlowAttempt':
      return flowCall(client, flow);
    case 'ClearFlow':
      return client.clearFlow('default', 'user@example.com', 'second_factor');
    case 'ConfirmDevice':
      return client.confirmDevice({
        realm: 'default',
        identifier: 'user@example.com',
        challengeToken: 'ct-from-the-challenge',
        storedHash: STORED_HASH,
      });
    default:
      throw new Error(`the table names an rpc this test does not know: ${rpc}`);
  }
}

test('the table is there and has cases of every kind', () => {
  assert.ok(table.cases.length > 0);
  const kinds = new Set(table.cases.map((c) => (c.answer ? 'answer' : Object.keys(c.fault ?? {})[0])));
  for (const k of ['answer', 'status', 'reset', 'delay_ms', 'unreachable', 'garbage']) {
    assert.ok(kinds.has(k), `no case of kind ${k}`);
  }
  const rpcs = new Set(table.cases.map((c) => c.rpc));
  for (const rpc of ['Admit', 'RecordAttempt', 'Verify', 'ClearAttempts', 'RecordFlowAttempt', 'ClearFlow', 'ConfirmDevice']) {
    assert.ok(rpcs.has(rpc), `no case of ${rpc}`);
  }
  for (const c of table.cases.filter((c) => c.fault?.delay_ms !== undefined)) {
    assert.ok((c.fault?.delay_ms ?? 0) > DEADLINE + SLACK_MS, `${c.name}: its answer comes after the deadline and the slack`);
  }
  const flows = new Set(table.cases.filter((c) => c.rpc === 'RecordFlowAttempt').map((c) => c.flow ?? 'second_factor'));
  assert.deepEqual([...flows].sort(), Object.keys(FLOW_NUMBERS).sort(), 'a case of every flow');
  const verdictKinds = new Set(table.cases.map((c) => c.kind).filter((k) => k !== undefined));
  assert.deepEqual([...verdictKinds].sort(), ['challenge', 'change_required']);
  // A kind of its own is a deny, always.
  assert.ok(table.cases.every((c) => c.kind === undefined || (c.expect === 'deny' && c.rpc === 'Verify')));
});

for (const c of table.cases) {
  test(`conformance: ${c.name}`, async () => {
    const behaviour: Behaviour = { answer: c.answer, fault: c.fault };
    const endpoint = await startCaseEndpoint(behaviour);
    const client = new Client({ endpoints: [endpoint.url], callTimeoutMs: DEADLINE });
    try {
      const started = performance.now();
      const answer = await callRpc(client, c.rpc, c.flow);
      const elapsed = performance.now() - started;

      assert.equal(answer.decision, c.expect, `${c.name}: decision`);
      assert.equal(answer.kind, c.kind ?? c.expect, `${c.name}: kind`);
      assert.equal(answer.isAllowed(), c.expect === 'allow', `${c.name}: isAllowed`);
      assert.equal(answer.retryable, c.retryable, `${c.name}: retryable`);
      // The tokens: a challenge carries its challenge token; only an allow carries a
      // device token (a confirmed device's is the one the endpoint sent).
      const sent = c.answer ?? {};
      assert.equal(answer.challengeToken, answer.kind === 'challenge' ? sent['challenge_token'] : undefined, `${c.name}: challenge token`);
      if (answer.kind !== 'allow') {
        assert.equal(answer.deviceToken, undefined, `${c.name}: a deny carries no device token`);
        assert.equal(answer.needsRehash, false, `${c.name}: a deny carries no needs_rehash`);
      } else if (c.rpc === 'ConfirmDevice') {
        assert.equal(answer.deviceToken, sent['device_token'], `${c.name}: the confirmed device token`);
      }
      assert.ok(elapsed < DEADLINE + SLACK_MS, `${c.name}: answered after ${elapsed.toFixed(0)} ms`);

      const stats = client.stats();
      if (c.retried_with_same_attempt_id === true) {
        assert.equal(stats.retries, MAX_RETRIES, `${c.name}: a transport failure is retried up to maxRetries`);
        // The endpoint saw attempt ids only where the request reached a gRPC server.
        if (endpoint.seen.length > 0) {
          assert.equal(endpoint.seen.length, 1 + MAX_RETRIES, `${c.name}: every try reached the endpoint`);
          if (COUNTING.has(c.rpc)) {
            const ids = new Set(endpoint.seen.map((s) => s.attemptId));
            assert.equal(ids.size, 1, `${c.name}: one attempt_id on every try`);
            assert.match([...ids][0] ?? '', /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
          }
        }
        if (c.fault?.garbage) {
          assert.equal(endpoint.connections(), 1 + MAX_RETRIES, `${c.name}: every retry connected anew`);
        }
      } else {
        assert.equal(stats.retries, 0, `${c.name}: not retried`);
        assert.equal(endpoint.seen.length, 1, `${c.name}: the endpoint saw exactly one request`);
        if (COUNTING.has(c.rpc)) {
          assert.ok(endpoint.seen[0].attemptId, `${c.name}: an attempt_id was generated`);
        }
      }
      if (c.rpc === 'RecordFlowAttempt' && endpoint.seen.length > 0) {
        const want = FLOW_NUMBERS[c.flow ?? 'second_factor'];
        assert.ok(
          endpoint.seen.every((s) => s.flow === want),
          `${c.name}: the flow sent`,
        );
      }
      if (c.fault?.status !== undefined || c.answer !== undefined) {
        assert.deepEqual(stats.healthy, [true], `${c.name}: an answer is health`);
        assert.equal(stats.transportFailures, 0);
      } else {
        assert.ok(stats.transportFailures >= 1, `${c.name}: a transport failure or timeout counts against health`);
      }
    } finally {
      client.close();
      await endpoint.close();
    }
  });
}
