// The client's behaviour beyond the table: statuses after response headers, a silent
// endpoint, the breaker, the retry budget, fail-over with one attempt_id, trace
// context, the bearer token, Verify's signals, CheckPassword, and no password in any
// output even with grpc-js tracing on.

import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { inspect, promisify } from 'node:util';
import * as otel from '@opentelemetry/api';

import { Answer, Client, ClientEvent } from '../src';
import { closedPort, startGrpcEndpoint, startRawServer } from './support/endpoint';

const DEADLINE = 1000;
const TP = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

function login(extra: object = {}) {
  return { realm: 'default', identifier: 'user@example.com', password: 'pw', storedHash: '', clientKey: '203.0.113.7', ...extra };
}

test("a status after response headers is the daemon's answer: never retried", async () => {
  for (const [code, retryable] of [
    [13, false],
    [14, true],
    [8, true],
    [1, false],
  ] as const) {
    const e = await startGrpcEndpoint({ fault: { status: code }, headersFirst: true });
    const c = new Client({ endpoints: [e.url], callTimeoutMs: DEADLINE });
    try {
      const a = await c.recordAttempt('default', 'u@example.com');
      assert.equal(a.decision, 'deny');
      assert.equal(a.retryable, retryable, `status ${code}`);
      assert.equal(e.seen.length, 1, `status ${code} was not retried`);
      assert.deepEqual(c.stats().healthy, [true]);
    } finally {
      c.close();
      await e.close();
    }
  }
});

test("the endpoint's own deadline timer (gRPC's DEADLINE_EXCEEDED, 'Deadline exceeded') is a timeout: retryable, not the daemon's answer", async () => {
  // A gRPC server runs out the grpc-timeout the call sent on its own timer, which can
  // fire before the client's; its status comes with headers like an answer. Here it
  // comes at once, as if that timer had won the race.
  const e = await startGrpcEndpoint({ fault: { status: 4, details: 'Deadline exceeded' }, headersFirst: true });
  const c = new Client({ endpoints: [e.url], callTimeoutMs: DEADLINE });
  try {
    const a = await c.recordAttempt('default', 'u@example.com');
    assert.equal(a.decision, 'deny');
    assert.equal(a.retryable, true);
    assert.equal(e.seen.length, 1, 'a timeout is not retried');
    assert.equal(c.stats().transportFailures, 1);
  } finally {
    c.close();
    await e.close();
  }
});

test('an endpoint that accepts TCP and never speaks: deny, retryable, within the deadline', async () => {
  const e = await startRawServer(undefined);
  const c = new Client({ endpoints: [e.url], callTimeoutMs: DEADLINE, connectTimeoutMs: 200 });
  try {
    const t = performance.now();
    const a = await c.verify(login());
    assert.equal(a.decision, 'deny');
    assert.equal(a.retryable, true);
    assert.ok(performance.now() - t < DEADLINE + 400);
    assert.ok(c.stats().transportFailures >= 1);
  } finally {
    c.close();
    await e.close();
  }
});

test('the breaker opens after ejectAfter transport failures, denies without a connection, and closes after a probe', async () => {
  const port = await closedPort();
  const c = new Client({ endpoints: [`http://127.0.0.1:${port}`], callTimeoutMs: DEADLINE, ejectAfter: 3, ejectForMs: 300 });
  let e;
  try {
    const first = await c.recordAttempt('default', 'u@example.com');
    assert.equal(first.decision, 'deny');
    assert.equal(first.retryable, true);
    assert.equal(c.stats().retries, 2);
    assert.equal(c.stats().breakerOpen, true);

    e = await startGrpcEndpoint({ answer: { decision: 1 } }, port);
    const denied = await c.recordAttempt('default', 'u@example.com');
    assert.equal(denied.decision, 'deny');
    assert.equal(denied.retryable, true);
    assert.equal(c.stats().breakerDenials, 1);
    assert.equal(e.seen.length, 0, 'the open breaker made no network call');
    assert.equal(e.connections(), 0);

    await new Promise((r) => setTimeout(r, 350));
    const probe = await c.recordAttempt('default', 'u@example.com');
    assert.equal(probe.decision, 'allow', 'the probe reached the endpoint that came back');
    assert.equal(c.stats().breakerOpen, false);
    assert.deepEqual(c.stats().healthy, [true]);
  } finally {
    c.close();
    await e?.close();
  }
});

test('retries stay within the budget', async () => {
  const e = await startGrpcEndpoint({ fault: { reset: true } });
  const c = new Client({ endpoints: [e.url], callTimeoutMs: DEADLINE, retryBudgetReserve: 1, retryBudgetRatio: 0, ejectAfter: 10 });
  try {
    await c.recordAttempt('default', 'u@example.com');
    assert.equal(e.seen.length, 2, 'one retry from the reserve');
    const a = await c.recordAttempt('default', 'u@example.com');
    assert.equal(a.decision, 'deny');
    assert.equal(a.retryable, true);
    assert.equal(e.seen.length, 3, 'the budget is spent: no retry');
    assert.equal(c.stats().retries, 1);
  } finally {
    c.close();
    await e.close();
  }
});

test('a transport failure fails over to the next endpoint with the same attempt_id', async () => {
  const up = await startGrpcEndpoint({ answer: { verdict: 1 } });
  const down = `http://127.0.0.1:${await closedPort()}`;
  const c = new Client({ endpoints: [down, up.url], callTimeoutMs: DEADLINE });
  try {
    // A client key whose first-ranked endpoint is the one that is down.
    let key = '';
    for (let i = 0; i < 100 && key === ''; i++) {
      if (c.route(`198.51.100.${i}`) === down) key = `198.51.100.${i}`;
    }
    assert.notEqual(key, '');
    const a = await c.verify(login({ clientKey: key, attemptId: 'attempt-from-the-gateway' }));
    assert.equal(a.decision, 'allow');
    assert.equal(c.stats().retries, 1);
    assert.deepEqual(
      up.seen.map((s) => s.attemptId),
      ['attempt-from-the-gateway'],
    );
    // Generated ids differ per logical call.
    await c.verify(login({ clientKey: key }));
    await c.verify(login({ clientKey: key }));
    const generated = up.seen.slice(1).map((s) => s.attemptId);
    assert.equal(new Set(generated).size, 2);
  } finally {
    c.close();
    await up.close();
  }
});

test("trace context: the caller's traceparent on every try; a malformed one is not sent", async () => {
  const e = await startGrpcEndpoint({ fault: { reset: true } });
  const c = new Client({ endpoints: [e.url], callTimeoutMs: DEADLINE, ejectAfter: 10 });
  try {
    await c.verify(login({ traceparent: TP, tracestate: 'vendor=1' }));
    assert.equal(e.seen.length, 3);
    for (const s of e.seen) {
      assert.equal(s.traceparent, TP);
      assert.equal(s.tracestate, 'vendor=1');
    }
    await c.recordAttempt('default', 'u@example.com', { traceparent: 'not-a-traceparent' });
    assert.equal(e.seen[3].traceparent, undefined);
  } finally {
    c.close();
    await e.close();
  }
});

test("trace context: from @opentelemetry/api's global propagator when the caller gives none", async () => {
  const e = await startGrpcEndpoint({ answer: { decision: 1 } });
  const c = new Client({ endpoints: [e.url], callTimeoutMs: DEADLINE });
  try {
    await c.admit('default', 'u@example.com');
    assert.equal(e.seen[0].traceparent, undefined, 'no propagator installed: nothing written');
    // A propagator registered through the API (an SDK's W3C propagator in a real gateway).
    assert.ok(
      otel.propagation.setGlobalPropagator({
        inject(_context, carrier, setter) {
          setter.set(carrier, 'traceparent', TP);
          setter.set(carrier, 'tracestate', 'otel=1');
        },
        extract: (context) => context,
        fields: () => ['traceparent', 'tracestate'],
      }),
    );
    await c.admit('default', 'u@example.com');
    assert.equal(e.seen[1].traceparent, TP);
    assert.equal(e.seen[1].tracestate, 'otel=1');
    // The caller's own traceparent wins.
    const other = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    await c.admit('default', 'u@example.com', { traceparent: other });
    assert.equal(e.seen[2].traceparent, other);
  } finally {
    otel.propagation.disable();
    c.close();
    await e.close();
  }
});

test('the bearer token goes on every call', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'portcullis-ts-token-'));
  const file = path.join(dir, 'token');
  fs.writeFileSync(file, 's3cret-token\n');
  const e = await startGrpcEndpoint({ answer: { decision: 1 } });
  const c = new Client({ endpoints: [e.url], callTimeoutMs: DEADLINE, tokenFile: file });
  try {
    await c.admit('default', 'u@example.com');
    assert.equal(e.seen[0].authorization, 'Bearer s3cret-token');
  } finally {
    c.close();
    await e.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("Verify's signals ride on the allow and on the deny", async () => {
  const all = {
    needs_rehash: true,
    device_token: 'dt-1',
    spray_suspected: true,
    step_up: true,
    network_throttled: true,
    password_breached: true,
    lockout_started: true,
    ceiling_reached: true,
  };
  const accept = await startGrpcEndpoint({ answer: { verdict: 1, ...all } });
  const reject = await startGrpcEndpoint({ answer: { verdict: 2, ...all } });
  const unknown = await startGrpcEndpoint({ answer: { verdict: 5, ...all } });
  const record = await startGrpcEndpoint({
    answer: { decision: 2, step_up: true, network_throttled: true, lockout_started: true, ceiling_reached: true },
  });
  const clients: Client[] = [];
  const client = (url: string) => {
    const c = new Client({ endpoints: [url], callTimeoutMs: DEADLINE });
    clients.push(c);
    return c;
  };
  try {
    const a = await client(accept.url).verify(login());
    assert.equal(a.decision, 'allow');
    assert.deepEqual(
      [a.needsRehash, a.deviceToken, a.spraySuspected, a.stepUp, a.networkThrottled, a.passwordBreached],
      [true, 'dt-1', true, true, true, true],
    );
    assert.deepEqual([a.lockoutStarted, a.ceilingReached], [false, false], 'a match shut no door');
    for (const url of [reject.url, unknown.url]) {
      const d = await client(url).verify(login());
      assert.equal(d.decision, 'deny');
      assert.equal(d.kind, 'deny');
      assert.equal(d.retryable, false);
      assert.deepEqual(
        [d.needsRehash, d.deviceToken, d.spraySuspected, d.stepUp, d.networkThrottled, d.passwordBreached],
        [false, undefined, true, true, true, false],
        'a deny keeps spray/step-up/network signals and never an allow-only one',
      );
      assert.deepEqual([d.lockoutStarted, d.ceilingReached], [true, true], 'the door this attempt shut');
    }
    const r = await client(record.url).recordAttempt('default', 'u@example.com');
    assert.deepEqual([r.decision, r.stepUp, r.networkThrottled, r.lockoutStarted, r.ceilingReached], ['deny', true, true, true, true]);
  } finally {
    for (const c of clients) c.close();
    for (const e of [accept, reject, unknown, record]) await e.close();
  }
});

test('a challenge and a required change are denies of their own kind, with nothing of an accept', async () => {
  const all = {
    needs_rehash: true,
    device_token: 'dt-must-not-pass',
    spray_suspected: true,
    step_up: true,
    network_throttled: true,
    password_breached: true,
  };
  const challenge = await startGrpcEndpoint({ answer: { verdict: 3, challenge_reason: 1, challenge_token: 'ct-1', ...all } });
  const change = await startGrpcEndpoint({ answer: { verdict: 4, ...all } });
  const clients: Client[] = [];
  const client = (url: string) => {
    const c = new Client({ endpoints: [url], callTimeoutMs: DEADLINE });
    clients.push(c);
    return c;
  };
  try {
    const ch = await client(challenge.url).verify(login());
    assert.deepEqual([ch.decision, ch.kind, ch.isAllowed(), ch.retryable], ['deny', 'challenge', false, false]);
    assert.deepEqual([ch.challengeToken, ch.challengeReason], ['ct-1', 'new_device']);
    assert.deepEqual(
      [ch.needsRehash, ch.deviceToken, ch.spraySuspected, ch.stepUp, ch.networkThrottled, ch.passwordBreached],
      [false, undefined, true, true, true, true],
      'a challenge carries the advice and password_breached (ask for the change after it), never a device token',
    );
    assert.ok(!JSON.stringify(ch).includes('ct-1') && !inspect(ch).includes('ct-1'), 'the challenge token is never printed');
    const cr = await client(change.url).verify(login());
    assert.deepEqual([cr.decision, cr.kind, cr.isAllowed(), cr.retryable], ['deny', 'change_required', false, false]);
    assert.deepEqual(
      [cr.needsRehash, cr.deviceToken, cr.challengeToken, cr.challengeReason, cr.passwordBreached],
      [false, undefined, undefined, undefined, true],
    );
  } finally {
    for (const c of clients) c.close();
    for (const e of [challenge, change]) await e.close();
  }
});

test('the flow calls send their flow, client key and one attempt_id; clearFlow and confirmDevice send theirs', async () => {
  const e = await startGrpcEndpoint({ answer: {} });
  const c = new Client({ endpoints: [e.url], callTimeoutMs: DEADLINE });
  try {
    // An empty answer is DECISION_UNSPECIFIED for the flow calls: a deny.
    assert.equal((await c.secondFactorAttempt('default', 'u@example.com', { attemptId: 'otp-1' })).decision, 'deny');
    await c.recoveryCodeAttempt('default', 'u@example.com');
    await c.passwordResetRequest('default', 'u@example.com', '198.51.100.4');
    await c.verificationResendRequest('default', 'u@example.com', '198.51.100.5', { attemptId: 'mail-1' });
    await c.recordFlowAttempt('default', 'u@example.com', 'password_reset', { clientKey: '198.51.100.6' });
    assert.equal((await c.clearFlow('default', 'u@example.com', 'recovery_code')).decision, 'allow');
    // An OK ConfirmDevice without a device token confirms nothing.
    const confirmed = await c.confirmDevice({ realm: 'default', identifier: 'u@example.com', challengeToken: 'ct', storedHash: 'h' });
    assert.deepEqual([confirmed.decision, confirmed.deviceToken], ['deny', undefined]);
    assert.deepEqual(
      e.seen.map((s) => [s.method, s.flow]),
      [
        ['RecordFlowAttempt', 1],
        ['RecordFlowAttempt', 2],
        ['RecordFlowAttempt', 3],
        ['RecordFlowAttempt', 4],
        ['RecordFlowAttempt', 3],
        ['ClearFlow', 2],
        ['ConfirmDevice', undefined],
      ],
    );
    assert.equal(e.seen[0].attemptId, 'otp-1');
    assert.equal(e.seen[3].attemptId, 'mail-1');
    const generated = [e.seen[1], e.seen[2], e.seen[4]].map((s) => s.attemptId);
    assert.ok(generated.every((id) => typeof id === 'string' && /^[0-9a-f-]{36}$/.test(id)));
    assert.equal(new Set(generated).size, 3, 'a fresh attempt_id per logical call');
  } finally {
    c.close();
    await e.close();
  }
});

test('a flow or clear the client does not know is a deny without a call', async () => {
  const e = await startGrpcEndpoint({ answer: { decision: 1 } });
  const c = new Client({ endpoints: [e.url], callTimeoutMs: DEADLINE });
  try {
    for (const flow of ['login', '', 'toString', '__proto__', 'constructor', 1]) {
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      const a = await c.recordFlowAttempt('default', 'u@example.com', flow as any);
      assert.deepEqual([a.decision, a.retryable], ['deny', false], `flow ${String(flow)}`);
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      assert.equal((await c.clearFlow('default', 'u@example.com', flow as any)).decision, 'deny');
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      assert.equal((await c.clearAttempts('default', 'u@example.com', flow as any)).decision, 'deny');
    }
    assert.equal(e.seen.length, 0);
  } finally {
    c.close();
    await e.close();
  }
});

test('a string that is not well-formed UTF-16 is a deny without a call, naming its field; U+FFFD and surrogate pairs are sent', async () => {
  const e = await startGrpcEndpoint({ answer: { verdict: 1 } });
  const events: ClientEvent[] = [];
  const c = new Client({ endpoints: [e.url], callTimeoutMs: DEADLINE, onEvent: (event) => events.push(event) });
  try {
    const lone = 'x\uD800';
    const cases: Array<[string, () => Promise<Answer>]> = [
      ['password', () => c.verify(login({ password: lone }))],
      ['account.identifier', () => c.verify(login({ identifier: `\uDC00${lone}` }))],
      ['account.realm', () => c.verify(login({ realm: lone }))],
      ['stored_hash', () => c.verify(login({ storedHash: lone }))],
      ['client_key', () => c.verify(login({ clientKey: lone }))],
      ['attempt_id', () => c.verify(login({ attemptId: lone }))],
      ['device_token', () => c.verify(login({ deviceToken: lone }))],
      ['account.identifier', () => c.recordAttempt('default', lone)],
      ['client_key', () => c.recordAttempt('default', 'u@example.com', { clientKey: lone })],
      ['account.identifier', () => c.admit('default', lone)],
      ['account.identifier', () => c.passwordResetRequest('default', lone, '203.0.113.7')],
      ['challenge_token', () => c.confirmDevice({ realm: 'default', identifier: 'u@example.com', challengeToken: lone, storedHash: 'h' })],
    ];
    for (const [field, call] of cases) {
      const a = await call();
      assert.deepEqual([a.decision, a.retryable, a.failure], ['deny', false, { kind: 'bad_input', field }], field);
      assert.ok(!JSON.stringify(a).includes(lone) && !inspect(a).includes('\uD800'), 'the value is not in the answer');
    }
    assert.deepEqual(await c.checkPassword('default', 'u@example.com', lone), { kind: 'unchecked', retryable: false });
    assert.equal(e.seen.length, 0, 'nothing was sent');
    assert.equal(events.length, cases.length + 1);
    assert.deepEqual(events[0], { type: 'bad_input', method: 'Verify', field: 'password' });
    assert.deepEqual(events.at(-1), { type: 'bad_input', method: 'CheckPassword', field: 'password' });
    // The control: U+FFFD itself, a surrogate pair and bytes are sent.
    for (const password of ['x\uFFFD', 'x\uD83D\uDE00', Buffer.from([0x78, 0xed, 0xa0, 0x80])]) {
      const a = await c.verify(login({ password, identifier: 'x\uD83D\uDE00@example.com' }));
      assert.deepEqual([a.decision, a.failure], ['allow', undefined]);
    }
    assert.equal(e.seen.length, 3);
  } finally {
    c.close();
    await e.close();
  }
});

test('CheckPassword: only OK accepts; unknown reasons and every failure are unchecked', async () => {
  const cases: Array<[object, object]> = [
    [{ answer: { reason: 1 } }, { kind: 'acceptable' }],
    [{ answer: { reason: 2 } }, { kind: 'breached' }],
    [{ answer: { reason: 3 } }, { kind: 'context_word' }],
    [{ answer: { reason: 0 } }, { kind: 'unchecked', retryable: false }],
    [{ answer: { reason: 9 } }, { kind: 'unchecked', retryable: false }],
    [{ fault: { status: 9 } }, { kind: 'unchecked', retryable: false }],
    [{ fault: { status: 14 } }, { kind: 'unchecked', retryable: true }],
    [{ fault: { reset: true } }, { kind: 'unchecked', retryable: true }],
  ];
  for (const [behaviour, expected] of cases) {
    const e = await startGrpcEndpoint(behaviour);
    const c = new Client({ endpoints: [e.url], callTimeoutMs: DEADLINE });
    try {
      assert.deepEqual(await c.checkPassword('default', 'u@example.com', 'new password'), expected, JSON.stringify(behaviour));
    } finally {
      c.close();
      await e.close();
    }
  }
});

test('a closed client denies, retryable, and many concurrent calls each get their own answer', async () => {
  const e = await startGrpcEndpoint({ answer: { decision: 1 } });
  const c = new Client({ endpoints: [e.url], callTimeoutMs: DEADLINE });
  const answers = await Promise.all(Array.from({ length: 50 }, (_, i) => c.recordAttempt('default', `u${i}@example.com`)));
  assert.ok(answers.every((a) => a.decision === 'allow'));
  assert.equal(new Set(e.seen.map((s) => s.attemptId)).size, 50);
  c.close();
  const after = await c.recordAttempt('default', 'u@example.com');
  assert.equal(after.decision, 'deny');
  assert.equal(after.retryable, true);
  await e.close();
});

test('no password in any output, even with grpc-js tracing at its loudest', async () => {
  const password = 'Pa55-word-that-must-never-print';
  const child = path.join(__dirname, 'support', 'noisy-child.js');
  const { stdout, stderr } = await promisify(execFile)(process.execPath, [child, password], {
    env: { ...process.env, GRPC_TRACE: 'all', GRPC_VERBOSITY: 'DEBUG' },
    timeout: 30000,
    maxBuffer: 64 * 1024 * 1024,
  });
  const out = stdout + stderr;
  assert.ok(out.includes('decision'), 'the child printed its answers');
  assert.ok(stderr.length > 1000, 'grpc-js tracing was on');
  for (const form of [password, Buffer.from(password).toString('base64'), Buffer.from(password).toString('hex')]) {
    assert.ok(!out.includes(form), `the password appeared in the output (${form.slice(0, 6)}…)`);
  }
});
