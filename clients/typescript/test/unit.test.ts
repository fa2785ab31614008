// The parts that need no network: the client key rule, the retry budget, routing and
// the breaker, trace context checks, the answer's redaction, configuration errors.

import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { inspect } from 'node:util';

import { Answer, Client, ClientConfigError, clientKeyFromForwarded, validTraceparent } from '../src';
import { Pool, RetryBudget } from '../src/pool';
import { DEFAULTS, resolveConfig } from '../src/config';
import { answeredStatus } from '../src/caller';
import { governorMethod } from '../src/wire';
import { PortcullisExpressError, loginOutcome, outcomeOf, portcullisExpress, resetOutcome } from '../src/express';

const PEER = '10.0.0.2';

test('client key: the entry the trusted proxies appended is the client', () => {
  const xff = '6.6.6.6, 203.0.113.7, 10.0.0.1';
  assert.equal(clientKeyFromForwarded(PEER, xff, 2), '203.0.113.7');
  assert.equal(clientKeyFromForwarded(PEER, xff, 1), '10.0.0.1');
  // Headers split in two are one list.
  assert.equal(clientKeyFromForwarded(PEER, ['6.6.6.6', '203.0.113.7, 10.0.0.1'], 2), '203.0.113.7');
  // One load balancer in front (the Rust doc example).
  assert.equal(clientKeyFromForwarded('10.0.0.2', '198.51.100.9, 203.0.113.7', 1), '203.0.113.7');
});

test('client key: a forged leftmost entry is never the key', () => {
  assert.equal(clientKeyFromForwarded(PEER, '1.2.3.4, 203.0.113.7', 1), '203.0.113.7');
  assert.equal(clientKeyFromForwarded(PEER, '9.9.9.9, 8.8.8.8, 1.2.3.4, 203.0.113.7', 1), '203.0.113.7');
});

test('client key: no trusted hop ignores the header', () => {
  assert.equal(clientKeyFromForwarded(PEER, '203.0.113.7', 0), '10.0.0.2');
  assert.equal(clientKeyFromForwarded('::ffff:10.0.0.9', undefined, 0), '10.0.0.9');
});

test('client key: short or missing headers fall back to what a trusted hop saw', () => {
  assert.equal(clientKeyFromForwarded(PEER, [], 1), '10.0.0.2');
  assert.equal(clientKeyFromForwarded(PEER, undefined, 1), '10.0.0.2');
  assert.equal(clientKeyFromForwarded(PEER, [' , '], 2), '10.0.0.2');
  assert.equal(clientKeyFromForwarded(PEER, ['203.0.113.7'], 3), '203.0.113.7');
});

test('client key: addresses are canonical and other text is kept', () => {
  assert.equal(clientKeyFromForwarded(PEER, ['::ffff:203.0.113.7'], 1), '203.0.113.7');
  assert.equal(clientKeyFromForwarded(PEER, ['unknown'], 1), 'unknown');
  assert.equal(clientKeyFromForwarded(PEER, ['_hidden'], 1), '_hidden');
  assert.equal(clientKeyFromForwarded(PEER, ['2001:DB8:0:0:0:0:0:1'], 1), '2001:db8::1');
  assert.equal(clientKeyFromForwarded(PEER, ['2001:db8:0:1:0:0:1:1'], 1), '2001:db8:0:1::1:1');
  assert.equal(clientKeyFromForwarded(PEER, ['2001:0db8::0001:0:0:0'], 1), '2001:db8:0:0:1::', 'the longest run of zeros');
  assert.equal(clientKeyFromForwarded(PEER, ['::1'], 1), '::1');
  assert.equal(clientKeyFromForwarded(PEER, ['fe80::1%eth0'], 1), 'fe80::1%eth0');
  assert.equal(clientKeyFromForwarded(PEER, ['010.0.0.1'], 1), '010.0.0.1', 'not an address the daemon parses: kept');
  assert.throws(() => clientKeyFromForwarded(PEER, [], -1), RangeError);
});

test('retry budget: a ratio of calls with a reserve (the Rust unit test)', () => {
  const b = new RetryBudget(0.1, 2);
  assert.ok(b.withdraw() && b.withdraw());
  assert.ok(!b.withdraw(), 'reserve spent');
  for (let i = 0; i < 9; i++) b.deposit();
  assert.ok(!b.withdraw(), '0.9 of a token');
  b.deposit();
  assert.ok(b.withdraw());
  for (let i = 0; i < 1000; i++) b.deposit();
  assert.ok(b.withdraw() && b.withdraw() && !b.withdraw(), 'capped at the reserve');
});

function pool(n: number, ejectForMs: number, clock: { now: number }): Pool {
  const urls = Array.from({ length: n }, (_, i) => `http://127.0.0.1:${40000 + i}`);
  return new Pool(urls, { ejectAfter: 2, ejectForMs, ejectMaxMs: ejectForMs * 8, probeTimeoutMs: 5000 }, () => clock.now);
}

test("routing is stable and an ejection moves only that endpoint's keys", () => {
  const clock = { now: 0 };
  const p = pool(3, 60000, clock);
  const keys = Array.from({ length: 3000 }, (_, i) => `10.1.${Math.floor(i / 256)}.${i % 256}`);
  const before = keys.map((k) => p.route(k)!);
  keys.forEach((k, i) => assert.equal(p.route(k), before[i]));
  for (let i = 0; i < 3; i++) {
    const n = before.filter((u) => u.endsWith(String(40000 + i))).length;
    assert.ok(n > 800, `endpoint ${i} got ${n} of 3000 keys`);
  }
  p.failed(1);
  p.failed(1);
  assert.deepEqual(p.healthy(), [true, false, true]);
  keys.forEach((k, i) => {
    const now = p.route(k)!;
    if (before[i] === p.urls[1]) assert.notEqual(now, p.urls[1]);
    else assert.equal(now, before[i], 'a key of a healthy endpoint moved');
  });
});

test('rendezvous ranking is SHA-256 of (u32 BE url length, url, key), as the Rust client computes it', () => {
  const p = pool(3, 1000, { now: 0 });
  // Recomputed here by hand for one key, independently of Pool.ranked's code path.
  const score = (url: string, key: string) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(Buffer.byteLength(url));
    return createHash('sha256')
      .update(Buffer.concat([len, Buffer.from(url), Buffer.from(key)]))
      .digest()
      .readBigUInt64BE(0);
  };
  for (const key of ['203.0.113.7', '7\0default\0alice@example.com', '2001:db8::1']) {
    const expected = p.urls
      .map((u, i) => ({ s: score(u, key), i }))
      .sort((a, b) => (a.s < b.s ? 1 : a.s > b.s ? -1 : b.i - a.i))
      .map((x) => x.i);
    assert.deepEqual(p.ranked(key), expected);
  }
});

test('the breaker opens when all are ejected and half-opens after the back-off', () => {
  const clock = { now: 0 };
  const p = pool(1, 50, clock);
  assert.ok(!p.breakerOpen());
  const pick = p.pick('k', [])!;
  p.failed(pick);
  assert.ok(!p.breakerOpen(), 'one failure is below ejectAfter');
  p.failed(pick);
  assert.ok(p.breakerOpen());
  assert.equal(p.pick('k', []), undefined);
  clock.now += 60;
  const probe = p.pick('k', [])!;
  assert.equal(probe, 0);
  assert.equal(p.pick('k', []), undefined, 'a second probe while the first is in flight');
  p.failed(probe);
  assert.ok(p.breakerOpen(), 'a failed probe ejects again, for longer');
  clock.now += 60;
  assert.ok(p.breakerOpen(), 'the back-off doubled to 100 ms');
  clock.now += 60;
  const again = p.pick('k', [])!;
  p.answered(again);
  assert.ok(!p.breakerOpen());
  assert.deepEqual(p.healthy(), [true]);
});

test('traceparent: only well-formed W3C values', () => {
  assert.ok(validTraceparent('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'));
  assert.ok(!validTraceparent('00-00000000000000000000000000000000-00f067aa0ba902b7-01'));
  assert.ok(!validTraceparent('00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01'));
  assert.ok(!validTraceparent('ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'));
  assert.ok(!validTraceparent('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra'));
  assert.ok(!validTraceparent('hello'));
});

test('an answer never prints its device token', () => {
  const a = Answer.allow({ deviceToken: 'dt-secret-123', needsRehash: true });
  assert.equal(a.deviceToken, 'dt-secret-123');
  assert.ok(!JSON.stringify(a).includes('dt-secret-123'));
  assert.ok(!inspect(a).includes('dt-secret-123'));
  assert.ok(!inspect(a, { showHidden: false, depth: 5 }).includes('dt-secret-123'));
  assert.ok(!Object.keys(a).includes('deviceToken'));
  // A deny carries no allow-only signal.
  const d = Answer.deny(true, { deviceToken: 'x', needsRehash: true, passwordBreached: true, spraySuspected: true });
  assert.equal(d.deviceToken, undefined);
  assert.equal(d.needsRehash, false);
  assert.equal(d.passwordBreached, false);
  assert.equal(d.spraySuspected, true);
  assert.ok(Object.isFrozen(a));
});

test("a failure names the request field an INVALID_ARGUMENT's message begins with, and nothing else of the message", () => {
  const verify = governorMethod('verify');
  assert.deepEqual(answeredStatus(3, 'stored_hash has an unsupported format: expected …', verify.fields), {
    kind: 'answered',
    code: 3,
    field: 'stored_hash',
  });
  assert.deepEqual(answeredStatus(3, 'account.realm is not a configured realm', verify.fields), {
    kind: 'answered',
    code: 3,
    field: 'account.realm',
  });
  // Not a field of the request, another status, no message: no field.
  assert.deepEqual(answeredStatus(3, 'injected by the conformance endpoint', verify.fields), { kind: 'answered', code: 3 });
  assert.deepEqual(answeredStatus(3, 'challenge_token is required', verify.fields), { kind: 'answered', code: 3 });
  assert.deepEqual(answeredStatus(13, 'stored_hash is …', verify.fields), { kind: 'answered', code: 13 });
  assert.deepEqual(answeredStatus(3, undefined, verify.fields), { kind: 'answered', code: 3 });
  const a = Answer.failed({ kind: 'answered', code: 3, field: 'stored_hash' });
  assert.deepEqual([a.decision, a.retryable, a.failure, Object.isFrozen(a.failure)], ['deny', false, a.failure, true]);
  assert.deepEqual(JSON.parse(JSON.stringify(a)).failure, { kind: 'answered', code: 3, field: 'stored_hash' });
  assert.deepEqual(
    [Answer.failed({ kind: 'transport' }).retryable, Answer.failed({ kind: 'bad_input', field: 'password' }).retryable],
    [true, false],
  );
  assert.equal(Answer.deny(false).failure, undefined);
});

test('a challenge and a required change are denies of their own kind; the challenge token is never printed', () => {
  const c = Answer.challenge('ct-secret-456', 'new_device', { deviceToken: 'dt', needsRehash: true, passwordBreached: true, stepUp: true });
  assert.deepEqual([c.decision, c.kind, c.isAllowed(), c.retryable], ['deny', 'challenge', false, false]);
  assert.deepEqual([c.deviceToken, c.needsRehash, c.passwordBreached, c.stepUp], [undefined, false, true, true]);
  assert.equal(c.challengeToken, 'ct-secret-456');
  assert.ok(!JSON.stringify(c).includes('ct-secret-456'));
  assert.ok(!inspect(c).includes('ct-secret-456'));
  assert.ok(!Object.keys(c).includes('challengeToken'));
  assert.ok(Object.isFrozen(c));
  // A challenge without a token could never be confirmed: a plain deny.
  const empty = Answer.challenge('', 'new_device');
  assert.deepEqual([empty.kind, empty.challengeToken], ['deny', undefined]);
  const r = Answer.changeRequired({ deviceToken: 'dt', needsRehash: true, passwordBreached: true });
  assert.deepEqual([r.decision, r.kind, r.isAllowed()], ['deny', 'change_required', false]);
  assert.deepEqual([r.deviceToken, r.needsRehash, r.challengeToken, r.passwordBreached], [undefined, false, undefined, true]);
  // The other kinds follow the decision.
  assert.equal(Answer.allow().kind, 'allow');
  assert.equal(Answer.deny(true).kind, 'deny');
});

test('configuration errors name the setting', () => {
  const bad = (config: object, setting: RegExp) =>
    assert.throws(
      () => new Client(config),
      (e: unknown) => e instanceof ClientConfigError && setting.test(e.message),
    );
  bad({ endpoints: [] }, /client\.endpoints is empty/);
  bad({ endpoints: ['127.0.0.1:50051'] }, /client\.endpoints\[0\]/);
  bad({ endpoints: ['ftp://127.0.0.1:50051'] }, /client\.endpoints\[0\]/);
  bad({ maxRetries: 11 }, /client\.maxRetries is out of range/);
  bad({ retryBudgetRatio: 1.5 }, /client\.retryBudgetRatio/);
  bad({ callTimeoutMs: 0 }, /client\.callTimeoutMs/);
  bad({ ejectForMs: 10, ejectMaxMs: 5 }, /client\.ejectMaxMs/);
  bad({ endpoints: ['http://a:1', 'https://b:2'] }, /mixes/);
  bad({ tokenFile: '/nonexistent/token' }, /client\.token_file could not be read \(ENOENT\)/);
  bad({ keepaliveTimeMs: 999 }, /client\.keepaliveTimeMs is out of range/);
  bad({ keepaliveTimeoutMs: 1.5 }, /client\.keepaliveTimeoutMs is out of range/);
  bad({ keepalivePermitWithoutCalls: 'yes' }, /client\.keepalivePermitWithoutCalls must be true or false/);
  const c = new Client({ endpoints: ['http://127.0.0.1:1', 'http://[::1]:2'] });
  c.close();
  // protoDir is no longer read (the wire types are compiled in): a leftover setting is ignored.
  new Client({ protoDir: '/nonexistent' }).close();
});

test('keepalive: the documented defaults reach grpc-js, and the settings override them', () => {
  const defaults = resolveConfig({}).channelOptions;
  assert.deepEqual(
    [defaults['grpc.keepalive_time_ms'], defaults['grpc.keepalive_timeout_ms'], defaults['grpc.keepalive_permit_without_calls']],
    [30000, 10000, 1],
  );
  assert.deepEqual([DEFAULTS.keepaliveTimeMs, DEFAULTS.keepaliveTimeoutMs, DEFAULTS.keepalivePermitWithoutCalls], [30000, 10000, true]);
  const set = resolveConfig({ keepaliveTimeMs: 1000, keepaliveTimeoutMs: 500, keepalivePermitWithoutCalls: false }).channelOptions;
  assert.deepEqual(
    [set['grpc.keepalive_time_ms'], set['grpc.keepalive_timeout_ms'], set['grpc.keepalive_permit_without_calls']],
    [1000, 500, 0],
  );
});

test("express: the answer → outcome table, in the example gateway's order", () => {
  const kinds = (stepUp: boolean, answer: Answer) => {
    const o = outcomeOf({ stepUp }, 'user@example.com', 'stored-hash', answer);
    return o.kind === 'deny'
      ? `deny${o.retryable ? ' retryable' : ''}${o.captcha ? ' captcha' : ''}`
      : o.kind === 'challenge'
        ? `challenge${o.sendCode ? ' code' : ''}`
        : o.kind;
  };
  const table: Array<[Answer, string, string]> = [
    // answer, without stepUp, with stepUp
    [Answer.allow({ deviceToken: 'dt' }), 'allow', 'allow'],
    [Answer.allow({ deviceToken: 'dt', spraySuspected: true }), 'second_factor', 'second_factor'],
    [Answer.allow({ deviceToken: 'dt', stepUp: true }), 'second_factor', 'second_factor'],
    [Answer.allow({ networkThrottled: true }), 'deny captcha', 'deny captcha'],
    [Answer.allow({ stepUp: true, networkThrottled: true }), 'deny captcha', 'deny captcha'],
    [Answer.deny(true), 'deny retryable', 'deny retryable'],
    [Answer.deny(true, { networkThrottled: true }), 'deny retryable', 'deny retryable'],
    [Answer.deny(false), 'deny', 'challenge'],
    [Answer.deny(false, { stepUp: true }), 'deny captcha', 'challenge'],
    [Answer.deny(false, { networkThrottled: true }), 'deny captcha', 'deny captcha'],
    [Answer.challenge('ct', 'new_device'), 'challenge code', 'challenge code'],
    [Answer.changeRequired(), 'change_required', 'change_required'],
  ];
  for (const [answer, without, withStepUp] of table) {
    assert.equal(kinds(false, answer), without, JSON.stringify(answer));
    assert.equal(kinds(true, answer), withStepUp, `stepUp: ${JSON.stringify(answer)}`);
  }
  // A sprayed password needs a second factor: its own kind, carrying what that step needs.
  const sprayed = outcomeOf(
    { stepUp: false },
    'u',
    'h',
    Answer.allow({ spraySuspected: true, deviceToken: 'dt-secret', passwordBreached: true, needsRehash: true }),
  );
  assert.ok(sprayed.kind === 'second_factor', 'not an allow');
  assert.deepEqual(
    [sprayed.identifier, sprayed.passwordBreached, sprayed.needsRehash, sprayed.answer.deviceToken],
    ['u', true, true, 'dt-secret'],
  );
  assert.ok(!JSON.stringify(sprayed).includes('dt-secret'));
  const plain = outcomeOf({ stepUp: false }, 'u', 'h', Answer.allow({ deviceToken: 'dt' }));
  assert.ok(plain.kind === 'allow' && !('secondFactor' in plain), 'an allow alone means sign in');
  // The challenge's secrets are there for confirmDevice and never printed.
  const challenge = outcomeOf({ stepUp: false }, 'u', 'stored-hash', Answer.challenge('ct-secret', 'new_device'));
  assert.ok(challenge.kind === 'challenge');
  assert.deepEqual([challenge.challengeToken, challenge.storedHash], ['ct-secret', 'stored-hash']);
  assert.ok(!JSON.stringify(challenge).includes('ct-secret') && !inspect(challenge).includes('stored-hash'));
});

test('express: a route without the middleware refuses; bad settings name the setting', () => {
  assert.deepEqual([loginOutcome({ locals: {} } as never).kind, resetOutcome({ locals: {} } as never).sendMail], ['deny', false]);
  const client = new Client();
  try {
    const secret = 'k'.repeat(32);
    const ok = { client, realm: 'default', lookupUser: () => undefined, deviceCookie: { secret } };
    const bad = (options: object, setting: RegExp) =>
      assert.throws(
        () => portcullisExpress({ ...ok, ...options }),
        (e: unknown) => e instanceof PortcullisExpressError && setting.test(e.message),
      );
    bad({ client: {} }, /portcullisExpress\.client must be a Client/);
    bad({ realm: '' }, /portcullisExpress\.realm/);
    bad({ lookupUser: 'users' }, /portcullisExpress\.lookupUser must be a function/);
    bad({ deviceCookie: { secret, name: 'a b' } }, /portcullisExpress\.deviceCookie\.name is not a cookie name/);
    bad({ deviceCookie: { secret, maxAgeMs: 0 } }, /portcullisExpress\.deviceCookie\.maxAgeMs/);
    bad({ deviceCookie: undefined }, /portcullisExpress\.deviceCookie\.secret is required/);
    bad({ deviceCookie: {} }, /portcullisExpress\.deviceCookie\.secret is required/);
    bad({ deviceCookie: { secret: 'k'.repeat(31) } }, /portcullisExpress\.deviceCookie\.secret must be at least 32 bytes \(it has 31\)/);
    bad({ deviceCookie: { secret: new Uint8Array(16) } }, /portcullisExpress\.deviceCookie\.secret must be at least 32 bytes/);
    bad({ deviceCookie: { secret: 12345 } }, /portcullisExpress\.deviceCookie\.secret must be a string or a Uint8Array/);
    bad({ fields: { password: '' } }, /portcullisExpress\.fields\.password/);
    bad({ stepUp: 'yes' }, /portcullisExpress\.stepUp must be true or false/);
    bad({ onEvent: 'log' }, /portcullisExpress\.onEvent must be a function/);
    bad({ lookupTimeoutMs: 0 }, /portcullisExpress\.lookupTimeoutMs must be a whole number of milliseconds, 1 to 60000/);
    bad({ lookupTimeoutMs: 60001 }, /portcullisExpress\.lookupTimeoutMs/);
    const gate = portcullisExpress(ok);
    assert.match(gate.deviceCookieName(' Alice@Example.COM '), /^__Host-portcullis-device-[0-9a-f]{16}$/);
    assert.equal(gate.deviceCookieName(' Alice@Example.COM '), gate.deviceCookieName('alice@example.com'));
    assert.notEqual(gate.deviceCookieName('alice@example.com'), gate.deviceCookieName('bob@example.com'));
  } finally {
    client.close();
  }
});

test("express: the device cookie's name is keyed with deviceCookie.secret, so no one can compute it from a guessed identifier", () => {
  const client = new Client();
  try {
    const secret = 'k'.repeat(32);
    const ok = { client, realm: 'default', lookupUser: () => undefined, deviceCookie: { secret } };
    const named = portcullisExpress(ok).deviceCookieName('alice@example.com');
    // The unkeyed digest of the realm and the identifier, which anyone could compute.
    const unkeyed = createHash('sha256').update('default').update('\0').update('alice@example.com').digest('hex').slice(0, 16);
    assert.notEqual(named, `__Host-portcullis-device-${unkeyed}`);
    // Another secret names another cookie; the same secret as bytes, the same one.
    assert.notEqual(portcullisExpress({ ...ok, deviceCookie: { secret: 'j'.repeat(32) } }).deviceCookieName('alice@example.com'), named);
    assert.equal(portcullisExpress({ ...ok, deviceCookie: { secret: Buffer.from(secret) } }).deviceCookieName('alice@example.com'), named);
    assert.ok(!inspect(portcullisExpress(ok), { showHidden: true, depth: 9 }).includes(secret), 'the gate does not show its secret');
  } finally {
    client.close();
  }
});
