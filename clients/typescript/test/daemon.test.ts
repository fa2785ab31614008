// Against the real daemon binary (embedded store, temp directory, free port): a lockout
// holds across two gateway processes, a retried attempt is counted once, and a daemon
// killed mid-call is a deny within the call deadline.

import { after, before, test } from 'node:test';
import * as assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import * as net from 'node:net';
import * as path from 'node:path';
import { promisify } from 'node:util';

import { Client } from '../src';
import { Daemon, startDaemon } from './support/daemon';

const CHILD = path.join(__dirname, 'support', 'gateway-child.js');
/** Failed attempts the default realm allows before it locks (the sixth is denied). */
const ALLOWANCE = 5;

let daemon: Daemon;

before(async () => {
  daemon = await startDaemon();
});

after(async () => {
  await daemon?.stop();
});

function identifier(what: string): string {
  return `${what}-${randomUUID().slice(0, 8)}@example.com`;
}

async function gateway(
  op: 'record' | 'admit',
  id: string,
  count: number,
): Promise<Array<{ pid: number; decision: string; retryable: boolean }>> {
  const { stdout } = await promisify(execFile)(process.execPath, [CHILD, daemon.url, op, id, String(count)], { timeout: 30000 });
  return stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { pid: number; decision: string; retryable: boolean });
}

test('a lockout holds across two gateway processes', async () => {
  const id = identifier('lockout');
  // Two gateway processes spend one account's allowance at once: together they get
  // exactly ALLOWANCE allows, not ALLOWANCE each.
  const [a, b] = await Promise.all([gateway('record', id, 4), gateway('record', id, 4)]);
  assert.notEqual(a[0].pid, b[0].pid);
  const all = [...a, ...b];
  assert.equal(all.filter((x) => x.decision === 'allow').length, ALLOWANCE, JSON.stringify(all));
  assert.equal(all.filter((x) => x.decision === 'deny').length, 8 - ALLOWANCE);
  assert.ok(
    all.every((x) => !x.retryable),
    'a lockout is not "try again shortly"',
  );
  // A third process finds the door closed, without counting.
  const [admitted] = await gateway('admit', id, 1);
  assert.equal(admitted.decision, 'deny');
  assert.equal(await daemon.failures(id), 8);
  // Another account is untouched.
  const [other] = await gateway('record', identifier('other'), 1);
  assert.equal(other.decision, 'allow');
});

test('the daemon deduplicates by attempt_id (the control for the next test)', async () => {
  const c = new Client({ endpoints: [daemon.url], callTimeoutMs: 5000 });
  try {
    const same = identifier('same-id');
    await c.recordAttempt('default', same, { attemptId: 'fixed-id' });
    await c.recordAttempt('default', same, { attemptId: 'fixed-id' });
    assert.equal(await daemon.failures(same), 1);
    const fresh = identifier('fresh-ids');
    await c.recordAttempt('default', fresh);
    await c.recordAttempt('default', fresh);
    assert.equal(await daemon.failures(fresh), 2, 'each logical call has its own generated attempt_id');
  } finally {
    c.close();
  }
});

/**
 * A TCP proxy to the daemon that, on its first connection, lets the request through
 * but holds back everything the daemon sends once the request (recognized by
 * `marker` in its bytes) passed, then resets the connection: the daemon counted the
 * attempt and its answer never arrived. Later connections pass through.
 */
async function answerCuttingProxy(upstreamPort: number, marker: string) {
  let connections = 0;
  let cuts = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((down) => {
    connections += 1;
    const first = connections === 1;
    const up = net.connect(upstreamPort, '127.0.0.1');
    for (const s of [down, up]) {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => sockets.delete(s));
    }
    let requestPassed = false;
    down.on('data', (d: Buffer) => {
      up.write(d);
      if (first && !requestPassed && d.includes(marker)) {
        requestPassed = true;
        setTimeout(() => {
          cuts += 1;
          down.resetAndDestroy();
          up.destroy();
        }, 500);
      }
    });
    up.on('data', (d: Buffer) => {
      if (!requestPassed) down.write(d);
    });
    down.on('close', () => up.destroy());
    up.on('close', () => down.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    connections: () => connections,
    cuts: () => cuts,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

test('a retried attempt is counted once', async () => {
  const id = identifier('retried');
  const proxy = await answerCuttingProxy(daemon.port, id);
  const c = new Client({ endpoints: [proxy.url], callTimeoutMs: 5000 });
  try {
    const a = await c.recordAttempt('default', id);
    assert.equal(proxy.cuts(), 1, 'the first answer was cut off');
    assert.equal(c.stats().retries, 1, 'the client retried the transport failure');
    assert.equal(proxy.connections(), 2);
    assert.equal(a.decision, 'allow', 'the retry got the (deduplicated) answer');
    assert.equal(await daemon.failures(id), 1, 'counted once');
  } finally {
    c.close();
    await proxy.close();
  }
});

test('Verify against the daemon: an unknown account is a reject; a realm that does not exist is a deny', async () => {
  const c = new Client({ endpoints: [daemon.url], callTimeoutMs: 5000 });
  try {
    const id = identifier('verify');
    const a = await c.verify({ realm: 'default', identifier: id, password: 'guess', storedHash: '', clientKey: '198.51.100.9' });
    assert.equal(a.decision, 'deny');
    assert.equal(a.retryable, false);
    assert.equal(await daemon.failures(id), 1);
    const b = await c.verify({ realm: 'no-such-realm', identifier: id, password: 'guess', storedHash: '', clientKey: '198.51.100.9' });
    assert.equal(b.decision, 'deny');
    assert.equal((await c.clearAttempts('default', id, 'password_reset_completed')).decision, 'allow');
    assert.equal(await daemon.failures(id), 0);
  } finally {
    c.close();
  }
});

test('Verify against the daemon: a stored hash it cannot use is INVALID_ARGUMENT naming stored_hash, answered at once and not counted', async () => {
  const c = new Client({ endpoints: [daemon.url], callTimeoutMs: 5000 });
  try {
    const login = { realm: 'default', password: 'guess', clientKey: '198.51.100.11' };
    // A legacy format, and a bcrypt cost above the daemon's ceiling (14).
    for (const storedHash of [
      'md5$salt$5f4dcc3b5aa765d61d8327deb882cf99',
      '$2b$31$R9h/cIPz0gi.URNNX3kh2OPST9/PgBkqquzi.Ss7KIUgO2t0jWMUW',
    ]) {
      const id = identifier('unusable');
      const a = await c.verify({ ...login, identifier: id, storedHash });
      assert.deepEqual([a.decision, a.retryable, a.failure], ['deny', false, { kind: 'answered', code: 3, field: 'stored_hash' }]);
      assert.ok(!JSON.stringify(a).includes(storedHash.slice(0, 8)), 'the hash is not in the answer');
      assert.equal(await daemon.failures(id), 0, 'not counted');
    }
    const b = await c.verify({ ...login, identifier: identifier('realm'), storedHash: '', realm: 'no-such-realm' });
    assert.deepEqual(b.failure, { kind: 'answered', code: 3, field: 'account.realm' });
    // A verdict is no failure.
    assert.equal((await c.verify({ ...login, identifier: identifier('known'), storedHash: '' })).failure, undefined);
  } finally {
    c.close();
  }
});

for (const how of ['stopped, then killed', 'killed while hashing'] as const) {
  test(`a daemon killed (SIGKILL) mid-call gives a deny within the call deadline (${how})`, async () => {
    const own = await startDaemon();
    const deadline = 2000;
    const c = new Client({ endpoints: [own.url], callTimeoutMs: deadline });
    try {
      // A connection is up before the kill.
      assert.equal((await c.admit('default', identifier('warm'))).decision, 'allow');
      if (how === 'stopped, then killed') {
        own.process.kill('SIGSTOP');
      }
      const started = performance.now();
      const pending = Promise.all(
        Array.from({ length: 4 }, () =>
          c.verify({ realm: 'default', identifier: identifier('killed'), password: 'guess', storedHash: '', clientKey: '198.51.100.10' }),
        ),
      );
      await new Promise((r) => setTimeout(r, how === 'stopped, then killed' ? 200 : 20));
      own.process.kill('SIGKILL');
      const answers = await pending;
      const elapsed = performance.now() - started;
      assert.ok(elapsed < deadline + 400, `answered after ${elapsed.toFixed(0)} ms`);
      for (const a of answers) {
        assert.equal(a.decision, 'deny');
      }
      if (how === 'stopped, then killed') {
        // None could have been answered: each is a transport failure, retryable.
        assert.ok(answers.every((a) => a.retryable));
        assert.ok(c.stats().transportFailures >= 4);
      }
      // And after: the daemon is gone, every call is a retryable deny, quickly.
      const t = performance.now();
      const later = await c.recordAttempt('default', identifier('after'));
      assert.deepEqual([later.decision, later.retryable], ['deny', true]);
      assert.ok(performance.now() - t < deadline + 400);
    } finally {
      c.close();
      await own.stop();
    }
  });
}
